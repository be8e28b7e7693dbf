// Package wire is the JSON of Parley's realtime protocol: the
// frames a client sends, the frames the server answers and pushes, and the
// objects inside them. The gateway, the HTTP API and the Go client all speak
// through these types, so the protocol has one definition. Every HTTP body is
// the frame without t and rid.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/parleychat/parley"
)

// Request types.
const (
	TSend   = "send"
	TSync   = "sync"
	TAck    = "ack"
	TRead   = "read"
	TRecall = "recall"
	TConvs  = "convs"
	TFetch  = "fetch"
	TSub    = "sub"
	TEdit   = "edit"
	TReact  = "react"
	TSearch = "search"
	// TTyping and TPresence are signals: no reply on success.
	TTyping   = "typing"
	TPresence = "presence"
)

// Reply and push types.
const (
	TSent       = "sent"
	TPage       = "page"
	TAcked      = "acked"
	TReadOK     = "read_ok"
	TRecalled   = "recalled"
	TConvsReply = "convs"
	TFetched    = "fetched"
	TSubscribed = "subscribed"
	TEdited     = "edited"
	TReacted    = "reacted"
	TResults    = "results"
	TError      = "error"
	TEvent      = "event"
	THint       = "hint"
	TResync     = "resync"
	TGoaway     = "goaway"
)

// MaxRIDBytes bounds a request id: it is echoed, never interpreted. A
// string rid counts the bytes of its value, not its quotes.
const MaxRIDBytes = 128

// Request is a client frame. Which fields a type needs is in docs/protocol.md;
// numbers are pointers so a missing field is told from a zero.
type Request struct {
	T      string          `json:"t"`
	RID    json.RawMessage `json:"rid,omitempty"`
	Conv   string          `json:"conv,omitempty"`
	CMID   string          `json:"cmid,omitempty"`
	Body   string          `json:"body,omitempty"`
	After  *int64          `json:"after,omitempty"`
	Limit  *int            `json:"limit,omitempty"`
	Epoch  *int64          `json:"epoch,omitempty"`
	Seq    *int64          `json:"seq,omitempty"`
	Target *int64          `json:"target,omitempty"`
	Before string          `json:"before,omitempty"` // convs: the next of the previous page; search: a time (RFC 3339)

	ReplyTo     *int64   `json:"reply_to,omitempty"`    // send: the message it replies to
	Attachments []string `json:"attachments,omitempty"` // send: upload ids of files it carries
	Thread      *int64   `json:"thread,omitempty"`      // sync: read one thread
	Emoji       string   `json:"emoji,omitempty"`       // react
	On          *bool    `json:"on,omitempty"`          // react: set (true) or remove (false)

	Q      string `json:"q,omitempty"`      // search: the query
	From   string `json:"from,omitempty"`   // search: only this sender
	Cursor string `json:"cursor,omitempty"` // search: the next of the previous page

	State string `json:"state,omitempty"` // presence: this socket's state, online or away
}

// DecodeRequest parses one text frame. The error is an INVALID_ARGUMENT
// *parley.Error saying what is wrong; the returned request keeps whatever
// rid could be read, so the error frame can echo it.
//
// The raw bytes are checked first (CheckText): neither the WebSocket
// library nor encoding/json refuses invalid UTF-8 or a lone surrogate
// escape (json replaces both with U+FFFD).
//
// The common frame (a send, an ack…) is parsed without reflection
// (decodeFast); every other frame, and every malformed one, by
// encoding/json, so both accept and refuse exactly the same frames.
func DecodeRequest(frame []byte) (Request, error) {
	var r Request
	if err := CheckText(frame); err != nil {
		return r, err
	}
	if decodeFast(frame, &r) {
		return r.valid()
	}
	return decodeJSON(frame)
}

// decodeJSON is DecodeRequest by encoding/json, for a frame that passed
// CheckText.
func decodeJSON(frame []byte) (Request, error) {
	var r Request
	if err := json.Unmarshal(frame, &r); err != nil {
		// Keep the rid of a frame that is JSON but has a bad field.
		var probe struct {
			RID json.RawMessage `json:"rid"`
		}
		if json.Unmarshal(frame, &probe) == nil && validRID(probe.RID) {
			r = Request{RID: probe.RID}
		} else {
			r = Request{}
		}
		return r, parley.Errorf(parley.CodeInvalidArgument, "frame is not a JSON request object: %s", DecodeProblem(err))
	}
	return r.valid()
}

