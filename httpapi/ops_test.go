package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

type auditEntry struct {
	ID       int64
	Operator string
	Action   string
	Target   string
	Params   string
	Outcome  string
}

func (s *server) audit(token string) []auditEntry {
	s.t.Helper()
	var b struct{ Entries []auditEntry }
	s.do("GET", "/api/admin/audit?limit=50", token, nil).want(200).decode(&b)
	return b.Entries
}

// TestAdminUsers: create, disable (the user's tokens stop at once, on HTTP
// and on open sockets), enable; only admins; every call audited with the
// operator from the login and redacted parameters.
func TestAdminUsers(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleAdmin)
		ben := s.user("ben", parley.RoleUser)

		var u struct {
			ID, Role string
			Disabled bool
		}
		s.do("POST", "/api/admin/users", ana, map[string]any{
			"id": "dee", "password": "password-dee", "role": "user", "__authenticatedOperator": "mallory",
		}).want(201).decode(&u)
		if u.ID != "dee" || u.Role != "user" || u.Disabled {
			t.Fatalf("created %+v", u)
		}
		s.do("POST", "/api/admin/users", ana, map[string]any{"id": "dee", "password": "password-x"}).want(409, parley.CodeAlreadyExists)
		s.do("POST", "/api/admin/users", ana, map[string]any{"id": "Bad Id!"}).want(400, parley.CodeInvalidArgument)
		s.do("POST", "/api/admin/users", ana, `{"id":"x","nope":1}`).want(400, parley.CodeInvalidArgument)
		p := s.do("POST", "/api/admin/users", ben, map[string]any{"id": "evil"}).want(403, parley.CodePermissionDenied).problem()
		if p.Detail != "Access denied" {
			t.Errorf("403 detail %q", p.Detail)
		}

		dee := s.login("dee", "d1", "i1")
		s.do("GET", "/api/convs", dee, nil).want(200) // cached now
		ws := dialWS(t, s, dee)
		s.do("POST", "/api/admin/users/dee/disable", ana, nil).want(200).decode(&u)
		if !u.Disabled {
			t.Fatalf("disable answered %+v", u)
		}
		s.do("GET", "/api/convs", dee, nil).want(401, parley.CodeUnauthenticated)
		f := ws.next(wire.TError)
		if f.Code != parley.CodeUnauthenticated {
			t.Errorf("socket of a disabled user got %+v", f)
		}
		if _, err := ws.read(); err == nil {
			t.Error("socket of a disabled user still open")
		}
		s.do("POST", "/api/admin/users/nobody/disable", ana, nil).want(404, parley.CodeNotFound)
		s.do("POST", "/api/admin/users/dee/enable", ana, nil).want(200).decode(&u)
		if u.Disabled {
			t.Fatalf("enable answered %+v", u)
		}
		dee = s.login("dee", "d1", "i1")
		s.do("GET", "/api/convs", dee, nil).want(200)

		entries := s.audit(ana)
		var create *auditEntry
		for i, e := range entries {
			if e.Action == "user.create" && e.Outcome == "ok" {
				create = &entries[i]
			}
		}
		if create == nil {
			t.Fatalf("no successful user.create in %+v", entries)
		}
		if create.Operator != "ana" || create.Target != "dee" {
			t.Errorf("audit entry %+v", *create)
		}
		// A long multi-byte target still fits the store's 64 bytes.
		long := strings.Repeat("é", 40)
		s.do("POST", "/api/admin/users", ana, map[string]any{"id": long}).want(400, parley.CodeInvalidArgument)
		if e := s.audit(ana)[0]; e.Action != "user.create" || e.Outcome != "INVALID_ARGUMENT" || len(e.Target) > parley.MaxAuditAction {
			t.Errorf("audit of a long target: %+v", e)
		}
		var params map[string]any
		if err := json.Unmarshal([]byte(create.Params), &params); err != nil {
			t.Fatalf("params %q: %v", create.Params, err)
		}
		if params["__authenticatedOperator"] != "ana" || params["password"] != "[REDACTED]" || params["id"] != "dee" {
			t.Errorf("params %v: want the operator overwritten and the password redacted", params)
		}
		for _, e := range entries {
			if strings.Contains(e.Params, "password-dee") || strings.Contains(e.Params, "mallory") {
				t.Errorf("audit entry leaks client input: %+v", e)
			}
		}
		var outcomes []string
		for _, e := range entries {
			outcomes = append(outcomes, e.Action+":"+e.Outcome)
		}
		for _, want := range []string{"user.create:ALREADY_EXISTS", "user.create:INVALID_ARGUMENT", "user.disable:ok", "user.disable:NOT_FOUND", "user.enable:ok"} {
			if !strings.Contains(strings.Join(outcomes, " "), want) {
				t.Errorf("audit log lacks %s: %v", want, outcomes)
			}
		}
	})
}

