package httpapi_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// TestErrorMapping walks every row of the status mapping (parley.Codes) with a
// real request, and checks that a refused write left the conversation's
// head where it was.
func TestErrorMapping(t *testing.T) {
	const window = 3 * time.Second
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{RecallWindow: window}), serverOptions{
			config: "rate_limits:\n  hooks: {limit: 1, window: 1h}\n",
		})
		ana := s.user("ana", parley.RoleAdmin)
		ben := s.user("ben", parley.RoleUser)
		cy := s.user("cy", parley.RoleUser)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "title": "G", "members": []string{"ben"}}).want(201)
		send := func(token, key, body string) reply {
			return s.do("POST", "/api/convs/g/messages", token, map[string]string{"body": body}, "Idempotency-Key", key)
		}
		oldAt := time.Now()
		old := send(ana, "old", "sent before the window closes").want(201).frame()
		m1 := send(ana, "k1", "hello").want(201).frame()

		// STALE_INSTALL: ben's device d1 starts a new install.
		stale := s.login("ben", "d2", "i1")
		s.login("ben", "d2", "i2")

		rows := []struct {
			name   string
			do     func() reply
			status int
			code   parley.Code
		}{
			{"INVALID_ARGUMENT empty body", func() reply { return send(ana, "k-empty", "") }, 400, parley.CodeInvalidArgument},
			{"INVALID_ARGUMENT no key", func() reply {
				return s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "x"})
			}, 400, parley.CodeInvalidArgument},
			{"INVALID_ARGUMENT bad after", func() reply { return s.do("GET", "/api/convs/g/events?after=x", ana, nil) }, 400, parley.CodeInvalidArgument},
			{"UNAUTHENTICATED no token", func() reply { return s.do("GET", "/api/convs", "", nil) }, 401, parley.CodeUnauthenticated},
			{"UNAUTHENTICATED bad token", func() reply { return send("not-a-token-at-all-0123456789abcdef", "k9", "x") }, 401, parley.CodeUnauthenticated},
			{"STALE_INSTALL", func() reply { return send(stale, "k-stale", "x") }, 401, parley.CodeStaleInstall},
			{"PERMISSION_DENIED", func() reply {
				return s.do("POST", "/api/admin/users", ben, map[string]string{"id": "mallory", "password": "password-x"})
			}, 403, parley.CodePermissionDenied},
			{"NOT_MEMBER", func() reply { return send(cy, "k-cy", "let me in") }, 404, parley.CodeNotMember},
			{"NOT_MEMBER unknown conv", func() reply {
				return s.do("POST", "/api/convs/nope/messages", cy, map[string]string{"body": "x"}, "Idempotency-Key", "k")
			}, 404, parley.CodeNotMember},
			{"NOT_FOUND recall target", func() reply {
				return s.do("POST", "/api/convs/g/recall", ana, map[string]int{"target": 999}, "Idempotency-Key", "r-nf")
			}, 404, parley.CodeNotFound},
			{"NOT_FOUND fetch above head", func() reply { return s.do("GET", "/api/convs/g/events/999", ana, nil) }, 404, parley.CodeNotFound},
			{"ALREADY_EXISTS", func() reply {
				return s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{}})
			}, 409, parley.CodeAlreadyExists},
			{"NOT_SENDER", func() reply {
				return s.do("POST", "/api/convs/g/recall", ben, map[string]int64{"target": *m1.Seq}, "Idempotency-Key", "r-ben")
			}, 403, parley.CodeNotSender},
			{"IDEMPOTENCY_MISMATCH", func() reply { return send(ana, "k1", "other text") }, 422, parley.CodeIdempotencyMismatch},
			{"CURSOR_AHEAD read", func() reply { return s.do("POST", "/api/convs/g/read", ben, map[string]int{"seq": 9999}) }, 409, parley.CodeCursorAhead},
			{"CURSOR_AHEAD ack", func() reply { return s.do("POST", "/api/convs/g/ack", ben, map[string]int{"seq": 9999}) }, 409, parley.CodeCursorAhead},
			{"EPOCH_CHANGED", func() reply { return s.do("GET", "/api/convs/g/events?after=0&epoch=99", ben, nil) }, 409, parley.CodeEpochChanged},
			{"RATE_LIMITED", func() reply {
				s.do("POST", "/hooks/0000", "", "{}", "Idempotency-Key", "h")
				return s.do("POST", "/hooks/0000", "", "{}", "Idempotency-Key", "h")
			}, 429, parley.CodeRateLimited},
		}
		for _, row := range rows {
			before := s.head("g")
			r := row.do()
			r.want(row.status, row.code)
			if after := s.head("g"); after != before {
				t.Errorf("%s: head moved %d → %d", row.name, before, after)
			}
			p := r.problem()
			if p.Detail == "" {
				t.Errorf("%s: no detail", row.name)
			}
			switch row.status {
			case 401:
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s: 401 without WWW-Authenticate", row.name)
				}
			case 429, 503:
				if r.header.Get("Retry-After") == "" {
					t.Errorf("%s: %d without Retry-After", row.name, row.status)
				}
			case 403:
				if row.code == parley.CodePermissionDenied && p.Detail != "Access denied" {
					t.Errorf("%s: detail %q, want Access denied", row.name, p.Detail)
				}
			}
		}

		// ALREADY_RECALLED on a fresh message (so a slow machine stays
		// inside the window), then RECALL_WINDOW_EXPIRED (database clock).
		m2 := send(ana, "k2", "to recall").want(201).frame()
		s.do("POST", "/api/convs/g/recall", ana, map[string]int64{"target": *m2.Seq}, "Idempotency-Key", "r1").want(201)
		s.do("POST", "/api/convs/g/recall", ana, map[string]int64{"target": *m2.Seq}, "Idempotency-Key", "r2").want(409, parley.CodeAlreadyRecalled)
		time.Sleep(time.Until(oldAt.Add(window + 200*time.Millisecond)))
		s.do("POST", "/api/convs/g/recall", ana, map[string]int64{"target": *old.Seq}, "Idempotency-Key", "r3").want(409, parley.CodeRecallWindowExpired)

		// ORIGINAL_EXPIRED: purge the first messages, then resend one.
		s.do("PUT", "/api/admin/convs/g/retention", ana, map[string]any{"keep_last": 1}).want(200)
		s.do("POST", "/api/admin/convs/g/purge", ana, nil).want(200)
		before := s.head("g")
		send(ana, "old", "sent before the window closes").want(410, parley.CodeOriginalExpired)
		if s.head("g") != before {
			t.Error("ORIGINAL_EXPIRED moved the head")
		}
	})
}