// valid checks a decoded request's rid and fields.
func (r Request) valid() (Request, error) {
	if !validRID(r.RID) {
		r.RID = nil
		return r, parley.Errorf(parley.CodeInvalidArgument, "rid must be a string of at most %d bytes or a number of at most %d characters", MaxRIDBytes, MaxRIDBytes)
	}
	if err := r.check(); err != nil {
		return r, err
	}
	return r, nil
}

// validRID: a string whose value (not its JSON token: quotes and escapes
// are not counted) has at most MaxRIDBytes bytes, or a number of at most
// MaxRIDBytes characters. rid is a token of a frame that passed
// CheckText (valid UTF-8, so a string without escapes is its value).
func validRID(rid json.RawMessage) bool {
	if len(rid) == 0 {
		return true
	}
	switch c := rid[0]; {
	case c == '"':
		if bytes.IndexByte(rid, '\\') < 0 { // no escapes: the value is what is between the quotes
			return len(rid)-2 <= MaxRIDBytes
		}
		var s string
		return json.Unmarshal(rid, &s) == nil && len(s) <= MaxRIDBytes
	case c == '-' || c >= '0' && c <= '9':
		var n json.Number
		return len(rid) <= MaxRIDBytes && json.Unmarshal(rid, &n) == nil
	}
	return false
}

// required lists, per request type, the fields that must be present.
var required = map[string][]string{
	TSend:     {"conv", "cmid", "body"},
	TSync:     {"conv", "after"},
	TAck:      {"conv", "seq"},
	TRead:     {"conv", "seq"},
	TRecall:   {"conv", "target", "cmid"},
	TConvs:    nil,
	TFetch:    {"conv", "seq"},
	TSub:      nil,
	TEdit:     {"conv", "target", "cmid", "body"},
	TReact:    {"conv", "target", "emoji", "on", "cmid"},
	TSearch:   {"q"},
	TTyping:   {"conv"},
	TPresence: {"state"},
}

func (r Request) check() error {
	need, ok := required[r.T]
	if !ok {
		if r.T == "" {
			return parley.Errorf(parley.CodeInvalidArgument, "frame has no type t")
		}
		return parley.Errorf(parley.CodeInvalidArgument, "unknown frame type %q", r.T)
	}
	for _, f := range need {
		missing := false
		switch f {
		case "conv":
			missing = r.Conv == ""
		case "cmid":
			missing = r.CMID == ""
		case "body":
			missing = r.Body == "" && (r.T != TSend || len(r.Attachments) == 0)
		case "after":
			missing = r.After == nil
		case "seq":
			missing = r.Seq == nil
		case "target":
			missing = r.Target == nil
		case "emoji":
			missing = r.Emoji == ""
		case "on":
			missing = r.On == nil
		case "q":
			missing = r.Q == ""
		case "state":
			missing = r.State == ""
		}
		if missing {
			return parley.Errorf(parley.CodeInvalidArgument, "%s needs %s", r.T, f)
		}
	}
	if r.Limit != nil && *r.Limit < 1 {
		return parley.Errorf(parley.CodeInvalidArgument, "limit must be at least 1")
	}
	return r.checkChat()
}

// checkChat validates the fields of edits, reactions, replies and threads
// completely, so a bad one (an emoji with whitespace, a 4001-character
// edit, a negative reply_to) is refused before any storage work.
func (r Request) checkChat() error {
	switch {
	case r.ReplyTo != nil && *r.ReplyTo < 1:
		return parley.Errorf(parley.CodeInvalidArgument, "reply_to must be a seq of at least 1")
	case len(r.Attachments) > 0 && r.T != TSend:
		return parley.Errorf(parley.CodeInvalidArgument, "only a send carries attachments")
	case len(r.Attachments) > 0:
		return parley.CheckAttachments(r.Attachments)
	case r.Thread != nil && *r.Thread < 1:
		return parley.Errorf(parley.CodeInvalidArgument, "thread must be a seq of at least 1")
	case r.T == TEdit:
		return parley.ValidateEdit(r.EditRequest())
	case r.T == TReact:
		return parley.ValidateReact(r.ReactRequest())
	case r.T == TSearch:
		_, err := r.SearchRequest()
		return err
	case r.T == TTyping:
		return parley.CheckConvID(r.Conv)
	case r.T == TPresence:
		return parley.CheckSocketState(r.State)
	}
	return nil
}

