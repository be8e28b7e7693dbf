package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// TestInvalidText: every JSON body, on every route, is refused with
// INVALID_ARGUMENT when it holds bytes that are not UTF-8 or a JSON escape
// of a lone UTF-16 surrogate (encoding/json alone would store U+FFFD), and
// nothing is stored; a valid surrogate pair is an ordinary character. The
// gateway refuses the same frames (gateway TestInvalidTextFrames).
func TestInvalidText(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleAdmin)
		s.user("ben", parley.RoleUser)
		s.do("POST", "/api/admin/users", ana, map[string]any{"id": "ci-bot"}).want(201)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{"ben", "ci-bot"}}).want(201)
		var h hookInfo
		s.do("POST", "/api/admin/hooks", ana, map[string]string{"conv": "g", "bot": "ci-bot"}).want(201).decode(&h)

		send := func(key, body string) reply {
			return s.do("POST", "/api/convs/g/messages", ana, body, "Idempotency-Key", key)
		}
		hook := func(key, body string) reply { return s.postHook(h, key, body, time.Now(), "") }
		tests := []struct {
			name string
			body string
			ok   bool
		}{
			{"raw 0xff", "{\"body\":\"a\xffb\"}", false},
			{"truncated UTF-8", "{\"body\":\"a\xe2\x82\"}", false},
			{"lone high surrogate", `{"body":"\ud800"}`, false},
			{"lone low surrogate", `{"body":"\udc00"}`, false},
			{"high surrogate, then text", `{"body":"\ud83dx"}`, false},
			{"high surrogate, then a BMP escape", `{"body":"\ud83d\u0041"}`, false},
			{"lone surrogate in a key", `{"body":"x","\ud800":1}`, false},
			{"valid pair", `{"body":"\ud83d\ude00"}`, true},
			{"escaped backslash, then ud800", `{"body":"\\ud800"}`, true},
		}
		for _, via := range []struct {
			name string
			post func(key, body string) reply
		}{{"http", send}, {"webhook", hook}} {
			for i, tt := range tests {
				before := s.head("g")
				key := fmt.Sprintf("%s-%d", via.name, i)
				r := via.post(key, tt.body)
				if !tt.ok {
					r.want(400, parley.CodeInvalidArgument)
					if got := s.head("g"); got != before {
						t.Errorf("%s %s: head %d after a refused body, want %d", via.name, tt.name, got, before)
					}
					continue
				}
				f := r.want(201).frame()
				ev := s.do("GET", fmt.Sprintf("/api/convs/g/events/%d", *f.Seq), ana, nil).want(200).frame().Ev
				if strings.ContainsRune(ev.Body, '\uFFFD') || (tt.name == "valid pair" && ev.Body != "😀") {
					t.Errorf("%s %s: stored body %q", via.name, tt.name, ev.Body)
				}
			}
		}
		// Other routes share the one decoder: a title, a member, a read.
		before := s.head("g")
		s.do("POST", "/api/convs", ana, `{"id":"g2","title":"\udfff","members":[]}`).want(400, parley.CodeInvalidArgument)
		s.do("POST", "/api/convs/g/members", ana, `{"user":"b\ud800n"}`).want(400, parley.CodeInvalidArgument)
		s.do("POST", "/api/login", "", "{\"login\":\"ana\",\"password\":\"pw-ana\",\"device_id\":\"d\xff\",\"install_id\":\"i1\"}").want(400, parley.CodeInvalidArgument)
		if got := s.head("g"); got != before {
			t.Errorf("head %d after refused bodies, want %d", got, before)
		}
		s.do("GET", "/api/admin/convs/g2", ana, nil).want(404)
	})
}
