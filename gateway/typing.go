package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Signals. Typing and presence are not events: they are pushed to the
// subscribed sockets that may see them, never stored as events, never
// synced, and dropped rather than queued when a socket is behind. Their
// notices (parley.NoticeTyping, parley.NoticePresence) come from the bus
// (or this gateway) to Notify, which hands them to one goroutine
// (signalLoop) through a bounded queue: deciding an audience reads the
// store, and Notify must not block. A notice that finds the queue full is
// dropped (a typing line missed; a presence the next change or a GET
// corrects).

// signalQueue bounds the signal notices waiting for signalLoop.
const signalQueue = 4096

// signals is the hub's signal state.
type signals struct {
	in chan parley.Notice

	mu sync.Mutex
	// sent: when this gateway last accepted a typing frame of (user,
	// conv), for the TypingEvery throttle.
	sent map[typingKey]time.Time
	// pushed: the until of the last typing notice of (conv, user) pushed
	// here, so that a notice heard twice (its own echo, two buses) is
	// pushed once.
	pushed map[typingKey]time.Time
}

type typingKey struct{ user, conv string }

func newSignals() *signals {
	return &signals{in: make(chan parley.Notice, signalQueue), sent: map[typingKey]time.Time{}, pushed: map[typingKey]time.Time{}}
}

// allowTyping reports whether a typing frame of user in conv at now passes
// the throttle, and counts it when it does.
func (s *signals) allowTyping(user, conv string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := typingKey{user, conv}
	if last, ok := s.sent[k]; ok && now.Sub(last) < parley.TypingEvery {
		return false
	}
	s.sent[k] = now
	return true
}

// freshTyping reports whether n is a typing notice not pushed here yet.
func (s *signals) freshTyping(n parley.Notice) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := typingKey{n.User, n.Conv}
	if last, ok := s.pushed[k]; ok && !n.At.After(last) {
		return false
	}
	s.pushed[k] = n.At
	return true
}

// prune forgets throttle and dedupe entries that can no longer matter.
func (s *signals) prune(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.sent {
		if now.Sub(t) >= parley.TypingEvery {
			delete(s.sent, k)
		}
	}
	for k, t := range s.pushed {
		if now.After(t) {
			delete(s.pushed, k)
		}
	}
}

// signal queues a signal notice for signalLoop; it never blocks.
func (h *Hub) signal(n parley.Notice) {
	select {
	case h.sig.in <- n:
	default:
		h.stats.SignalsDropped.Add(1)
	}
}

// signalLoop pushes the signal notices, one at a time, until ctx ends.
func (h *Hub) signalLoop(ctx context.Context) {
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-prune.C:
			h.sig.prune(time.Now())
			h.pres.prune(time.Now())
			continue
		case n := <-h.sig.in:
			switch n.Kind {
			case parley.NoticeTyping:
				h.pushTyping(ctx, n)
			case parley.NoticePresence:
				h.pushPresence(ctx, n)
			}
		}
	}
}

// typing answers a typing frame that passed the throttle (conn.handle):
// no reply on success, nothing at all in a conversation of more than
// MaxTypingMembers members; NOT_MEMBER (only to a frame with a rid) when
// the caller holds no open period in conv.
func (c *conn) typing(ctx context.Context, req wire.Request) {
	h := c.h
	now := time.Now()
	members, err := h.store.ConvMembers(ctx, req.Conv)
	if parley.ErrorCode(err) == parley.CodeNotFound {
		err = parley.ErrNotMember
	}
	if err == nil && !slices.Contains(members, c.p.User) {
		err = parley.ErrNotMember
	}
	if err != nil {
		c.signalErr(req.RID, err, req.T)
		return
	}
	if len(members) > parley.MaxTypingMembers {
		return
	}
	until := time.UnixMilli(now.Add(parley.TypingFor).UnixMilli()).UTC()
	h.Publish(parley.TypingNotice(req.Conv, c.p.User, until))
}

// signalErr answers a signal frame's error when the frame has a rid: a
// client that asks for no answer gets none.
func (c *conn) signalErr(rid json.RawMessage, err error, op string) {
	if len(rid) > 0 {
		c.replyErr(rid, err, op)
	}
}

// pushTyping pushes a typing notice to the subscribed sockets watching its
// conversation whose users hold an open period in it now, the typist's
// own excepted.
func (h *Hub) pushTyping(ctx context.Context, n parley.Notice) {
	if !time.Now().Before(n.At) || !h.sig.freshTyping(n) {
		return // over already, or pushed
	}
	var conns []*conn
	for _, c := range h.watchers(n.Conv) {
		if c.p.User != n.User {
			conns = append(conns, c)
		}
	}
	if len(conns) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, h.timeout())
	members, err := h.store.ConvMembers(rctx, n.Conv)
	cancel()
	if err != nil {
		if ctx.Err() == nil && parley.ErrorCode(err) != parley.CodeNotFound {
			h.log.Warn("typing: members read failed; not pushed", "conv", n.Conv, "err", err)
		}
		return
	}
	f := &frame{b: wire.MarshalFrame(wire.Typing(n.Conv, n.User, n.At))}
	for _, c := range conns {
		if _, ok := slices.BinarySearch(members, c.p.User); ok {
			c.signal(f)
		}
	}
}

// signal queues a signal push unless the socket's queue is over its
// high-water mark: a signal is dropped rather than held behind events.
func (c *conn) signal(f *frame) {
	if c.addIf(queued{f: f, push: true}, c.underHighWater) {
		c.h.stats.Signals.Add(1)
	}
}