// SendRequest turns a send frame into the store's request.
func (r Request) SendRequest() parley.SendRequest {
	s := parley.SendRequest{Conv: r.Conv, CMID: r.CMID, Body: r.Body, Attachments: r.Attachments}
	if r.ReplyTo != nil {
		s.ReplyTo = *r.ReplyTo
	}
	return s
}

// EditRequest turns an edit frame into the store's request (the policy
// fields are the application layer's to fill).
func (r Request) EditRequest() parley.EditRequest {
	e := parley.EditRequest{Conv: r.Conv, CMID: r.CMID, Body: r.Body}
	if r.Target != nil {
		e.Target = *r.Target
	}
	return e
}

// ReactRequest turns a react frame into the store's request.
func (r Request) ReactRequest() parley.ReactRequest {
	x := parley.ReactRequest{Conv: r.Conv, CMID: r.CMID, Emoji: r.Emoji}
	if r.Target != nil {
		x.Target = *r.Target
	}
	if r.On != nil {
		x.On = *r.On
	}
	return x
}

// SyncRequest turns a sync frame into the store's request: an omitted
// limit is DefaultPage, a larger one is capped at MaxPage, an omitted epoch
// is 0 (not given).
func (r Request) SyncRequest() parley.SyncRequest {
	s := parley.SyncRequest{Conv: r.Conv, Limit: parley.DefaultPage}
	if r.After != nil {
		s.After = *r.After
	}
	if r.Limit != nil {
		s.Limit = min(*r.Limit, parley.MaxPage)
	}
	if r.Epoch != nil {
		s.Epoch = *r.Epoch
	}
	if r.Thread != nil {
		s.Thread = *r.Thread
	}
	return s
}

// ConvsRequest turns a convs frame into the store's request: an omitted
// limit is DefaultConvs (the store caps a larger one at MaxConvsPage), an
// omitted before is the first page, so a frame without either (an old
// client's) gets the first page.
func (r Request) ConvsRequest() parley.ConvsRequest {
	c := parley.ConvsRequest{Limit: parley.DefaultConvs, Before: r.Before}
	if r.Limit != nil {
		c.Limit = min(*r.Limit, parley.MaxConvsPage)
	}
	return c
}

// SearchRequest turns a search frame into the store's request: an omitted
// limit is 0 (the store's default page; it caps a larger one), before is
// parsed as a time (SearchBefore). The query itself is checked by
// parley.ParseSearch when the request is run.
func (r Request) SearchRequest() (parley.SearchRequest, error) {
	s := parley.SearchRequest{Query: r.Q, Conv: r.Conv, From: r.From, Cursor: r.Cursor}
	if r.Limit != nil {
		s.Limit = *r.Limit
	}
	var err error
	s.Before, err = SearchBefore(r.Before)
	return s, err
}

// SearchBefore parses a search's before: a time in RFC 3339 with a time
// zone, fractions of a second allowed ("2026-12-02T21:40:00Z",
// "2026-12-02T22:40:00.5+01:00"), after the first millisecond of 1970
// (before that no message can be); "" is no bound (the zero time).
func SearchBefore(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, parley.Errorf(parley.CodeInvalidArgument, "before must be a time in RFC 3339, such as 2026-12-02T21:40:00Z")
	}
	if t.Before(time.UnixMilli(1)) { // messages are stamped in Unix milliseconds from 0
		return time.Time{}, parley.Errorf(parley.CodeInvalidArgument, "before must be later than 1970-01-01T00:00:00.001Z")
	}
	return t, nil
}

// Event is an event on the wire. A message read with its derived state
// (sync, fetch) carries as_of and the fields after it; a pushed message
// has none of them, and a client treats its as_of as its own seq.
type Event struct {
	Conv     string   `json:"conv"`
	Seq      int64    `json:"seq"`
	MID      string   `json:"mid"`
	Kind     string   `json:"kind"`
	Sender   string   `json:"sender"`
	Device   string   `json:"device"`
	Body     string   `json:"body"`
	At       string   `json:"at"`
	Target   int64    `json:"target,omitempty"` // recall, edit, reaction
	User     string   `json:"user,omitempty"`
	Recalled bool     `json:"recalled,omitempty"`
	ReplyTo  int64    `json:"reply_to,omitempty"` // message: its thread root
	Mentions []string `json:"mentions,omitempty"` // message, edit
	Emoji    string   `json:"emoji,omitempty"`    // reaction
	On       *bool    `json:"on,omitempty"`       // reaction: always present

	Attachments []Attachment `json:"attachments,omitempty"` // message: the files it carries

	// Derived state of a message as read (parley.Derived).
	AsOf         *int64     `json:"as_of,omitempty"`
	EditSeq      int64      `json:"edit_seq,omitempty"`
	EditedAt     string     `json:"edited_at,omitempty"`
	Reactions    []Reaction `json:"reactions,omitempty"`
	Replies      int64      `json:"replies,omitempty"`
	LastReplySeq int64      `json:"last_reply_seq,omitempty"`
}

