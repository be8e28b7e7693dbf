package httpapi_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// chat is a server with ana, bob and carl, the group g of ana and bob with
// ana's message "hello" at seq 3, and the group h of ana and carl.
type chat struct {
	*server
	ana, bob, carl string
}

func startChat(t *testing.T, store parley.Store, config string) chat {
	t.Helper()
	s := start(t, store, serverOptions{config: config})
	c := chat{server: s, ana: s.user("ana", parley.RoleUser), bob: s.user("bob", parley.RoleUser), carl: s.user("carl", parley.RoleUser)}
	ctx := context.Background()
	ana := parley.Principal{User: "ana", DeviceID: "d0"}
	for _, nc := range []parley.NewConversation{
		{ID: "g", Kind: parley.KindGroup, Title: "g", Members: []string{"bob"}},
		{ID: "h", Kind: parley.KindGroup, Title: "h", Members: []string{"carl"}},
	} {
		if _, err := store.CreateConversation(ctx, ana, nc); err != nil {
			t.Fatal(err)
		}
	}
	c.do("POST", "/api/convs/g/messages", c.ana, map[string]string{"body": "hello"}, "Idempotency-Key", "m1").want(201)
	return c
}

// events syncs conv as token and returns the page's events by seq.
func (c chat) events(token, conv, query string) map[int64]wire.Event {
	c.t.Helper()
	f := c.do("GET", "/api/convs/"+conv+"/events?after=0"+query, token, nil).want(200).frame()
	out := map[int64]wire.Event{}
	for _, ev := range f.Events {
		out[ev.Seq] = ev
	}
	return out
}

// keyed writes one keyed request and checks its status and reply frame.
func (c chat) keyed(method, path, token, key string, body any, status int) wire.Frame {
	c.t.Helper()
	return c.do(method, path, token, body, "Idempotency-Key", key).want(status).frame()
}

