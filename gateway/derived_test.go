package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// TestChatFrames: edit, react, send with reply_to and sync with thread
// answer their reply frames; the events they write are pushed with their
// raw fields (no derived state); a sync serves the root decorated.
func TestChatFrames(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		ben := twoInG1(t, srv)
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		send(ana, "g1", "m1", "hello")
		ben.push(wire.TEvent)

		f := ana.do(map[string]any{"t": "edit", "conv": "g1", "target": 3, "cmid": "e1", "body": "hello @ben"})
		if f.T != wire.TEdited || f.Conv != "g1" || *f.Seq != 4 || *f.Dup {
			t.Fatalf("edited = %+v", f)
		}
		if ev := ben.push(wire.TEvent).Ev; ev.Kind != "edit" || ev.Target != 3 || ev.Body != "hello @ben" || fmt.Sprint(ev.Mentions) != "[ben]" || ev.AsOf != nil {
			t.Fatalf("edit push = %+v", ev)
		}
		if f := ana.do(map[string]any{"t": "edit", "conv": "g1", "target": 3, "cmid": "e1", "body": "hello @ben"}); !*f.Dup || *f.Seq != 4 {
			t.Fatalf("edit replay = %+v", f)
		}

		f = ben.do(map[string]any{"t": "react", "conv": "g1", "target": 3, "emoji": "🎉", "on": true, "cmid": "r1"})
		if f.T != wire.TReacted || *f.Seq != 5 || *f.Dup {
			t.Fatalf("reacted = %+v", f)
		}
		if ev := ben.push(wire.TEvent).Ev; ev.Kind != "reaction" || ev.Emoji != "🎉" || ev.On == nil || !*ev.On || ev.Target != 3 {
			t.Fatalf("reaction push = %+v", ev)
		}
		if f := ben.do(map[string]any{"t": "react", "conv": "g1", "target": 3, "emoji": "🎉", "on": true, "cmid": "r2"}); !*f.Dup || *f.Seq != 5 {
			t.Fatalf("react, state held = %+v", f)
		}

		f = ana.do(map[string]any{"t": "send", "conv": "g1", "cmid": "m2", "body": "see @ben", "reply_to": 3})
		if f.T != wire.TSent || *f.Seq != 6 {
			t.Fatalf("reply sent = %+v", f)
		}
		if ev := ben.push(wire.TEvent).Ev; ev.ReplyTo != 3 || fmt.Sprint(ev.Mentions) != "[ben]" || ev.Body != "see @ben" {
			t.Fatalf("reply push = %+v", ev)
		}

		page := ben.do(map[string]any{"t": "sync", "conv": "g1", "after": 0, "thread": 3})
		if page.T != wire.TPage || len(page.Events) != 2 || page.Events[0].Seq != 3 || page.Events[1].Seq != 6 {
			t.Fatalf("thread page = %+v", page)
		}
		root := page.Events[0]
		if root.AsOf == nil || *root.AsOf != 6 || root.Body != "hello @ben" || root.EditSeq != 4 || root.Replies != 1 || root.LastReplySeq != 6 ||
			len(root.Reactions) != 1 || root.Reactions[0] != (wire.Reaction{Emoji: "🎉", Count: 1, Me: true}) {
			t.Fatalf("root as read = %+v", root)
		}
		wantCode(t, ben.do(map[string]any{"t": "sync", "conv": "g1", "after": 0, "thread": 1}), parley.CodeNotFound)
	})
}

