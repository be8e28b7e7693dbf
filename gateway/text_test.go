package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// TestInvalidTextFrames: a frame with bytes that are not UTF-8 or with a
// JSON escape of a lone UTF-16 surrogate is INVALID_ARGUMENT and stores
// nothing; a valid pair is an ordinary character. The HTTP API refuses the
// same bodies (httpapi TestInvalidText).
func TestInvalidTextFrames(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		user(t, s, "ben")
		group(t, s, "g1", "ana", "ben")
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		head := func() int64 {
			t.Helper()
			c, err := s.Conversation(context.Background(), "g1")
			if err != nil {
				t.Fatal(err)
			}
			return c.Head
		}
		tests := []struct {
			name, body string // body: the JSON text of the body field
			ok         bool
		}{
			{"raw 0xff", "\"a\xffb\"", false},
			{"lone high surrogate", `"\ud800"`, false},
			{"lone low surrogate", `"\udc00"`, false},
			{"high surrogate, then text", `"\ud83dx"`, false},
			{"high surrogate at the end", `"ok\udbff"`, false},
			{"valid pair", `"\ud83d\ude00"`, true},
		}
		for i, tt := range tests {
			before := head()
			rid := string(rune('a' + i))
			ana.raw(websocket.MessageText, []byte(`{"t":"send","rid":"`+rid+`","conv":"g1","cmid":"k`+rid+`","body":`+tt.body+`}`))
			f := ana.next()
			if !tt.ok {
				wantCode(t, f, parley.CodeInvalidArgument)
				if got := head(); got != before {
					t.Errorf("%s: head %d after a refused frame, want %d", tt.name, got, before)
				}
				continue
			}
			if f.T != wire.TSent {
				t.Fatalf("%s: got %s %s %s, want sent", tt.name, f.T, f.Code, f.Msg)
			}
			got := ana.do(map[string]any{"t": "fetch", "conv": "g1", "seq": *f.Seq})
			if got.Ev == nil || got.Ev.Body != "😀" || strings.ContainsRune(got.Ev.Body, '\uFFFD') {
				t.Errorf("%s: stored %+v", tt.name, got.Ev)
			}
		}
	})
}