// TestInternalErrorHidden forces a store failure: the client gets 503
// UNAVAILABLE with Retry-After, a generic message and a request id; the
// cause (SQL text, file paths, stack) reaches only the log, under that id.
func TestInternalErrorHidden(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		store := open(t, parley.Options{})
		s := start(t, store, serverOptions{})
		ana := s.user("ana", parley.RoleAdmin)
		s.do("GET", "/api/convs", ana, nil).want(200) // the identity is cached now
		store.Close()
		for _, r := range []reply{
			s.do("GET", "/api/convs", ana, nil),
			s.do("POST", "/api/convs", ana, map[string]any{"id": "x"}),
			s.do("POST", "/api/admin/users", ana, map[string]string{"id": "zed"}),
		} {
			r.want(503, parley.CodeUnavailable)
			p := r.problem()
			if p.RequestID == "" || p.Detail != parley.InternalMessage {
				t.Errorf("%s: problem %+v, want the generic message and a request id", r.what, p)
			}
			if r.header.Get("Retry-After") == "" {
				t.Errorf("%s: no Retry-After", r.what)
			}
			low := strings.ToLower(string(r.body))
			for _, leak := range []string{"sql", "select", "insert", "closed", "/tmp", ".go:", "goroutine", "pgx", "postgres"} {
				if strings.Contains(low, leak) {
					t.Errorf("%s: body leaks %q: %s", r.what, leak, r.body)
				}
			}
			if !strings.Contains(s.logs.String(), p.RequestID) {
				t.Errorf("%s: request id %s not in the log", r.what, p.RequestID)
			}
		}
	})
}