// TestChatBadFrames: bad input of the new frames is INVALID_ARGUMENT and
// writes nothing; a reply_to that is no message of the conversation is
// NOT_FOUND.
func TestChatBadFrames(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		twoInG1(t, srv)
		group(t, s, "g2", "ana")
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		send(ana, "g1", "m1", "hello")
		send(ana, "g2", "m1", "one")
		send(ana, "g2", "m2", "two") // g2 seq 3; g1 has no seq 3+1
		for _, tc := range []struct {
			name  string
			frame string
			code  parley.Code
		}{
			{"edit of 4001 characters", `{"t":"edit","rid":"x","conv":"g1","target":3,"cmid":"e1","body":"` + strings.Repeat("é", 4001) + `"}`, parley.CodeInvalidArgument},
			{"edit of invalid UTF-8", "{\"t\":\"edit\",\"rid\":\"x\",\"conv\":\"g1\",\"target\":3,\"cmid\":\"e1\",\"body\":\"a\xffb\"}", parley.CodeInvalidArgument},
			{"edit without target", `{"t":"edit","rid":"x","conv":"g1","cmid":"e1","body":"b"}`, parley.CodeInvalidArgument},
			{"emoji with a space", `{"t":"react","rid":"x","conv":"g1","target":3,"emoji":"👍 ","on":true,"cmid":"r1"}`, parley.CodeInvalidArgument},
			{"emoji with a newline", `{"t":"react","rid":"x","conv":"g1","target":3,"emoji":"a\nb","on":true,"cmid":"r1"}`, parley.CodeInvalidArgument},
			{"react without on", `{"t":"react","rid":"x","conv":"g1","target":3,"emoji":"👍","cmid":"r1"}`, parley.CodeInvalidArgument},
			{"reply_to in another conversation", `{"t":"send","rid":"x","conv":"g1","cmid":"m2","body":"b","reply_to":4}`, parley.CodeNotFound},
			{"reply_to a membership event", `{"t":"send","rid":"x","conv":"g1","cmid":"m2","body":"b","reply_to":1}`, parley.CodeNotFound},
			{"reply_to 0", `{"t":"send","rid":"x","conv":"g1","cmid":"m2","body":"b","reply_to":0}`, parley.CodeInvalidArgument},
			{"thread negative", `{"t":"sync","rid":"x","conv":"g1","after":0,"thread":-3}`, parley.CodeInvalidArgument},
			{"edit of a membership event", `{"t":"edit","rid":"x","conv":"g2","target":1,"cmid":"e1","body":"b"}`, parley.CodeNotFound},
		} {
			ana.raw(websocket.MessageText, []byte(tc.frame))
			f := ana.next()
			// A frame of invalid UTF-8 is refused whole: no rid is read.
			rid := `"x"`
			if !utf8.ValidString(tc.frame) {
				rid = ""
			}
			if f.T != wire.TError || f.Code != tc.code || string(f.RID) != rid {
				t.Errorf("%s: %+v, want %s", tc.name, f, tc.code)
			}
		}
		if c, _ := s.Conversation(context.Background(), "g1"); c.Head != 3 {
			t.Errorf("g1's head %d after refused frames, want 3", c.Head)
		}
	})
}

// TestChatFrameBuckets: edit and react frames ask for their HTTP twins'
// buckets (edit, react); a refused frame writes nothing.
func TestChatFrameBuckets(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		var mu sync.Mutex
		var asked []string
		limit := func(_ context.Context, bucket, user string) (bool, time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, bucket)
			return bucket != "react", time.Second
		}
		srv := newServer(t, s, gateway.Options{Limit: limit})
		twoInG1(t, srv)
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		send(ana, "g1", "m1", "hello")
		mu.Lock()
		asked = nil
		mu.Unlock()
		if f := ana.do(map[string]any{"t": "edit", "conv": "g1", "target": 3, "cmid": "e1", "body": "v2"}); f.T != wire.TEdited {
			t.Fatalf("edit: %+v", f)
		}
		f := ana.do(map[string]any{"t": "react", "conv": "g1", "target": 3, "emoji": "👍", "on": true, "cmid": "r1"})
		if f.Code != parley.CodeRateLimited || f.RetryAfterMS != 1000 {
			t.Fatalf("react over its limit: %+v", f)
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(asked) != "[edit react]" {
			t.Errorf("buckets asked %v, want [edit react]", asked)
		}
		if c, _ := s.Conversation(context.Background(), "g1"); c.Head != 4 {
			t.Errorf("head %d, want 4: the refused reaction wrote nothing", c.Head)
		}
	})
}

// TestEditWindowFrame: the gateway's use cases read the edit window in
// force (Options.Config).
func TestEditWindowFrame(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		cfg, _, err := config.Parse([]byte("edit_window: 1ms\n"))
		if err != nil {
			t.Fatal(err)
		}
		srv := newServer(t, s, gateway.Options{Config: func() *config.Config { return cfg }})
		twoInG1(t, srv)
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		send(ana, "g1", "m1", "hello")
		time.Sleep(20 * time.Millisecond)
		wantCode(t, ana.do(map[string]any{"t": "edit", "conv": "g1", "target": 3, "cmid": "e1", "body": "late"}), parley.CodeEditWindowExpired)
	})
}