// Attachment is one file a message carries (parley.Attachment); the file
// itself is read at /api/files/{id}.
type Attachment struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	MIME   string `json:"mime"`
	SHA256 string `json:"sha256"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
}

// Reaction is one emoji's count on a message as read.
type Reaction struct {
	Emoji string `json:"emoji"`
	Count int64  `json:"count"`
	Me    bool   `json:"me"`
}

// TimeFormat is how times go on the wire: RFC 3339, UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FromEvent converts a store event. It is the one encoding of an event,
// for frames and HTTP bodies alike.
func FromEvent(e parley.Event) Event {
	w := Event{
		Conv: e.Conv, Seq: e.Seq, MID: e.MID, Kind: string(e.Kind),
		Sender: e.Sender, Device: e.Device, Body: e.Body,
		At:     e.At.UTC().Format(TimeFormat),
		Target: e.Target, User: e.User, Recalled: e.Recalled,
		ReplyTo: e.ReplyTo, Mentions: e.Mentions, Emoji: e.Emoji,
	}
	if e.Kind == parley.EventReaction {
		w.On = ptr(e.On)
	}
	for _, a := range e.Attachments {
		w.Attachments = append(w.Attachments, Attachment(a))
	}
	if d := e.Derived; d != nil {
		w.AsOf = ptr(d.AsOf)
		w.EditSeq, w.Replies, w.LastReplySeq = d.EditSeq, d.Replies, d.LastReplySeq
		if d.EditSeq != 0 && !d.EditedAt.IsZero() {
			w.EditedAt = d.EditedAt.UTC().Format(TimeFormat)
		}
		for _, r := range d.Reactions {
			w.Reactions = append(w.Reactions, Reaction{Emoji: r.Emoji, Count: r.Count, Me: r.Me})
		}
	}
	return w
}

// Time parses At.
func (e Event) Time() (time.Time, error) { return time.Parse(TimeFormat, e.At) }

// Conv is one entry of a convs reply.
type Conv struct {
	Conv         string `json:"conv"`
	Title        string `json:"title"`
	Kind         string `json:"kind"`
	Head         int64  `json:"head"`
	MinSeq       int64  `json:"min_seq"`
	Delivered    int64  `json:"delivered"`
	Read         int64  `json:"read"`
	Unread       int64  `json:"unread"`
	UnreadCapped bool   `json:"unread_capped,omitempty"`
	// MentionsUnread counts the unread messages and edits that mention
	// the caller (always present).
	MentionsUnread int64  `json:"mentions_unread"`
	Epoch          int64  `json:"epoch"`
	Member         bool   `json:"member"`
	Last           *Event `json:"last,omitempty"`
}

// FromConvSummary converts a store summary.
func FromConvSummary(c parley.ConvSummary) Conv {
	w := Conv{
		Conv: c.Conv, Title: c.Title, Kind: string(c.Kind), Head: c.Head, MinSeq: c.MinSeq,
		Delivered: c.Delivered, Read: c.Read, Unread: c.Unread, UnreadCapped: c.UnreadCapped,
		MentionsUnread: c.MentionsUnread, Epoch: c.Epoch, Member: c.Member,
	}
	if c.Last != nil {
		last := FromEvent(*c.Last)
		w.Last = &last
	}
	return w
}

// Frame is any server frame: replies echo rid, pushes have none. The
// slices use omitzero, so an empty page still says "events":[] while other
// frames leave the field out. The
// encoder leaves out what a type does not carry; a decoder (the client)
// reads every type into it.
type Frame struct {
	T   string          `json:"t,omitempty"`
	RID json.RawMessage `json:"rid,omitempty"`

	Conv  string `json:"conv,omitempty"`
	Seq   *int64 `json:"seq,omitempty"`
	MID   string `json:"mid,omitempty"`
	Dup   *bool  `json:"dup,omitempty"`
	Epoch *int64 `json:"epoch,omitempty"`

	Events    []Event `json:"events,omitzero"`
	NextAfter *int64  `json:"next_after,omitempty"`
	HasMore   *bool   `json:"has_more,omitempty"`
	Head      *int64  `json:"head,omitempty"`
	MinSeq    *int64  `json:"min_seq,omitempty"`
	Trimmed   *bool   `json:"trimmed,omitempty"`

	Delivered *int64 `json:"delivered,omitempty"`
	Read      *int64 `json:"read,omitempty"`
	Convs     []Conv `json:"convs,omitzero"`
	Next      string `json:"next,omitempty"` // convs: the before of the next page; results: the cursor of the next
	Ev        *Event `json:"ev,omitempty"`
	Hits      []Hit  `json:"hits,omitzero"` // results

	// Signals: typing (conv, user, until) and presence (user, state,
	// last_seen) pushes.
	User     string `json:"user,omitempty"`
	Until    string `json:"until,omitempty"`
	State    string `json:"state,omitempty"`
	LastSeen string `json:"last_seen,omitempty"`

	Code         parley.Code `json:"code,omitempty"`
	Msg          string      `json:"msg,omitempty"`
	RetryAfterMS int64       `json:"retry_after_ms,omitempty"`
	RequestID    string      `json:"request_id,omitempty"`
}

func ptr[T any](v T) *T { return &v }

// Sent is the reply to send.
func Sent(s parley.Sent) Frame {
	return Frame{T: TSent, Conv: s.Conv, Seq: ptr(s.Seq), MID: s.MID, Dup: ptr(s.Dup), Epoch: ptr(s.Epoch)}
}

// Page is the reply to sync. Events is never null on the wire.
func Page(p parley.Page) Frame {
	evs := make([]Event, len(p.Events))
	for i, e := range p.Events {
		evs[i] = FromEvent(e)
	}
	return Frame{T: TPage, Conv: p.Conv, Events: evs, NextAfter: ptr(p.NextAfter), HasMore: ptr(p.HasMore),
		Head: ptr(p.Head), MinSeq: ptr(p.MinSeq), Trimmed: ptr(p.Trimmed), Epoch: ptr(p.Epoch)}
}

// Acked is the reply to ack.
func Acked(conv string, delivered int64) Frame {
	return Frame{T: TAcked, Conv: conv, Delivered: ptr(delivered)}
}

// ReadOK is the reply to read.
func ReadOK(conv string, read int64) Frame {
	return Frame{T: TReadOK, Conv: conv, Read: ptr(read)}
}

// Recalled is the reply to recall.
func Recalled(r parley.Recalled) Frame {
	return Frame{T: TRecalled, Conv: r.Conv, Seq: ptr(r.Seq), Dup: ptr(r.Dup)}
}

// Convs is the reply to convs: one page, with has_more and, when it is
// true, next. Convs is never null on the wire.
func Convs(p parley.ConvsPage) Frame {
	out := make([]Conv, len(p.Convs))
	for i, c := range p.Convs {
		out[i] = FromConvSummary(c)
	}
	return Frame{T: TConvsReply, Convs: out, HasMore: ptr(p.HasMore), Next: p.Next}
}

// Edited is the reply to edit.
func Edited(e parley.Edited) Frame {
	return Frame{T: TEdited, Conv: e.Conv, Seq: ptr(e.Seq), Dup: ptr(e.Dup)}
}

// Reacted is the reply to react.
func Reacted(r parley.Reacted) Frame {
	return Frame{T: TReacted, Conv: r.Conv, Seq: ptr(r.Seq), Dup: ptr(r.Dup)}
}

// Hit is one message a search found: the event as the caller reads it
// (with its derived state, as sync reads it: body is the version that
// matched) and where in its body the query matched.
type Hit struct {
	Ev         Event       `json:"ev"`
	Highlights []Highlight `json:"highlights"`
}

// Highlight is a matched range of a hit's body in Unicode code points,
// not bytes or UTF-16 units: [start, end).
type Highlight struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Results is the reply to search: one page of hits, newest first, and
// next (the cursor of the following page) when more may follow. Hits and
// each hit's highlights are never null on the wire.
func Results(p parley.SearchPage) Frame {
	hits := make([]Hit, len(p.Hits))
	for i, h := range p.Hits {
		hl := make([]Highlight, len(h.Highlights))
		for j, x := range h.Highlights {
			hl[j] = Highlight{Start: x.Start, End: x.End}
		}
		hits[i] = Hit{Ev: FromEvent(h.Event), Highlights: hl}
	}
	return Frame{T: TResults, Hits: hits, Next: p.Next}
}

// Version is one version of a message's text on the wire.
type Version struct {
	Seq  int64  `json:"seq"`
	Body string `json:"body"`
	At   string `json:"at"`
}

// Versions is the body of GET /api/convs/{id}/messages/{seq}/versions:
// the versions of a message the caller may see, oldest first; none (an
// empty list, never null) when it is recalled.
type Versions struct {
	Conv     string    `json:"conv"`
	Seq      int64     `json:"seq"`
	Recalled bool      `json:"recalled"`
	Versions []Version `json:"versions"`
}

// FromVersions converts what the store read.
func FromVersions(conv string, seq int64, vs []parley.Version, recalled bool) Versions {
	out := Versions{Conv: conv, Seq: seq, Recalled: recalled, Versions: make([]Version, len(vs))}
	for i, v := range vs {
		out.Versions[i] = Version{Seq: v.Seq, Body: v.Body, At: v.At.UTC().Format(TimeFormat)}
	}
	return out
}

// Fetched is the reply to fetch.
func Fetched(e parley.Event) Frame {
	ev := FromEvent(e)
	return Frame{T: TFetched, Conv: e.Conv, Ev: &ev}
}

// Subscribed is the reply to sub.
func Subscribed() Frame { return Frame{T: TSubscribed} }

// Error is an error frame. msg is for people; clients read code.
func Error(code parley.Code, msg string) Frame {
	return Frame{T: TError, Code: code, Msg: msg}
}

// EventPush is the push of one committed event.
func EventPush(e parley.Event) Frame {
	ev := FromEvent(e)
	return Frame{T: TEvent, Ev: &ev}
}

// Hint tells the client to sync conv (head is what the server knows of it);
// read is set when the user's read cursor moved.
func Hint(conv string, head int64, read *int64) Frame {
	return Frame{T: THint, Conv: conv, Head: ptr(head), Read: read}
}

// Typing tells a member that user is typing in conv until until.
func Typing(conv, user string, until time.Time) Frame {
	return Frame{T: TTyping, Conv: conv, User: user, Until: until.UTC().Format(TimeFormat)}
}

// PresencePush tells that a user's presence changed. last_seen is left
// out for a user never seen.
func PresencePush(p parley.Presence) Frame {
	f := Frame{T: TPresence, User: p.User, State: string(p.State)}
	if !p.LastSeen.IsZero() {
		f.LastSeen = p.LastSeen.UTC().Format(TimeFormat)
	}
	return f
}

// UserPresence is one user's entry of GET /api/presence.
type UserPresence struct {
	User     string `json:"user"`
	State    string `json:"state"`
	LastSeen string `json:"last_seen,omitempty"`
}

// PresenceList is the body of GET /api/presence: the users asked for that
// the caller may see, ordered by user id, each once. Never null.
type PresenceList struct {
	Presence []UserPresence `json:"presence"`
}

// FromPresence converts what the store read.
func FromPresence(ps []parley.Presence) PresenceList {
	out := PresenceList{Presence: make([]UserPresence, len(ps))}
	for i, p := range ps {
		f := PresencePush(p)
		out.Presence[i] = UserPresence{User: f.User, State: f.State, LastSeen: f.LastSeen}
	}
	return out
}

// Resync tells the client to sync every conversation.
func Resync() Frame { return Frame{T: TResync} }

// Goaway tells the client to reconnect, elsewhere if it can.
func Goaway() Frame { return Frame{T: TGoaway} }

// MarshalFrame encodes a frame, without the trailing newline of
// json.Encoder.
func MarshalFrame(f Frame) []byte {
	b, err := marshal(f)
	if err != nil {
		panic("wire: frame does not encode: " + err.Error()) // only our own types go in
	}
	return b
}

// DecodeFrame parses a server frame (clients).
func DecodeFrame(b []byte) (Frame, error) {
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("wire: bad server frame: %w", err)
	}
	if f.T == "" {
		return f, errors.New("wire: server frame without t")
	}
	return f, nil
}