// TestSendAndSync checks the message routes: 201 then 200 with dup, keys
// quoted or bare, bodies that mirror their frames, read and ack cursors,
// fetch and the conversation list.
func TestSendAndSync(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleUser)
		ben := s.user("ben", parley.RoleUser)
		c := s.do("POST", "/api/convs", ana, map[string]any{"id": "d", "kind": "direct", "members": []string{"ben"}}).want(201)
		var conv struct {
			ID   string
			Kind string
			Head int64
		}
		c.decode(&conv)
		if conv.ID != "d" || conv.Kind != "direct" || conv.Head != 2 {
			t.Fatalf("created %+v", conv)
		}

		first := s.do("POST", "/api/convs/d/messages", ana, map[string]string{"body": "hi"}, "Idempotency-Key", `"key-1"`).want(201).frame()
		if *first.Seq != 3 || *first.Dup || first.MID == "" || *first.Epoch != 1 || first.Conv != "d" {
			t.Fatalf("first send %+v", first)
		}
		for _, key := range []string{"key-1", `"key-1"`, ` key-1 `} {
			again := s.do("POST", "/api/convs/d/messages", ana, map[string]string{"body": "hi"}, "Idempotency-Key", key).want(200).frame()
			if *again.Seq != 3 || !*again.Dup || again.MID != first.MID {
				t.Errorf("replay with key %q: %+v", key, again)
			}
		}
		for _, key := range []string{`"unterminated`, `"bad\q"`, `""`, ""} {
			s.do("POST", "/api/convs/d/messages", ana, map[string]string{"body": "hi"}, "Idempotency-Key", key).want(400, parley.CodeInvalidArgument)
		}
		s.do("POST", "/api/convs/d/messages", ana, map[string]string{"body": "hi"}, "Idempotency-Key", "a", "Idempotency-Key", "b").want(400, parley.CodeInvalidArgument)
		s.do("POST", "/api/convs/d/messages", ana, `{"body":"hi","extra":1}`, "Idempotency-Key", "k2").want(400, parley.CodeInvalidArgument)

		page := s.do("GET", "/api/convs/d/events?after=0&limit=2", ben, nil).want(200).frame()
		if len(page.Events) != 2 || !*page.HasMore || *page.NextAfter != 2 || *page.Head != 3 || *page.Epoch != 1 {
			t.Fatalf("page %+v", page)
		}
		page = s.do("GET", fmt.Sprintf("/api/convs/d/events?after=%d", *page.NextAfter), ben, nil).want(200).frame()
		if len(page.Events) != 1 || page.Events[0].Body != "hi" || *page.HasMore {
			t.Fatalf("second page %+v", page)
		}
		got := s.do("GET", "/api/convs/d/events/3", ben, nil).want(200).frame()
		if got.Ev == nil || got.Ev.MID != first.MID {
			t.Fatalf("fetch %+v", got)
		}

		rd := s.do("POST", "/api/convs/d/read", ben, map[string]int{"seq": 3}).want(200).frame()
		ack := s.do("POST", "/api/convs/d/ack", ben, map[string]int{"seq": 3}).want(200).frame()
		if *rd.Read != 3 || *ack.Delivered != 3 || rd.Conv != "d" {
			t.Fatalf("read %+v ack %+v", rd, ack)
		}
		low := s.do("POST", "/api/convs/d/read", ben, map[string]int{"seq": 1}).want(200).frame()
		if *low.Read != 3 {
			t.Errorf("a lower read moved the cursor back: %+v", low)
		}
		s.do("POST", "/api/convs/d/read", ben, `{}`).want(400, parley.CodeInvalidArgument)

		convs := s.do("GET", "/api/convs", ben, nil).want(200).frame()
		if len(convs.Convs) != 1 || convs.Convs[0].Conv != "d" || convs.Convs[0].Read != 3 {
			t.Fatalf("convs %+v", convs)
		}

		rec := s.do("POST", "/api/convs/d/recall", ana, map[string]int{"target": 3}, "Idempotency-Key", "r").want(201).frame()
		again := s.do("POST", "/api/convs/d/recall", ana, map[string]int{"target": 3}, "Idempotency-Key", "r").want(200).frame()
		if *rec.Seq != 4 || *rec.Dup || !*again.Dup || *again.Seq != 4 {
			t.Errorf("recall %+v, replay %+v", rec, again)
		}
		ev := s.do("GET", "/api/convs/d/events/3", ben, nil).want(200).frame().Ev
		if !ev.Recalled || ev.Body != "" {
			t.Errorf("recalled message %+v", ev)
		}
	})
}

