package httpapi_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// TestHotReload: a new file changes the limit at once; a file that does not
// parse keeps the last good configuration and counts a failed reload.
func TestHotReload(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: "rate_limits:\n  read: {limit: 2, window: 1h}\n"})
		ana := s.user("ana", parley.RoleUser)
		get := func() reply { return s.do("GET", "/api/convs", ana, nil) }
		get().want(200)
		r := get().want(200)
		if r.header.Get("RateLimit-Policy") != `"read";q=2;w=3600` || r.header.Get("RateLimit") != `"read";r=0;t=3600` {
			t.Errorf("RateLimit-Policy %q, RateLimit %q", r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"))
		}
		r = get().want(429, parley.CodeRateLimited)
		if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After %q", ra)
		}

		s.writeConfig("rate_limits:\n  read: {limit: 5, window: 1h}\n")
		eventually(t, "the new limit", func() bool { return get().status == 200 })
		get().want(200)
		get().want(200)
		get().want(429, parley.CodeRateLimited)

		s.writeConfig("rate_limits: [this is: not: yaml\n")
		eventually(t, "the failed reload counted", func() bool {
			return strings.Contains(s.scrape(), `parley_config_reloads_total{result="error"} 1`)
		})
		get().want(429, parley.CodeRateLimited) // still limit 5, not off

		s.writeConfig("rate_limits:\n  read: {limit: 0}\n") // 0: off
		eventually(t, "limits off", func() bool { return get().status == 200 })
		if r := get().want(200); r.header.Get("RateLimit") != "" {
			t.Errorf("limit off still sends RateLimit %q", r.header.Get("RateLimit"))
		}
	})
}

// TestSpoofedForwardedFor: anonymous callers are limited by the address
// the trusted proxy appended; a client-written first hop changes nothing,
// and without a trusted proxy X-Forwarded-For is ignored.
func TestSpoofedForwardedFor(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: "trusted_proxies: [127.0.0.1]\nrate_limits:\n  login: {limit: 1, window: 1h}\n"})
		login := func(xff string) int {
			return s.do("POST", "/api/login", "", `{}`, "X-Forwarded-For", xff).status
		}
		if got := login("1.1.1.1, 203.0.113.7"); got != 400 {
			t.Fatalf("first login from 203.0.113.7: %d", got)
		}
		// The same client, lying about its first hop: still limited.
		if got := login("9.9.9.9, 203.0.113.7"); got != 429 {
			t.Errorf("spoofed first hop: %d, want 429", got)
		}
		// Another client behind the proxy has its own budget.
		if got := login("1.1.1.1, 203.0.113.8"); got != 400 {
			t.Errorf("another client: %d, want 400", got)
		}

		s.writeConfig("rate_limits:\n  login: {limit: 1, window: 1h}\n")
		// Every X-Forwarded-For is now ignored: the peer (127.0.0.1) is the
		// subject, whatever the header says. Each poll claims a new address,
		// so only the new configuration can answer 429.
		i := 0
		eventually(t, "no trusted proxies", func() bool {
			i++
			return login(fmt.Sprintf("198.51.100.%d", i)) == 429
		})
		if got := login("192.0.2.200"); got != 429 {
			t.Errorf("untrusted X-Forwarded-For changed the subject: %d", got)
		}
	})
}

// TestMiddlewareOrder: authentication runs before the body is read (a
// garbage body without a token is 401, not 400); a rate-limited request is
// 429 even when it would fail authentication, and is counted as rate
// limited, never as activity or as a request.
func TestMiddlewareOrder(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: "rate_limits:\n  convs: {limit: 1, window: 1h}\n"})
		ana := s.user("ana", parley.RoleUser)
		s.do("POST", "/api/convs", "", "not json at all").want(401, parley.CodeUnauthenticated)
		s.do("POST", "/api/convs", "", "not json at all").want(429, parley.CodeRateLimited) // ip budget spent
		s.do("POST", "/api/convs", ana, map[string]any{"id": "a"}).want(201)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "b"}).want(429, parley.CodeRateLimited)
		m := s.scrape()
		for _, want := range []string{
			`parley_rate_limited_total{bucket="convs",transport="http"} 2`,
			`parley_activity_total{route="POST /api/convs"} 1`,
			`parley_http_requests_total{code="201",method="POST",route="POST /api/convs"} 1`,
			`parley_http_refused_total{code="401",route="POST /api/convs"} 1`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		if strings.Contains(m, `code="429",method="POST",route="POST /api/convs"`) {
			t.Error("a rate-limited request was counted as an API request")
		}
	})
}

