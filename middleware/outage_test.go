package middleware_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/ratelimit"
)

// outageFixture is a store with users and their tokens, and a chain whose
// identity lookups go to a closed handle on the same file: every lookup
// fails the way a store that went away fails.
type outageFixture struct {
	ana, root string
	chain     *middleware.Chain
	metrics   *metrics.Metrics
}

func newOutageFixture(t *testing.T, cfg *config.Config) *outageFixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.db")
	live := openStoreAt(t, path)
	createUser(t, live, "ana", parley.RoleUser)
	createUser(t, live, "root", parley.RoleAdmin)
	f := &outageFixture{ana: login(t, live, "ana", "d1", "i1"), root: login(t, live, "root", "d1", "i1")}
	closed := openStoreAt(t, path)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	f.metrics = metrics.New(metrics.Options{})
	lim := ratelimit.NewMemory(ratelimit.MemoryOptions{Now: newClock().Now})
	f.chain = &middleware.Chain{
		Identifier: middleware.NewIdentifier(closed.Authenticate, middleware.IdentifierOptions{}),
		Limiter:    func() ratelimit.Store { return lim },
		Config:     func() *config.Config { return cfg },
		Metrics:    f.metrics,
		Log:        slog.New(slog.DiscardHandler),
	}
	return f
}

// TestIdentityOutage: while the store cannot answer, a request with a valid
// token is 503 UNAVAILABLE with Retry-After, never the terminal 401 a client
// drops its request on; 401 stays for a token that is absent or malformed
// (decided without the store); public routes still run, with the caller
// unknown rather than anonymous.
func TestIdentityOutage(t *testing.T) {
	cfg := parseConfig(t, "permissions: {admin: [admin]}\n")
	f := newOutageFixture(t, cfg)
	admin := middleware.Policy{Pattern: "POST /api/admin/x", Access: middleware.Permitted, Rule: "admin"}
	srv := serve(t, f.chain, sendPolicy, loginPolicy, admin)

	tests := []struct {
		name   string
		rq     request
		status int
		code   parley.Code
	}{
		{"valid bearer token on a user route", request{path: "/api/convs/g/messages", token: f.ana}, 503, parley.CodeUnavailable},
		{"valid session cookie on a user route", request{path: "/api/convs/g/messages", cookie: f.ana}, 503, parley.CodeUnavailable},
		{"valid admin token on an admin route", request{path: "/api/admin/x", token: f.root}, 503, parley.CodeUnavailable},
		{"valid user token on an admin route", request{path: "/api/admin/x", token: f.ana}, 503, parley.CodeUnavailable},
		{"no token is still 401", request{path: "/api/convs/g/messages"}, 401, parley.CodeUnauthenticated},
		{"a malformed (over-long) token is still 401", request{path: "/api/convs/g/messages", token: strings.Repeat("x", 300)}, 401, parley.CodeUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := srv.do(t, tt.rq)
			checkRefused(t, got, tt.status, tt.code)
			if tt.status == 503 {
				if ra := got.header.Get("Retry-After"); ra != "1" {
					t.Errorf("Retry-After %q, want 1", ra)
				}
				if ct := got.header.Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("Content-Type %q, want application/problem+json", ct)
				}
				if got.header.Get("WWW-Authenticate") != "" {
					t.Errorf("a 503 carries WWW-Authenticate %q", got.header.Get("WWW-Authenticate"))
				}
			}
		})
	}

	// A public route runs: login does not need the caller's identity.
	got := srv.do(t, request{path: "/api/login", token: f.ana})
	if got.status != 200 || !got.ran {
		t.Errorf("login with an unverifiable token: %d (%s), want the handler to run", got.status, got.problem.Code)
	}
	if s := got.header.Get("X-Subject"); s != "ip:127.0.0.1" {
		t.Errorf("login subject %q, want the address (the user is unknown)", s)
	}
	// The 503s are counted as refusals of their route.
	refused := scrape(t, f.metrics, metrics.NameRefused)
	if n := refused[`{code="503",route="POST /api/convs/{id}/messages"}`]; n != 2 {
		t.Errorf("refused 503 on the send route = %v, want 2 (all: %v)", n, refused)
	}
}

// TestPermissionCheckOutage: a route's own permission check (Policy.Check)
// denies with 403 when it decides — a refusal, a terminal code, a panic —
// and answers 503 UNAVAILABLE when what it asked could not answer (here a
// closed store), never granting access either way.
func TestPermissionCheckOutage(t *testing.T) {
	fx := newFixture(t)
	path := filepath.Join(t.TempDir(), "gone.db")
	gone := openStoreAt(t, path)
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		check  func(ctx context.Context, c parley.Caller) error
		status int
		code   parley.Code
	}{
		{"allowed", func(context.Context, parley.Caller) error { return nil }, 200, ""},
		{"denied", func(context.Context, parley.Caller) error { return parley.ErrAccessDenied }, 403, parley.CodePermissionDenied},
		{"another terminal verdict is a denial", func(context.Context, parley.Caller) error { return parley.ErrNotMember }, 403, parley.CodePermissionDenied},
		{"a panic denies", func(context.Context, parley.Caller) error { panic("broken rule") }, 403, parley.CodePermissionDenied},
		{"the store failing is an outage", func(ctx context.Context, c parley.Caller) error {
			_, err := gone.Joined(ctx, c.Principal.User)
			return err
		}, 503, parley.CodeUnavailable},
		{"a timeout is an outage", func(ctx context.Context, c parley.Caller) error {
			<-ctx.Done() // bounded by timeouts.store
			return ctx.Err()
		}, 503, parley.CodeUnavailable},
		{"an UNAVAILABLE verdict is an outage", func(context.Context, parley.Caller) error {
			return parley.Errorf(parley.CodeUnavailable, "permission service down")
		}, 503, parley.CodeUnavailable},
	}
	cfg := parseConfig(t, "timeouts: {store: 50ms}\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ran atomic.Bool
			check := func(ctx context.Context, c parley.Caller) error {
				ran.Store(true)
				if c.Principal.User != "ana" {
					return errors.New("check called without the caller")
				}
				return tt.check(ctx, c)
			}
			p := middleware.Policy{Pattern: "POST /api/x", Access: middleware.Identified, Check: check}
			srv := serve(t, fx.chain(cfg, nil), p)
			began := time.Now()
			got := srv.do(t, request{path: "/api/x", token: fx.ana, body: "garbage"})
			if !ran.Load() {
				t.Fatal("the check did not run")
			}
			if d := time.Since(began); d > 10*time.Second {
				t.Errorf("the check took %v under a 50ms store timeout", d)
			}
			if tt.status == 200 {
				if got.status != 200 || !got.ran {
					t.Errorf("got %d (%s), want the handler to run", got.status, got.problem.Code)
				}
				return
			}
			checkRefused(t, got, tt.status, tt.code)
			switch tt.status {
			case http.StatusForbidden:
				if got.problem.Detail != middleware.AccessDenied {
					t.Errorf("403 detail %q, want %q", got.problem.Detail, middleware.AccessDenied)
				}
			case http.StatusServiceUnavailable:
				if got.header.Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
			}
		})
	}
}