// TestEdit: PATCH edits the sender's message (201 new, 200 replay), bad
// input is refused before any storage work, a message read afterwards
// carries the new text with edit_seq and edited_at, the edit event the
// mentions it newly makes, and versions lists both texts. The edit frame
// is the same write.
func TestEdit(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		c := startChat(t, open(t, parley.Options{}), "")
		f := c.keyed("PATCH", "/api/convs/g/messages/3", c.ana, "e1", map[string]string{"body": "hello @bob"}, 201)
		if f.Conv != "g" || *f.Seq != 4 || *f.Dup {
			t.Fatalf("edit: %+v", f)
		}
		f = c.keyed("PATCH", "/api/convs/g/messages/3", c.ana, "e1", map[string]string{"body": "hello @bob"}, 200)
		if *f.Seq != 4 || !*f.Dup {
			t.Fatalf("edit replay: %+v", f)
		}
		c.do("PATCH", "/api/convs/g/messages/3", c.ana, map[string]string{"body": "other"}, "Idempotency-Key", "e1").want(422, parley.CodeIdempotencyMismatch)
		head := c.head("g")
		for _, tc := range []struct {
			name, path, token string
			body              any
			status            int
			code              parley.Code
		}{
			{"4001 characters", "/api/convs/g/messages/3", c.ana, map[string]string{"body": strings.Repeat("x", 4001)}, 400, parley.CodeInvalidArgument},
			{"invalid UTF-8", "/api/convs/g/messages/3", c.ana, "{\"body\":\"\xff\"}", 400, parley.CodeInvalidArgument},
			{"empty body", "/api/convs/g/messages/3", c.ana, map[string]string{"body": ""}, 400, parley.CodeInvalidArgument},
			{"unknown field", "/api/convs/g/messages/3", c.ana, map[string]any{"body": "x", "target": 3}, 400, parley.CodeInvalidArgument},
			{"seq not a number", "/api/convs/g/messages/x", c.ana, map[string]string{"body": "x"}, 400, parley.CodeInvalidArgument},
			{"not the sender", "/api/convs/g/messages/3", c.bob, map[string]string{"body": "mine"}, 403, parley.CodeNotSender},
			{"not a message", "/api/convs/g/messages/1", c.ana, map[string]string{"body": "x"}, 404, parley.CodeNotFound},
			{"no such seq", "/api/convs/g/messages/99", c.ana, map[string]string{"body": "x"}, 404, parley.CodeNotFound},
			{"not a member", "/api/convs/g/messages/3", c.carl, map[string]string{"body": "x"}, 404, parley.CodeNotMember},
		} {
			c.do("PATCH", tc.path, tc.token, tc.body, "Idempotency-Key", "bad-"+tc.name).want(tc.status, tc.code)
		}
		c.do("PATCH", "/api/convs/g/messages/3", c.ana, map[string]string{"body": "x"}).want(400, parley.CodeInvalidArgument)
		if got := c.head("g"); got != head {
			t.Errorf("refused edits moved the head from %d to %d", head, got)
		}

		evs := c.events(c.bob, "g", "")
		msg, edit := evs[3], evs[4]
		if msg.Body != "hello @bob" || msg.EditSeq != 4 || msg.EditedAt == "" || msg.AsOf == nil || *msg.AsOf != 4 {
			t.Errorf("edited message as read: %+v", msg)
		}
		if edit.Kind != "edit" || edit.Target != 3 || edit.Body != "hello @bob" || fmt.Sprint(edit.Mentions) != "[bob]" || edit.AsOf != nil {
			t.Errorf("edit event: %+v", edit)
		}
		var v wire.Versions
		c.do("GET", "/api/convs/g/messages/3/versions", c.bob, nil).want(200).decode(&v)
		if v.Conv != "g" || v.Seq != 3 || v.Recalled || len(v.Versions) != 2 || v.Versions[0].Body != "hello" || v.Versions[1].Seq != 4 {
			t.Errorf("versions: %+v", v)
		}
		c.do("GET", "/api/convs/g/messages/3/versions", c.carl, nil).want(404, parley.CodeNotMember)

		// The frame twin.
		ws := dialWS(t, c.server, c.ana)
		ws.send(map[string]any{"t": "edit", "rid": "e", "conv": "g", "target": 3, "cmid": "e2", "body": "third"})
		if f := ws.next(wire.TEdited); string(f.RID) != `"e"` || f.Conv != "g" || *f.Seq != 5 || *f.Dup {
			t.Errorf("edited frame: %+v", f)
		}
		for _, frame := range []string{
			`{"t":"edit","rid":"b1","conv":"g","target":3,"cmid":"e3","body":"` + strings.Repeat("x", 4001) + `"}`,
			"{\"t\":\"edit\",\"rid\":\"b2\",\"conv\":\"g\",\"target\":3,\"cmid\":\"e3\",\"body\":\"\xff\"}",
		} {
			ws.sendRaw(frame)
			if f := ws.next(wire.TError); f.Code != parley.CodeInvalidArgument {
				t.Errorf("bad edit frame: %+v", f)
			}
		}
		if got := c.head("g"); got != 5 {
			t.Errorf("head %d after the frame edit and two bad frames, want 5", got)
		}
	})
}

// TestEditWindow: with edit_window set, an edit after it is
// EDIT_WINDOW_EXPIRED (409), by either transport.
func TestEditWindow(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		c := startChat(t, open(t, parley.Options{}), "edit_window: 1ms\n")
		time.Sleep(20 * time.Millisecond)
		c.do("PATCH", "/api/convs/g/messages/3", c.ana, map[string]string{"body": "late"}, "Idempotency-Key", "e1").want(409, parley.CodeEditWindowExpired)
		ws := dialWS(t, c.server, c.ana)
		ws.send(map[string]any{"t": "edit", "conv": "g", "target": 3, "cmid": "e2", "body": "late"})
		if f := ws.next(wire.TError); f.Code != parley.CodeEditWindowExpired {
			t.Errorf("late edit frame: %+v", f)
		}
	})
}