// TestAdminConversations: rollback (epoch bump, sockets resync), retention
// and purge, and the effective configuration.
func TestAdminConversations(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: "rate_limits:\n  send: {limit: 100, window: 1m}\nrate_limit_store: {redis: 'redis://:hunter2@127.0.0.1:6379/0'}\n"})
		ana := s.user("ana", parley.RoleAdmin)
		ben := s.user("ben", parley.RoleUser)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{"ben"}}).want(201)
		for i := range 4 {
			s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "m"}, "Idempotency-Key", string(rune('a'+i))).want(201)
		}
		ws := dialWS(t, s, ben)

		var rb struct {
			Conv           string
			Removed, Epoch int64
			Head           int64
		}
		s.do("POST", "/api/admin/convs/g/rollback", ana, map[string]int{"to_seq": 4}).want(200).decode(&rb)
		if rb.Removed != 2 || rb.Epoch != 2 || rb.Head != 4 {
			t.Fatalf("rollback %+v", rb)
		}
		ws.next(wire.TResync)
		s.do("GET", "/api/convs/g/events?after=0&epoch=1", ben, nil).want(409, parley.CodeEpochChanged)
		s.do("POST", "/api/admin/convs/g/rollback", ana, map[string]int{"to_seq": 99}).want(400, parley.CodeInvalidArgument)
		s.do("POST", "/api/admin/convs/g/rollback", ana, `{}`).want(400, parley.CodeInvalidArgument)
		s.do("POST", "/api/admin/convs/nope/rollback", ana, map[string]int{"to_seq": 0}).want(404, parley.CodeNotFound)
		s.do("POST", "/api/admin/convs/g/rollback", ben, map[string]int{"to_seq": 0}).want(403, parley.CodePermissionDenied)

		var c struct {
			Head      int64
			MinSeq    int64 `json:"min_seq"`
			Retention struct {
				MaxAge   string `json:"max_age"`
				KeepLast int64  `json:"keep_last"`
			}
		}
		s.do("PUT", "/api/admin/convs/g/retention", ana, map[string]any{"keep_last": 2, "max_age": "720h"}).want(200).decode(&c)
		if c.Retention.KeepLast != 2 || c.Retention.MaxAge != "720h0m0s" {
			t.Fatalf("retention %+v", c)
		}
		s.do("PUT", "/api/admin/convs/g/retention", ana, map[string]any{"max_age": "a while"}).want(400, parley.CodeInvalidArgument)
		var pr struct {
			Deleted, Tombstones int64
			MinSeq              int64 `json:"min_seq"`
		}
		s.do("POST", "/api/admin/convs/g/purge", ana, nil).want(200).decode(&pr)
		if pr.Deleted != 2 || pr.MinSeq != 3 || pr.Tombstones != 0 {
			t.Errorf("purge %+v", pr)
		}
		s.do("GET", "/api/admin/convs/g", ana, nil).want(200).decode(&c)
		if c.MinSeq != 3 || c.Head != 4 {
			t.Errorf("conversation after purge %+v", c)
		}

		cfg := s.do("GET", "/api/admin/config", ana, nil).want(200)
		if strings.Contains(string(cfg.body), "hunter2") {
			t.Errorf("effective configuration shows the Redis password: %s", cfg.body)
		}
		var eff map[string]any
		cfg.decode(&eff)
		if _, ok := eff["rate_limits"]; !ok {
			t.Errorf("effective configuration %s lacks rate_limits", cfg.body)
		}
		s.do("GET", "/api/admin/config", ben, nil).want(403, parley.CodePermissionDenied)
		s.do("GET", "/api/admin/audit?limit=0", ben, nil).want(403, parley.CodePermissionDenied)
		s.do("GET", "/api/admin/audit?limit=x", ana, nil).want(400, parley.CodeInvalidArgument)
	})
}

