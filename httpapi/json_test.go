package httpapi_test

import (
	"context"
	"time"

	"github.com/coder/websocket"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// TestExportURLLiteralAmpersand: the link of a done export is written with
// a literal '&', so the raw body can be pasted into curl or a browser.
func TestExportURLLiteralAmpersand(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ben := s.user("ben", parley.RoleUser)
		p := parley.Principal{User: "ben", DeviceID: "d1"}
		if _, err := s.store.CreateConversation(context.Background(), p, parley.NewConversation{ID: "g", Kind: parley.KindGroup, Title: "<g> & co"}); err != nil {
			t.Fatal(err)
		}
		s.do("POST", "/api/convs/g/messages", ben, map[string]string{"body": "a & b <c>"}, "Idempotency-Key", "k1").want(http.StatusCreated)
		job := s.createExport(ben, "x1", "all", http.StatusAccepted)
		s.runExports()
		s.waitExport(ben, job.JobID)

		raw := string(s.do("GET", "/exports/"+job.JobID, ben, nil).want(http.StatusOK).body)
		if strings.Contains(raw, `\u0026`) || !strings.Contains(raw, "&") {
			t.Fatalf("GET /exports/{id} body escapes '&': %s", raw)
		}
		// The link as a person copies it from the raw body.
		m := regexp.MustCompile(`"url":"([^"]*)"`).FindStringSubmatch(raw)
		if m == nil {
			t.Fatalf("no url in %s", raw)
		}
		s.get("GET", m[1]).want(http.StatusOK)

		// Bodies and frames keep '&', '<' and '>' too.
		body := string(s.do("GET", "/api/convs/g/events?after=0", ben, nil).want(http.StatusOK).body)
		if !strings.Contains(body, `"a & b <c>"`) {
			t.Errorf("events body escapes HTML: %s", body)
		}
	})
}

// TestBadBodyMessages: a body or frame encoding/json refuses is answered
// INVALID_ARGUMENT with a message that names the field and what it must
// be, on HTTP and on the WebSocket alike; never a Go type name.
func TestBadBodyMessages(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ben := s.user("ben", parley.RoleUser)
		s.user("cy", parley.RoleUser)
		p := parley.Principal{User: "ben", DeviceID: "d1"}
		if _, err := s.store.CreateConversation(context.Background(), p, parley.NewConversation{ID: "g", Kind: parley.KindGroup, Title: "g"}); err != nil {
			t.Fatal(err)
		}
		bodies := []struct {
			name, method, path, body, want string
		}{
			{"read seq as string", "POST", "/api/convs/g/read", `{"seq":"4"}`, "seq: want an integer, got a string"},
			{"ack seq fraction", "POST", "/api/convs/g/ack", `{"seq":1.5}`, "seq: want an integer, got number 1.5"},
			{"recall target as object", "POST", "/api/convs/g/recall", `{"target":{}}`, "target: want an integer, got an object"},
			{"send body as number", "POST", "/api/convs/g/messages", `{"body":4}`, "body: want a string, got a number"},
			{"members as string", "POST", "/api/convs", `{"title":"t","members":"cy"}`, "members: want a list, got a string"},
			{"member as number", "POST", "/api/convs/g/members", `{"user":7}`, "user: want a string, got a number"},
			{"unknown field", "POST", "/api/convs/g/read", `{"sqe":4}`, `unknown field "sqe"`},
			{"array body", "POST", "/api/convs/g/read", `[4]`, "want a JSON object, got an array"},
			{"malformed", "POST", "/api/convs/g/read", `{"seq":}`, "malformed JSON at byte 8"},
			{"truncated", "POST", "/api/convs/g/read", `{"seq":4`, "malformed JSON: it ends too early"},
			{"empty", "POST", "/api/convs/g/read", ``, "empty: want one JSON object"},
		}
		for i, tt := range bodies {
			hdr := []string{"Idempotency-Key", "bad-" + string(rune('a'+i))}
			pr := s.do(tt.method, tt.path, ben, tt.body, hdr...).want(400, parley.CodeInvalidArgument).problem()
			if !strings.Contains(pr.Detail, tt.want) || goTypeName.MatchString(pr.Detail) {
				t.Errorf("%s: detail %q, want one with %q and no Go type", tt.name, pr.Detail, tt.want)
			}
		}

		ws := dialWS(t, s, ben)
		frames := []struct {
			name, frame, want string
		}{
			{"ack seq as string", `{"t":"ack","rid":"1","conv":"g","seq":"4"}`, "seq: want an integer, got a string"},
			{"sync limit as bool", `{"t":"sync","rid":"2","conv":"g","after":0,"limit":true}`, "limit: want an integer, got true or false"},
			{"send conv as number", `{"t":"send","rid":"3","conv":7,"cmid":"c","body":"b"}`, "conv: want a string, got a number"},
			{"malformed", `{"t":"ack",`, "malformed JSON"},
		}
		for _, tt := range frames {
			ws.sendRaw(tt.frame)
			f := ws.next(wire.TError)
			if f.Code != parley.CodeInvalidArgument || !strings.Contains(f.Msg, tt.want) || goTypeName.MatchString(f.Msg) {
				t.Errorf("%s: %s %q, want INVALID_ARGUMENT with %q and no Go type", tt.name, f.Code, f.Msg, tt.want)
			}
		}
	})
}

// goTypeName matches what encoding/json's own messages say.
var goTypeName = regexp.MustCompile(`Go (struct|value)|int64|int32|float64|\[\]string|json: `)

// TestWebSocketRIDBound: a string rid of 128 bytes is accepted and echoed;
// 129 is refused. The quotes of the JSON token are not counted.
func TestWebSocketRIDBound(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ws := dialWS(t, s, s.user("ben", parley.RoleUser))

		rid := strings.Repeat("r", wire.MaxRIDBytes)
		ws.sendRaw(`{"t":"convs","rid":"` + rid + `"}`)
		f := ws.next(wire.TConvsReply)
		if string(f.RID) != `"`+rid+`"` {
			t.Errorf("128-byte rid echoed as %s", f.RID)
		}

		ws.sendRaw(`{"t":"convs","rid":"` + rid + `r"}`)
		f = ws.next(wire.TError)
		if f.Code != parley.CodeInvalidArgument || f.RID != nil {
			t.Errorf("129-byte rid: %s %q rid %s, want INVALID_ARGUMENT without rid", f.Code, f.Msg, f.RID)
		}
	})
}

// sendRaw writes frame as it is.
func (c *wsClient) sendRaw(frame string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}