// TestMetricsNeverChangeResults: with every metric call panicking (the
// metrics' hook, inside every observation of the chain, the handlers and
// the gateway), every answer is the same as without, and the server keeps
// serving. The chain's own recover is proven in middleware
// (TestPanickingRecorder).
func TestMetricsNeverChangeResults(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		run := func(o serverOptions) []string {
			o.config = "rate_limits:\n  send: {limit: 2, window: 1h}\n"
			s := start(t, open(t, parley.Options{}), o)
			ana := s.user("ana", parley.RoleUser)
			s.user("ben", parley.RoleUser)
			var out []string
			note := func(r reply) {
				out = append(out, r.what+" "+http.StatusText(r.status)+" "+maskIDs(string(r.body)))
			}
			note(s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{"ben"}}))
			for _, key := range []string{"k1", "k1", "k2"} {
				note(s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"}, "Idempotency-Key", key))
			}
			note(s.do("GET", "/api/convs/g/events", ana, nil))
			note(s.do("GET", "/api/convs", "", nil))
			note(s.do("GET", "/api/admin/config", ana, nil))
			ws := dialWS(t, s, ana)
			ws.send(map[string]any{"t": "send", "rid": 1, "conv": "g", "cmid": "k3", "body": "y"})
			f := ws.next(wire.TError)
			out = append(out, "ws "+string(f.Code))
			return out
		}
		want := run(serverOptions{})
		got := run(serverOptions{hook: func(string) { panic("metric hook") }})
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("answers with panicking metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// maskIDs blanks the run-time values of a body (mids, times).
func maskIDs(s string) string {
	for _, field := range []string{`"mid":"`, `"at":"`, `"created_at":"`} {
		for i := strings.Index(s, field); i >= 0; {
			start := i + len(field)
			end := strings.IndexByte(s[start:], '"')
			if end < 0 {
				break
			}
			s = s[:start] + "…" + s[start+end:]
			next := strings.Index(s[start:], field)
			if next < 0 {
				break
			}
			i = start + next
		}
	}
	return s
}

// TestMetricsEndpoint: sends by outcome (a replay is dup, not new), the
// socket count, request latency by route template.
func TestMetricsEndpoint(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleUser)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g"}).want(201)
		s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"}, "Idempotency-Key", "k").want(201)
		s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"}, "Idempotency-Key", "k").want(200)
		s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "y"}, "Idempotency-Key", "k").want(422)
		s.do("POST", "/api/convs/g/read", ana, map[string]int{"seq": 2}).want(200)
		s.do("POST", "/api/convs/g/read", ana, map[string]int{"seq": 1}).want(200) // a no-op
		m := s.scrape()
		if strings.Contains(m, `parley_activity_total{route="POST /api/convs/{id}/read"}`) {
			t.Error("reads (200 for no-ops too) are counted as activity")
		}
		for _, want := range []string{
			`parley_sends_total{outcome="new",transport="http"} 1`,
			`parley_sends_total{outcome="dup",transport="http"} 1`,
			`parley_sends_total{outcome="IDEMPOTENCY_MISMATCH",transport="http"} 1`,
			`parley_activity_total{route="POST /api/convs/{id}/messages"} 1`,
			`parley_http_request_duration_seconds_count{method="POST",route="POST /api/convs/{id}/messages"} 3`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

// TestWebSocketSendLimit: the gateway limits send frames with the same
// bucket as HTTP sends, answering RATE_LIMITED with retry_after_ms, and the
// socket stays usable.
func TestWebSocketSendLimit(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: "rate_limits:\n  send: {limit: 2, window: 1h}\n"})
		ana := s.user("ana", parley.RoleUser)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g"}).want(201)
		s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"}, "Idempotency-Key", "k1").want(201)
		ws := dialWS(t, s, ana)
		ws.send(map[string]any{"t": "send", "rid": 1, "conv": "g", "cmid": "k2", "body": "y"})
		if f := ws.next(wire.TSent); *f.Seq != 3 {
			t.Fatalf("sent %+v", f)
		}
		ws.send(map[string]any{"t": "send", "rid": 2, "conv": "g", "cmid": "k3", "body": "z"})
		f := ws.next(wire.TError)
		if f.Code != parley.CodeRateLimited || f.RetryAfterMS <= 0 || string(f.RID) != "2" {
			t.Fatalf("over the limit: %+v", f)
		}
		s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"}, "Idempotency-Key", "k4").want(429, parley.CodeRateLimited)
		ws.send(map[string]any{"t": "recall", "rid": 4, "conv": "g", "cmid": "r1", "target": 3})
		if f := ws.next(wire.TError); f.Code != parley.CodeRateLimited || string(f.RID) != "4" {
			t.Fatalf("recall over the limit: %+v", f)
		}
		ws.send(map[string]any{"t": "sync", "rid": 3, "conv": "g", "after": 0})
		if p := ws.next(wire.TPage); len(p.Events) != 3 {
			t.Errorf("page after a refused send: %+v", p)
		}
		m := s.scrape()
		if !strings.Contains(m, `parley_rate_limited_total{bucket="send",transport="ws"} 2`) {
			t.Error("the refused frames were not counted")
		}
		if strings.Contains(m, `outcome="RATE_LIMITED"`) {
			t.Error("a refused frame was counted as a send")
		}
	})
}

