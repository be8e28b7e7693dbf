package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// TestStoreOutageNeverTerminal: while the store is down, every request
// whose answer depends on it — identifying a valid token, logging in or
// out, upgrading /ws, checking an open socket's token again — is 503
// UNAVAILABLE with Retry-After, never a terminal code: a client obeying
// docs/protocol.md would drop a request on 401 or 403 that was never judged.
// Only a request without a token stays 401. On PostgreSQL the database
// comes back and a retry with the same Idempotency-Key lands exactly once,
// with no failure cached in between.
func TestStoreOutageNeverTerminal(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		// A closed handle fails every call, as a store that went away does.
		outageTest(t, store, func() { store.Close() }, nil)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.DSN(t)
		store, err := postgres.Open(context.Background(), dsn, parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		db := strings.TrimPrefix(u.Path, "/")
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, pgtest.Server(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.Close(ctx) })
		exec := func(sql string) {
			t.Helper()
			if _, err := admin.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		name := pgx.Identifier{db}.Sanitize()
		down := func() {
			// The database refuses new connections and its sessions are
			// ended: to the store's pool the server is gone.
			exec(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS false`)
			exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '` + db + `' AND pid <> pg_backend_pid()`)
		}
		up := func() { exec(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS true`) }
		t.Cleanup(func() { admin.Exec(ctx, `ALTER DATABASE `+name+` ALLOW_CONNECTIONS true`) })
		outageTest(t, store, down, up)
	})
}

// outageTest runs the outage checks on store; down breaks it, up (nil:
// never) mends it.
func outageTest(t *testing.T, store parley.Store, down, up func()) {
	s := start(t, store, serverOptions{reauth: 50 * time.Millisecond})
	ana := s.user("ana", parley.RoleUser)
	s.user("root", parley.RoleAdmin)
	s.do("POST", "/api/convs", ana, map[string]any{"id": "g"}).want(201)
	// Tokens the chain has never looked up (login does not cache them), so
	// the outage meets them at the store, not in the identity cache.
	anaFresh := s.login("ana", "d2", "i1")
	rootFresh := s.login("root", "d2", "i1")
	logout := s.login("ana", "d3", "i1")
	sock := dialWS(t, s, s.login("ana", "d4", "i1"))

	down()

	requests := []struct {
		method, path, token string
		body                any
		hdr                 []string
	}{
		{"GET", "/api/convs", anaFresh, nil, nil},
		{"POST", "/api/convs/g/messages", anaFresh, map[string]string{"body": "during the outage"}, []string{"Idempotency-Key", `"k-1"`}},
		{"GET", "/api/convs/g/events?after=0", anaFresh, nil, nil},
		{"POST", "/api/convs/g/read", anaFresh, map[string]int{"seq": 1}, nil},
		{"POST", "/api/convs", anaFresh, map[string]any{"id": "h"}, nil},
		{"POST", "/exports", anaFresh, map[string]any{"scope": "all"}, []string{"Idempotency-Key", `"e-1"`}},
		{"GET", "/api/admin/config", rootFresh, nil, nil},
		{"POST", "/api/login", "", map[string]string{"login": "ana", "password": "password-ana", "device_id": "d5", "install_id": "i1"}, nil},
		{"POST", "/api/logout", logout, nil, nil},
		{"GET", "/readyz", "", nil, nil},
	}
	for _, rq := range requests {
		r := s.do(rq.method, rq.path, rq.token, rq.body, rq.hdr...).want(http.StatusServiceUnavailable, parley.CodeUnavailable)
		if ra := r.header.Get("Retry-After"); ra != "1" {
			t.Errorf("%s %s: Retry-After %q, want 1", rq.method, rq.path, ra)
		}
	}
	s.do("GET", "/healthz", "", nil).want(200)
	s.do("GET", "/api/convs", "", nil).want(401, parley.CodeUnauthenticated)

	// The upgrade of a new socket is 503 with Retry-After, not 401.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + anaFresh}},
	})
	if err == nil {
		ws.CloseNow()
		t.Fatal("the upgrade succeeded while the store is down")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("upgrade during the outage: %v, %+v; want 503 with Retry-After", err, resp)
	}

	// The open socket survives its token checks (every 50ms here): its
	// requests are answered UNAVAILABLE, and it is never told
	// UNAUTHENTICATED.
	time.Sleep(300 * time.Millisecond)
	sock.send(map[string]any{"t": "convs", "rid": "c1"})
	for {
		f, err := sock.read()
		if err != nil {
			t.Fatalf("the open socket ended during the outage: %v", err)
		}
		if f.T != wire.TError {
			continue
		}
		if f.Code != parley.CodeUnavailable {
			t.Fatalf("the open socket got %s (%s), want UNAVAILABLE", f.Code, f.Msg)
		}
		break
	}
	if up == nil {
		return
	}

	up()
	// A client following the error table retries with the same key until
	// it lands: no cached failure stands in its way, and the message is
	// stored once.
	eventually(t, "the send to land after the outage", func() bool {
		r := s.do("POST", "/api/convs/g/messages", anaFresh, map[string]string{"body": "during the outage"}, "Idempotency-Key", `"k-1"`)
		if r.status != 503 && r.status != 201 {
			t.Fatalf("retry after the outage: %d %s", r.status, r.body)
		}
		return r.status == 201
	})
	s.do("POST", "/api/convs/g/messages", anaFresh, map[string]string{"body": "during the outage"}, "Idempotency-Key", `"k-1"`).want(200)
	s.do("GET", "/readyz", "", nil).want(200)
	page := s.do("GET", "/api/convs/g/events?after=0", anaFresh, nil).want(200).frame()
	n := 0
	for _, e := range page.Events {
		if e.Kind == "message" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d messages after the outage, want 1", n)
	}
	sock.send(map[string]any{"t": "convs", "rid": "c2"})
	sock.next(wire.TConvs)
}