// TestReact: PUT sets and DELETE removes a reaction (201 new event, 200
// dup for a replay or a state that already held), an emoji with whitespace
// is refused, and a message read afterwards carries the counts. The react
// frame is the same write.
func TestReact(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		c := startChat(t, open(t, parley.Options{}), "")
		thumbs := "/api/convs/g/messages/3/reactions/" + url.PathEscape("👍")
		f := c.keyed("PUT", thumbs, c.bob, "r1", nil, 201)
		if f.Conv != "g" || *f.Seq != 4 || *f.Dup {
			t.Fatalf("react: %+v", f)
		}
		if f = c.keyed("PUT", thumbs, c.bob, "r1", nil, 200); *f.Seq != 4 || !*f.Dup {
			t.Fatalf("react replay: %+v", f)
		}
		if f = c.keyed("PUT", thumbs, c.bob, "r2", nil, 200); *f.Seq != 4 || !*f.Dup {
			t.Fatalf("react, state already on: %+v", f)
		}
		if f = c.keyed("DELETE", "/api/convs/g/messages/3/reactions/:tada:", c.bob, "r3", nil, 200); *f.Seq != 0 || !*f.Dup {
			t.Fatalf("removing a reaction never made: %+v", f)
		}
		c.keyed("PUT", thumbs, c.ana, "r4", nil, 201)
		head := c.head("g")
		for _, tc := range []struct {
			name, path, token string
			status            int
			code              parley.Code
		}{
			{"emoji with a space", "/api/convs/g/messages/3/reactions/thumbs%20up", c.bob, 400, parley.CodeInvalidArgument},
			{"emoji with a tab", "/api/convs/g/messages/3/reactions/%F0%9F%91%8D%09", c.bob, 400, parley.CodeInvalidArgument},
			{"emoji of invalid UTF-8", "/api/convs/g/messages/3/reactions/%FF", c.bob, 400, parley.CodeInvalidArgument},
			{"emoji of 65 characters", "/api/convs/g/messages/3/reactions/" + strings.Repeat("x", 65), c.bob, 400, parley.CodeInvalidArgument},
			{"not a message", "/api/convs/g/messages/1/reactions/x", c.bob, 404, parley.CodeNotFound},
			{"not a member", thumbs, c.carl, 404, parley.CodeNotMember},
		} {
			c.do("PUT", tc.path, tc.token, nil, "Idempotency-Key", "bad-"+tc.name).want(tc.status, tc.code)
		}
		if got := c.head("g"); got != head {
			t.Errorf("refused reactions moved the head from %d to %d", head, got)
		}
		msg := c.events(c.ana, "g", "")[3]
		if len(msg.Reactions) != 1 || msg.Reactions[0] != (wire.Reaction{Emoji: "👍", Count: 2, Me: true}) {
			t.Errorf("reactions as read: %+v", msg.Reactions)
		}

		ws := dialWS(t, c.server, c.bob)
		ws.send(map[string]any{"t": "react", "rid": "x", "conv": "g", "target": 3, "emoji": "👍", "on": false, "cmid": "r5"})
		if f := ws.next(wire.TReacted); string(f.RID) != `"x"` || *f.Seq != head+1 || *f.Dup {
			t.Errorf("reacted frame: %+v", f)
		}
		for _, frame := range []map[string]any{
			{"t": "react", "conv": "g", "target": 3, "emoji": "a b", "on": true, "cmid": "r6"},
			{"t": "react", "conv": "g", "target": 3, "emoji": "👍", "cmid": "r6"},
		} {
			ws.send(frame)
			if f := ws.next(wire.TError); f.Code != parley.CodeInvalidArgument {
				t.Errorf("bad react frame %v: %+v", frame, f)
			}
		}
		ev := c.events(c.ana, "g", "")[head+1]
		if ev.Kind != "reaction" || ev.On == nil || *ev.On || ev.Emoji != "👍" || ev.Target != 3 {
			t.Errorf("reaction off event: %+v", ev)
		}
	})
}