// scrape reads /metrics.
func (s *server) scrape() string {
	s.t.Helper()
	return string(s.do("GET", "/metrics", "", nil).want(200).body)
}

// TestWebSocketFrameLimits: every request frame counts in the rate-limit
// bucket of its HTTP twin (gateway.FrameBuckets), with the real limiter:
// once the twin has spent the bucket the frame is answered RATE_LIMITED
// with retry_after_ms and its rid and has no effect, and the frame's
// refusal leaves the bucket spent for HTTP too. The socket's own sub (on
// connect) counts in read.
func TestWebSocketFrameLimits(t *testing.T) {
	type twin struct {
		method, path string
		body         any
		hdr          []string
	}
	tests := []struct {
		frame  map[string]any
		bucket string
		twin   twin
	}{
		{map[string]any{"t": "send", "conv": "g", "cmid": "k2", "body": "y"}, "send",
			twin{"POST", "/api/convs/g/messages", map[string]string{"body": "x"}, []string{"Idempotency-Key", "k1"}}},
		{map[string]any{"t": "recall", "conv": "g", "cmid": "r1", "target": 1}, "send",
			twin{"POST", "/api/convs/g/messages", map[string]string{"body": "x"}, []string{"Idempotency-Key", "k1"}}},
		{map[string]any{"t": "sync", "conv": "g", "after": 0}, "read", twin{"GET", "/api/convs/g/events?after=0", nil, nil}},
		{map[string]any{"t": "convs"}, "read", twin{"GET", "/api/convs", nil, nil}},
		{map[string]any{"t": "fetch", "conv": "g", "seq": 1}, "read", twin{"GET", "/api/convs/g/events/1", nil, nil}},
		{map[string]any{"t": "ack", "conv": "g", "seq": 1}, "read", twin{"POST", "/api/convs/g/ack", map[string]int{"seq": 1}, nil}},
		{map[string]any{"t": "read", "conv": "g", "seq": 1}, "read", twin{"POST", "/api/convs/g/read", map[string]int{"seq": 1}, nil}},
		{map[string]any{"t": "sub"}, "read", twin{"GET", "/api/convs", nil, nil}},
		{map[string]any{"t": "search", "q": "hello"}, "search", twin{"GET", "/api/search?q=hello", nil, nil}},
	}
	for _, tt := range tests {
		typ := tt.frame["t"].(string)
		if got := gateway.FrameBuckets[typ]; got != tt.bucket {
			t.Errorf("%s frames count in %q, want %q", typ, got, tt.bucket)
		}
		t.Run(typ, func(t *testing.T) {
			backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
				// The read bucket holds the socket's sub and the twin;
				// the send bucket the twin.
				limit := 1
				if tt.bucket == "read" && typ != "sub" {
					limit = 2
				}
				s := start(t, open(t, parley.Options{}), serverOptions{
					config: fmt.Sprintf("rate_limits:\n  %s: {limit: %d, window: 1h}\n", tt.bucket, limit),
				})
				ana := s.user("ana", parley.RoleUser)
				p := parley.Principal{User: "ana", DeviceID: "d0"}
				if _, err := s.store.CreateConversation(context.Background(), p, parley.NewConversation{ID: "g", Kind: parley.KindGroup, Title: "g"}); err != nil {
					t.Fatal(err)
				}
				ws := dialWS(t, s, ana)
				if typ != "sub" {
					r := s.do(tt.twin.method, tt.twin.path, ana, tt.twin.body, tt.twin.hdr...)
					if r.status >= 300 {
						t.Fatalf("the HTTP twin %s %s: %s", tt.twin.method, tt.twin.path, r)
					}
				}
				head := s.head("g")
				// A copy: the sqlite and postgres subtests run in
				// parallel and must not write the table's map.
				frame := maps.Clone(tt.frame)
				frame["rid"] = "x1"
				ws.send(frame)
				f := ws.next(wire.TError)
				if f.Code != parley.CodeRateLimited || f.RetryAfterMS <= 0 || string(f.RID) != `"x1"` {
					t.Fatalf("%s frame over the %s limit: %+v", typ, tt.bucket, f)
				}
				if got := s.head("g"); got != head {
					t.Errorf("a refused %s frame moved the head from %d to %d", typ, head, got)
				}
				s.do(tt.twin.method, tt.twin.path, ana, tt.twin.body, tt.twin.hdr...).want(429, parley.CodeRateLimited)
				if m := s.scrape(); !strings.Contains(m, fmt.Sprintf(`parley_rate_limited_total{bucket=%q,transport="ws"} 1`, tt.bucket)) {
					t.Errorf("the refused %s frame was not counted in %s", typ, tt.bucket)
				}
			})
		})
	}
}
