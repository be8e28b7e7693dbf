package client

import (
	"cmp"
	"slices"
	"sync"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Timeline is an application's local copy of the messages of its
// conversations with their derived state (edits, reactions, replies),
// kept by folding the events the Client hands over. It is a Handler
// (Events and Reset; the rest ignored), so it can be Options.Handler
// itself or be called from one.
//
// The fold is the protocol's client rule. A message read with derived
// state (sync, fetch) carries as_of, the head its state was computed at; a
// pushed message has none and counts as of its own seq. An event folds
// into the message it concerns only when its seq is above that as_of (the
// events at or below it are already in): an edit also only when it is
// newer than the edit shown; a reaction counts per (user, emoji) as a
// change of state; a reply raises its root's replies and last_reply_seq;
// a recall blanks the message, its edits and its reactions. Folding is
// idempotent by seq, so a page handed over again after a crash (see the
// package doc) changes nothing.
//
// Its methods are safe for concurrent use.
type Timeline struct {
	NopHandler

	me    string
	mu    sync.Mutex
	convs map[string]map[int64]*Message
}

// Message is a message as the timeline holds it.
type Message struct {
	Conv     string
	Seq      int64
	MID      string
	Sender   string
	Device   string
	Body     string // the newest visible version; empty once recalled
	At       string
	Recalled bool
	ReplyTo  int64    // the thread root it replies to (0: none)
	Mentions []string // the members it mentions

	AsOf         int64  // the highest seq its state includes
	EditSeq      int64  // the edit Body shows (0: the original)
	EditedAt     string // that edit's time
	Reactions    []wire.Reaction
	Replies      int64 // on a thread root
	LastReplySeq int64

	// reacts is the state per (user, emoji) that reaction events after
	// AsOf set, with the seq that set it.
	reacts map[reactKey]reactState
}

type reactKey struct{ user, emoji string }

type reactState struct {
	on  bool
	seq int64
}

// NewTimeline returns an empty timeline for user me (whose reactions are
// the Me of a count).
func NewTimeline(me string) *Timeline {
	return &Timeline{me: me, convs: map[string]map[int64]*Message{}}
}

// Events folds evs (Handler).
func (tl *Timeline) Events(conv string, _ int64, evs []wire.Event) { tl.Apply(conv, evs...) }

// Reset drops conv's messages (Handler): the server rebuilt it.
func (tl *Timeline) Reset(conv string, _ parley.Code) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	delete(tl.convs, conv)
}

// Message returns a copy of the message at seq of conv.
func (tl *Timeline) Message(conv string, seq int64) (Message, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	m, ok := tl.convs[conv][seq]
	if !ok {
		return Message{}, false
	}
	return m.copy(), true
}

// Messages returns copies of conv's messages, ascending by seq.
func (tl *Timeline) Messages(conv string) []Message {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := make([]Message, 0, len(tl.convs[conv]))
	for _, m := range tl.convs[conv] {
		out = append(out, m.copy())
	}
	slices.SortFunc(out, func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

func (m *Message) copy() Message {
	c := *m
	c.Mentions = slices.Clone(m.Mentions)
	c.Reactions = slices.Clone(m.Reactions)
	c.reacts = nil
	return c
}

// Apply folds events of conv in the order given (ascending seq, as the
// Client hands them over; a fetched message may come in any time).
func (tl *Timeline) Apply(conv string, evs ...wire.Event) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	msgs := tl.convs[conv]
	if msgs == nil {
		msgs = map[int64]*Message{}
		tl.convs[conv] = msgs
	}
	for _, ev := range evs {
		switch parley.EventKind(ev.Kind) {
		case parley.EventMessage:
			tl.message(msgs, ev)
		case parley.EventEdit:
			if m := msgs[ev.Target]; m != nil && !m.Recalled && !ev.Recalled && ev.Seq > m.AsOf && ev.Seq > m.EditSeq {
				m.Body, m.EditSeq, m.EditedAt = ev.Body, ev.Seq, ev.At
			}
		case parley.EventReaction:
			if m := msgs[ev.Target]; m != nil && !m.Recalled && ev.Seq > m.AsOf {
				m.react(ev, tl.me)
			}
		case parley.EventRecall:
			recall(msgs, ev)
		}
	}
}

// message stores a message event, unless the timeline holds it read at
// the same or a later as_of, and counts a reply into its root.
func (tl *Timeline) message(msgs map[int64]*Message, ev wire.Event) {
	asOf := ev.Seq
	if ev.AsOf != nil {
		asOf = *ev.AsOf
	}
	if old := msgs[ev.Seq]; old != nil && old.AsOf >= asOf {
		return
	}
	msgs[ev.Seq] = &Message{
		Conv: ev.Conv, Seq: ev.Seq, MID: ev.MID, Sender: ev.Sender, Device: ev.Device, Body: ev.Body, At: ev.At,
		Recalled: ev.Recalled, ReplyTo: ev.ReplyTo, Mentions: slices.Clone(ev.Mentions),
		AsOf: asOf, EditSeq: ev.EditSeq, EditedAt: ev.EditedAt, Reactions: slices.Clone(ev.Reactions),
		Replies: ev.Replies, LastReplySeq: ev.LastReplySeq,
	}
	if r := msgs[ev.ReplyTo]; ev.ReplyTo != 0 && r != nil && !ev.Recalled && ev.Seq > r.AsOf && ev.Seq > r.LastReplySeq {
		r.Replies++
		r.LastReplySeq = ev.Seq
	}
}

// react folds a reaction event with seq above m.AsOf. The server writes a
// reaction event only when it changes its (user, emoji) state, so the
// first one after AsOf moves the count by one; later ones move it only
// when they change the state this timeline last folded.
func (m *Message) react(ev wire.Event, me string) {
	on := ev.On != nil && *ev.On
	k := reactKey{ev.Sender, ev.Emoji}
	prev, seen := m.reacts[k]
	if seen && ev.Seq <= prev.seq {
		return
	}
	if m.reacts == nil {
		m.reacts = map[reactKey]reactState{}
	}
	m.reacts[k] = reactState{on: on, seq: ev.Seq}
	var delta int64
	switch {
	case seen && prev.on == on:
	case on:
		delta = 1
	default:
		delta = -1
	}
	i := slices.IndexFunc(m.Reactions, func(r wire.Reaction) bool { return r.Emoji == ev.Emoji })
	if i < 0 {
		if delta <= 0 {
			return
		}
		m.Reactions = append(m.Reactions, wire.Reaction{Emoji: ev.Emoji})
		i = len(m.Reactions) - 1
	}
	r := &m.Reactions[i]
	r.Count += delta
	if ev.Sender == me {
		r.Me = on
	}
	if r.Count <= 0 {
		m.Reactions = slices.Delete(m.Reactions, i, i+1)
	}
}

// recall blanks the recalled message (its text, edits, mentions and
// reactions) and takes a reply out of its root's count when the root's
// state did not already leave it out.
func recall(msgs map[int64]*Message, ev wire.Event) {
	m := msgs[ev.Target]
	if m == nil || m.Recalled {
		return
	}
	m.Recalled, m.Body, m.EditSeq, m.EditedAt = true, "", 0, ""
	m.Mentions, m.Reactions, m.reacts = nil, nil, nil
	if r := msgs[m.ReplyTo]; m.ReplyTo != 0 && r != nil && ev.Seq > r.AsOf && r.Replies > 0 {
		r.Replies--
	}
}