// TestReply: a reply names its root (reply_to), the root as read counts
// it, a thread sync returns the root and its replies only, and a reply_to
// that is no message of this conversation is NOT_FOUND, by either
// transport.
func TestReply(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		c := startChat(t, open(t, parley.Options{}), "")
		c.do("POST", "/api/convs/g/messages", c.bob, map[string]any{"body": "re", "reply_to": 3}, "Idempotency-Key", "m2").want(201)
		c.do("POST", "/api/convs/g/messages", c.bob, map[string]any{"body": "aside"}, "Idempotency-Key", "m3").want(201)
		ws := dialWS(t, c.server, c.ana)
		ws.send(map[string]any{"t": "send", "conv": "g", "cmid": "m4", "body": "re re", "reply_to": 4})
		if f := ws.next(wire.TSent); *f.Seq != 6 {
			t.Fatalf("reply frame: %+v", f)
		}
		evs := c.events(c.ana, "g", "")
		if root := evs[3]; root.Replies != 2 || root.LastReplySeq != 6 {
			t.Errorf("root as read: %+v", root)
		}
		if evs[4].ReplyTo != 3 || evs[6].ReplyTo != 3 || evs[5].ReplyTo != 0 {
			t.Errorf("reply_to: %d %d %d, want 3 3 0 (a reply to a reply joins the root)", evs[4].ReplyTo, evs[6].ReplyTo, evs[5].ReplyTo)
		}
		thread := c.events(c.ana, "g", "&thread=3")
		if len(thread) != 3 || thread[5].Seq != 0 {
			t.Errorf("thread 3: %v", thread)
		}
		c.do("GET", "/api/convs/g/events?after=0&thread=0", c.ana, nil).want(400, parley.CodeInvalidArgument)
		c.do("GET", "/api/convs/g/events?after=0&thread=1", c.ana, nil).want(404, parley.CodeNotFound)
		ws.send(map[string]any{"t": "sync", "conv": "g", "after": 0, "thread": 3})
		if f := ws.next(wire.TPage); len(f.Events) != 3 {
			t.Errorf("thread page frame: %d events", len(f.Events))
		}

		// h's seq 3 is a message; g's seq 3 is too, but g has no seq 40.
		c.do("POST", "/api/convs/h/messages", c.ana, map[string]string{"body": "in h"}, "Idempotency-Key", "h1").want(201)
		head := c.head("g")
		c.do("POST", "/api/convs/g/messages", c.ana, map[string]any{"body": "x", "reply_to": 40}, "Idempotency-Key", "m5").want(404, parley.CodeNotFound)
		c.do("POST", "/api/convs/g/messages", c.ana, map[string]any{"body": "x", "reply_to": 1}, "Idempotency-Key", "m6").want(404, parley.CodeNotFound)
		c.do("POST", "/api/convs/g/messages", c.ana, map[string]any{"body": "x", "reply_to": -1}, "Idempotency-Key", "m7").want(400, parley.CodeInvalidArgument)
		ws.send(map[string]any{"t": "send", "conv": "h", "cmid": "m8", "body": "x", "reply_to": 6})
		if f := ws.next(wire.TError); f.Code != parley.CodeNotFound {
			t.Errorf("reply frame to another conversation's seq: %+v", f)
		}
		if got := c.head("g"); got != head {
			t.Errorf("refused replies moved the head from %d to %d", head, got)
		}
	})
}

// TestMentionsUnread: a message that mentions a member counts in that
// member's mentions_unread until read.
func TestMentionsUnread(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		c := startChat(t, open(t, parley.Options{}), "")
		c.do("POST", "/api/convs/g/messages", c.ana, map[string]string{"body": "@bob look"}, "Idempotency-Key", "m2").want(201)
		mentions := func(token string) int64 {
			t.Helper()
			var b struct {
				Convs []wire.Conv `json:"convs"`
			}
			c.do("GET", "/api/convs", token, nil).want(200).decode(&b)
			for _, cv := range b.Convs {
				if cv.Conv == "g" {
					return cv.MentionsUnread
				}
			}
			t.Fatal("g is not listed")
			return 0
		}
		if got := mentions(c.bob); got != 1 {
			t.Errorf("bob's mentions_unread %d, want 1", got)
		}
		if got := mentions(c.ana); got != 0 {
			t.Errorf("ana's mentions_unread %d, want 0", got)
		}
		c.do("POST", "/api/convs/g/read", c.bob, map[string]int{"seq": 4}).want(200)
		if got := mentions(c.bob); got != 0 {
			t.Errorf("bob's mentions_unread after reading %d, want 0", got)
		}
	})
}

// TestDirectMessages: POST /api/dms opens the pair's one conversation
// (201 created, 200 after), from either side.
func TestDirectMessages(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		c := startChat(t, open(t, parley.Options{}), "")
		var a, b struct {
			ID   string `json:"id"`
			Kind string `json:"kind"`
			Head int64  `json:"head"`
		}
		c.do("POST", "/api/dms", c.ana, map[string]string{"user": "bob"}).want(201).decode(&a)
		if a.ID != parley.DirectID("ana", "bob") || a.Kind != "direct" || a.Head != 2 {
			t.Errorf("opened: %+v", a)
		}
		c.do("POST", "/api/dms", c.bob, map[string]string{"user": "ana"}).want(200).decode(&b)
		if b.ID != a.ID {
			t.Errorf("bob's open: %s, want %s", b.ID, a.ID)
		}
		c.do("POST", "/api/convs/"+a.ID+"/messages", c.bob, map[string]string{"body": "hi"}, "Idempotency-Key", "d1").want(201)
		c.do("POST", "/api/dms", c.ana, map[string]string{"user": "ana"}).want(400, parley.CodeInvalidArgument)
		c.do("POST", "/api/dms", c.ana, map[string]string{"user": "nobody"}).want(404, parley.CodeNotFound)
		c.do("POST", "/api/dms", c.ana, map[string]any{"user": 7}).want(400, parley.CodeInvalidArgument)
		c.do("POST", "/api/convs", c.ana, map[string]any{"id": "dm:x:y", "title": "t"}).want(400, parley.CodeInvalidArgument)
	})
}