// TestAuditRedaction checks RedactParams directly: secrets at any depth,
// long values capped, the whole text bounded.
func TestAuditRedaction(t *testing.T) {
	long := strings.Repeat("é", 1000)
	got := httpapi.RedactParams(map[string]any{
		"password": "p", "api_key": "k", "nested": map[string]any{"Token": "t", "list": []any{map[string]any{"client_secret": "s"}}},
		"note": long, "n": 3,
	})
	for _, leak := range []string{`"p"`, `"k"`, `"t"`, `"s"`} {
		if strings.Contains(got, leak) {
			t.Errorf("redacted params leak %s: %s", leak, got)
		}
	}
	if !strings.Contains(got, "[REDACTED]") || strings.Contains(got, long) || !strings.Contains(got, `"n":3`) {
		t.Errorf("redacted params %s", got)
	}
	huge := map[string]any{}
	for i := range 100 {
		huge[strings.Repeat("k", 3)+string(rune('A'+i%26))+strings.Repeat("x", i)] = long
	}
	for _, params := range []map[string]any{huge, {"list": []any{strings.Repeat("x", 300), strings.Repeat("y", 300)}}} {
		got := httpapi.RedactParams(params)
		if len(got) > parley.MaxAuditParams {
			t.Errorf("params of %d bytes, cap %d", len(got), parley.MaxAuditParams)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(got), &v); err != nil {
			t.Errorf("capped params are not JSON: %v\n%s", err, got)
		}
	}
}

// TestAuditBeforeOperation: the audit entry is written before the
// operation acts and finished after it; when the entry cannot be written
// (here the audit table is gone), the operation is not done and the
// operator gets 503.
func TestAuditBeforeOperation(t *testing.T) {
	file := filepath.Join(t.TempDir(), "parley.db")
	store, err := sqlite.Open(context.Background(), file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	s := start(t, store, serverOptions{})
	ana := s.user("ana", parley.RoleAdmin)
	s.user("ben", parley.RoleUser)

	s.do("POST", "/api/admin/users/ben/disable", ana, nil).want(200)
	if e := s.audit(ana)[0]; e.Action != "user.disable" || e.Outcome != "ok" || e.Target != "ben" {
		t.Fatalf("finished entry %+v", e)
	}
	s.do("POST", "/api/admin/users/ben/enable", ana, nil).want(200)

	side, err := sql.Open("sqlite", "file:"+file)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	if _, err := side.Exec(`ALTER TABLE audit_log RENAME TO audit_log_away`); err != nil {
		t.Fatal(err)
	}
	s.do("POST", "/api/admin/users/ben/disable", ana, nil).want(503, parley.CodeUnavailable)
	if u, err := store.User(context.Background(), "ben"); err != nil || u.Disabled {
		t.Fatalf("ben after an unaudited disable: %+v %v; want the operation not done", u, err)
	}
}

// TestMetricsLoopbackOnly: /metrics on the public listener answers a
// loopback client; a client elsewhere (here named by a trusted proxy's
// X-Forwarded-For) gets the 404 of a missing route until metrics.allow
// names its network. A request an untrusted local proxy relayed is not
// taken for a loopback client.
func TestMetricsLoopbackOnly(t *testing.T) {
	s := start(t, openSQLite(t), serverOptions{config: trustLoopback})
	s.do("GET", "/metrics", "", nil).want(200)
	s.do("GET", "/metrics", "", nil, "X-Forwarded-For", "203.0.113.9").want(404, parley.CodeNotFound)
	s.do("GET", "/metrics", "", nil, "X-Forwarded-For", "2001:db8::9").want(404, parley.CodeNotFound)

	s.writeConfig(trustLoopback + "metrics: {allow: [203.0.113.0/24]}\n")
	eventually(t, "metrics.allow in force", func() bool {
		return s.do("GET", "/metrics", "", nil, "X-Forwarded-For", "203.0.113.9").status == 200
	})
	s.do("GET", "/metrics", "", nil, "X-Forwarded-For", "198.51.100.9").want(404, parley.CodeNotFound)

	u := start(t, openSQLite(t), serverOptions{}) // no trusted proxy
	u.do("GET", "/metrics", "", nil).want(200)
	u.do("GET", "/metrics", "", nil, "X-Forwarded-For", "203.0.113.9").want(404, parley.CodeNotFound)
	u.do("GET", "/metrics", "", nil, "Forwarded", "for=203.0.113.9").want(404, parley.CodeNotFound)
}