// TestMembers covers adding and removing members over HTTP, with the
// no-op answers and pushes to the member's socket.
func TestMembers(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleUser)
		s.user("ben", parley.RoleUser)
		cy := s.user("cy", parley.RoleUser)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{"ben"}}).want(201)

		ws := dialWS(t, s, cy)
		add := s.do("POST", "/api/convs/g/members", ana, map[string]string{"user": "cy"}).want(200)
		var mc struct {
			Conv, User string
			Seq        int64
			Changed    bool
		}
		add.decode(&mc)
		if mc.Conv != "g" || mc.User != "cy" || mc.Seq != 3 || !mc.Changed {
			t.Fatalf("add %+v", mc)
		}
		// cy's gateway did not watch g: the membership notice makes it.
		if f := ws.next(wire.TEvent); f.Ev.Seq != 3 || f.Ev.Kind != string(parley.EventMemberJoined) {
			t.Fatalf("push %+v", f.Ev)
		}
		mc.Seq, mc.Changed = -1, true
		s.do("POST", "/api/convs/g/members", ana, map[string]string{"user": "cy"}).want(200).decode(&mc)
		if mc.Changed || mc.Seq != -1 {
			t.Errorf("adding a member twice: %+v", mc)
		}
		s.do("POST", "/api/convs/g/members", ana, map[string]string{"user": "nobody"}).want(404, parley.CodeNotFound)
		s.do("DELETE", "/api/convs/g/members/ben", cy, nil).want(403, parley.CodePermissionDenied)
		s.do("DELETE", "/api/convs/g/members/cy", cy, nil).want(200).decode(&mc)
		if !mc.Changed || mc.Seq != 4 {
			t.Errorf("leave %+v", mc)
		}
		s.do("POST", "/api/convs/g/messages", cy, map[string]string{"body": "x"}, "Idempotency-Key", "k").want(404, parley.CodeNotMember)

		// A direct conversation has no member changes: 403 with the one
		// fixed message.
		s.do("POST", "/api/convs", ana, map[string]any{"id": "d", "kind": "direct", "members": []string{"ben"}}).want(201)
		if p := s.do("POST", "/api/convs/d/members", ana, map[string]string{"user": "cy"}).want(403, parley.CodePermissionDenied).problem(); p.Detail != "Access denied" {
			t.Errorf("direct member change detail %q", p.Detail)
		}
	})
}

// TestPushesAfterHTTPWrites: every HTTP write reaches the sockets after its
// commit. A conversation created with cy reaches cy's socket although its
// gateway watched nothing of it; a send is pushed; a read on cy's other
// device becomes a hint carrying the read cursor.
func TestPushesAfterHTTPWrites(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleUser)
		cyPhone := s.user("cy", parley.RoleUser)
		cyLaptop := s.login("cy", "laptop", "i1")
		ws := dialWS(t, s, cyPhone)

		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{"cy"}}).want(201)
		if f := ws.next(wire.TEvent); f.Ev.Conv != "g" || f.Ev.Kind != string(parley.EventMemberJoined) {
			t.Fatalf("first push after the creation: %+v", f.Ev)
		}
		sent := s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "hi cy"}, "Idempotency-Key", "k").want(201).frame()
		for {
			f := ws.next(wire.TEvent)
			if f.Ev.Seq == *sent.Seq {
				if f.Ev.Body != "hi cy" {
					t.Errorf("pushed %+v", f.Ev)
				}
				break
			}
		}
		s.do("POST", "/api/convs/g/read", cyLaptop, map[string]int64{"seq": *sent.Seq}).want(200)
		if h := ws.next(wire.THint); h.Conv != "g" || h.Read == nil || *h.Read != *sent.Seq {
			t.Errorf("read hint %+v", h)
		}
	})
}

// TestHTTPSendsCarryTheEvent: an HTTP or webhook send publishes its notice
// with the event as a member reads it from the store (so gateways push it
// without a read), when the store reports the commit time; a replay and a
// recall publish ids only.
func TestHTTPSendsCarryTheEvent(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		var mu sync.Mutex
		var published []parley.Notice
		s := start(t, open(t, parley.Options{}), serverOptions{onPublish: func(n parley.Notice) {
			mu.Lock()
			published = append(published, n)
			mu.Unlock()
		}})
		notice := func(conv string, seq int64) []parley.Notice {
			t.Helper()
			mu.Lock()
			defer mu.Unlock()
			var ns []parley.Notice
			for _, n := range published {
				if n.Conv == conv && n.Seq == seq && !n.Read() {
					ns = append(ns, n)
				}
			}
			return ns
		}
		ana := s.user("ana", parley.RoleAdmin)
		s.user("ben", parley.RoleUser)
		s.do("POST", "/api/admin/users", ana, map[string]any{"id": "ci-bot"}).want(201)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{"ben", "ci-bot"}}).want(201)
		var h hookInfo
		s.do("POST", "/api/admin/hooks", ana, map[string]string{"conv": "g", "bot": "ci-bot"}).want(201).decode(&h)

		sent := s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "100% sure\nof it"}, "Idempotency-Key", "k1").want(201).frame()
		s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "100% sure\nof it"}, "Idempotency-Key", "k1").want(200)
		hooked := s.postHook(h, "build-1", `{"body":"build 1 passed"}`, time.Now(), "").want(201).frame()
		ben := parley.Principal{User: "ben", Role: parley.RoleUser, DeviceID: "d1"}
		_, onSQLite := s.store.(*sqlite.DB)
		for _, c := range []struct {
			name    string
			seq     int64
			notices int // the send's, and a replay's (ids only)
		}{{"http send", *sent.Seq, 2}, {"webhook send", *hooked.Seq, 1}} {
			ns := notice("g", c.seq)
			if len(ns) != c.notices || len(ns) == 2 && ns[1].Event != nil {
				t.Fatalf("%s: published %v, want %d notices, a replay's of ids only", c.name, ns, c.notices)
			}
			n := ns[0]
			if n.Event == nil {
				if onSQLite {
					t.Errorf("%s: published ids only, but SQLite reports the commit time", c.name)
				}
				continue
			}
			ev, err := s.store.Fetch(context.Background(), ben, "g", c.seq)
			if err != nil {
				t.Fatal(err)
			}
			ev.Derived = nil // a push carries no derived state: the client folds what follows
			if want := (parley.Notice{Conv: "g", Seq: c.seq}).WithEvent(ev, 1); !n.Same(want) {
				t.Errorf("%s: published %s, want the stored event: %s", c.name, show(n), show(want))
			}
		}
		rec := s.do("POST", "/api/convs/g/recall", ana, map[string]int64{"target": *sent.Seq}, "Idempotency-Key", "r1").want(201).frame()
		if ns := notice("g", *rec.Seq); len(ns) != 1 || ns[0].Event != nil {
			t.Errorf("recall: published %v, want one notice of ids only", ns)
		}
	})
}