// TestDirectory: GET /api/users lists active users by prefix, paged; with
// directory: shared only people who share a conversation with the caller.
func TestDirectory(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		c := startChat(t, open(t, parley.Options{}), "")
		c.user("dora", parley.RoleUser)
		type page struct {
			Users []struct{ ID string } `json:"users"`
			Next  string                `json:"next"`
		}
		ids := func(p page) string {
			var out []string
			for _, u := range p.Users {
				out = append(out, u.ID)
			}
			return strings.Join(out, " ")
		}
		var p page
		c.do("GET", "/api/users?limit=2", c.bob, nil).want(200).decode(&p)
		if ids(p) != "ana bob" || p.Next == "" {
			t.Errorf("first page: %+v", p)
		}
		c.do("GET", "/api/users?limit=2&cursor="+url.QueryEscape(p.Next), c.bob, nil).want(200).decode(&p)
		if ids(p) != "carl dora" {
			t.Errorf("second page: %+v", p)
		}
		p = page{}
		c.do("GET", "/api/users?q=D", c.bob, nil).want(200).decode(&p)
		if ids(p) != "dora" || p.Next != "" {
			t.Errorf("prefix d: %+v", p)
		}
		c.do("GET", "/api/users?limit=0", c.bob, nil).want(400, parley.CodeInvalidArgument)
		c.do("GET", "/api/users?limit=201", c.bob, nil).want(400, parley.CodeInvalidArgument)
		c.do("GET", "/api/users?q="+strings.Repeat("a", 65), c.bob, nil).want(400, parley.CodeInvalidArgument)
		c.do("GET", "/api/users", "", nil).want(401, parley.CodeUnauthenticated)

		c.writeConfig("directory: shared\n")
		eventually(t, "directory: shared", func() bool {
			p = page{}
			c.do("GET", "/api/users", c.bob, nil).want(200).decode(&p)
			return ids(p) == "ana bob"
		})
	})
}

// TestChatRateLimits: edit and react frames count in the buckets of their
// HTTP twins (edit, react); dms and users limit their routes. A refused
// request has no effect.
func TestChatRateLimits(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		c := startChat(t, open(t, parley.Options{}), "rate_limits:\n  edit: {limit: 1, window: 1h}\n  react: {limit: 1, window: 1h}\n"+
			"  dms: {limit: 1, window: 1h}\n  users: {limit: 1, window: 1h}\n")
		ws := dialWS(t, c.server, c.ana)

		c.keyed("PATCH", "/api/convs/g/messages/3", c.ana, "e1", map[string]string{"body": "v2"}, 201)
		head := c.head("g")
		ws.send(map[string]any{"t": "edit", "rid": "e", "conv": "g", "target": 3, "cmid": "e2", "body": "v3"})
		if f := ws.next(wire.TError); f.Code != parley.CodeRateLimited || f.RetryAfterMS <= 0 || string(f.RID) != `"e"` {
			t.Errorf("edit frame over the edit limit: %+v", f)
		}

		ws.send(map[string]any{"t": "react", "rid": "r", "conv": "g", "target": 3, "emoji": "👍", "on": true, "cmid": "r1"})
		ws.next(wire.TReacted)
		head++
		c.do("PUT", "/api/convs/g/messages/3/reactions/x", c.ana, nil, "Idempotency-Key", "r2").want(429, parley.CodeRateLimited)
		if got := c.head("g"); got != head {
			t.Errorf("refused writes moved the head from %d to %d", head, got)
		}

		c.do("POST", "/api/dms", c.ana, map[string]string{"user": "bob"}).want(201)
		c.do("POST", "/api/dms", c.ana, map[string]string{"user": "carl"}).want(429, parley.CodeRateLimited)
		c.do("GET", "/api/users", c.ana, nil).want(200)
		c.do("GET", "/api/users", c.ana, nil).want(429, parley.CodeRateLimited)
		if m := c.scrape(); !strings.Contains(m, `parley_rate_limited_total{bucket="edit",transport="ws"} 1`) ||
			!strings.Contains(m, `parley_rate_limited_total{bucket="react",transport="http"} 1`) {
			t.Error("the refusals were not counted by bucket and transport")
		}
	})
}