func show(n parley.Notice) string {
	if n.Event == nil {
		return fmt.Sprintf("%+v", n)
	}
	return fmt.Sprintf("%+v with event %+v", n, *n.Event)
}

// TestNewInstallEndsOldSockets: logging a device in with a new install id
// ends the old install's sockets at once with STALE_INSTALL (not at the
// next reauth round), and its token is refused at once over HTTP.
func TestNewInstallEndsOldSockets(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		old := s.user("cy", parley.RoleUser) // device d1, install i1
		s.do("GET", "/api/convs", old, nil).want(200)
		ws := dialWS(t, s, old)
		s.login("cy", "d1", "i2")
		if f := ws.next(wire.TError); f.Code != parley.CodeStaleInstall {
			t.Fatalf("old install's socket got %+v", f)
		}
		s.do("GET", "/api/convs", old, nil).want(401, parley.CodeStaleInstall)
	})
}

// TestConvsPages: GET /api/convs answers pages of ?limit= (default 100,
// capped at 200), latest activity first, with has_more and next; ?before=
// is the next page; without parameters it is the first page, as old
// clients ask. A bad limit or cursor is 400 INVALID_ARGUMENT.
func TestConvsPages(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleUser)
		p := parley.Principal{User: "ana", DeviceID: "d0"}
		const n = parley.DefaultConvs + 3
		for i := range n {
			if _, err := s.store.CreateConversation(context.Background(), p, parley.NewConversation{ID: fmt.Sprintf("c%03d", i), Kind: parley.KindGroup, Title: "t"}); err != nil {
				t.Fatal(err)
			}
		}
		first := s.do("GET", "/api/convs", ana, nil).want(200).frame()
		if len(first.Convs) != parley.DefaultConvs || first.HasMore == nil || !*first.HasMore || first.Next == "" {
			t.Fatalf("first page: %d entries, has_more %v, next %q", len(first.Convs), first.HasMore, first.Next)
		}
		seen := map[string]bool{}
		var walked int
		before := ""
		for {
			q := "/api/convs?limit=7"
			if before != "" {
				q += "&before=" + url.QueryEscape(before)
			}
			f := s.do("GET", q, ana, nil).want(200).frame()
			for _, c := range f.Convs {
				if seen[c.Conv] {
					t.Fatalf("%s listed twice", c.Conv)
				}
				seen[c.Conv] = true
			}
			walked++
			if !*f.HasMore {
				break
			}
			before = f.Next
		}
		if len(seen) != n || walked != (n+6)/7 {
			t.Errorf("walk in pages of 7: %d conversations in %d pages, want %d in %d", len(seen), walked, n, (n+6)/7)
		}
		if f := s.do("GET", "/api/convs?limit=100000", ana, nil).want(200).frame(); len(f.Convs) != n {
			t.Errorf("a limit above the cap: %d entries, want all %d (under 200)", len(f.Convs), n)
		}
		for _, q := range []string{"limit=0", "limit=-1", "limit=x", "before=nonsense!", "before=MTI"} {
			s.do("GET", "/api/convs?"+q, ana, nil).want(400, parley.CodeInvalidArgument)
		}
	})
}
