package middleware_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/sqlite"
)

func TestClientAddr(t *testing.T) {
	prefixes := func(ss ...string) []netip.Prefix {
		var ps []netip.Prefix
		for _, s := range ss {
			ps = append(ps, netip.MustParsePrefix(s))
		}
		return ps
	}
	lb := prefixes("192.0.2.10/32") // one load balancer; 10/8 is not trusted
	chain := prefixes("192.0.2.10/32", "10.0.0.0/8", "2001:db8:ffff::/48")

	tests := []struct {
		name    string
		remote  string
		xff     []string
		trusted []netip.Prefix
		want    string // "" = the zero address
	}{
		{"no trusted proxies: the peer", "203.0.113.5:4000", nil, nil, "203.0.113.5"},
		{"no trusted proxies: XFF ignored", "203.0.113.5:4000", []string{"1.2.3.4"}, nil, "203.0.113.5"},
		{"untrusted peer: XFF ignored", "203.0.113.5:4000", []string{"1.2.3.4"}, lb, "203.0.113.5"},
		{"trusted peer without XFF: the peer", "192.0.2.10:443", nil, lb, "192.0.2.10"},
		{"trusted peer: the hop it appended", "192.0.2.10:443", []string{"198.51.100.7"}, lb, "198.51.100.7"},
		{"spoofed first hop is never taken", "192.0.2.10:443", []string{"1.2.3.4, 10.0.0.9"}, lb, "10.0.0.9"},
		{"spoofed first hops, no spaces", "192.0.2.10:443", []string{"1.2.3.4,5.6.7.8,10.0.0.9"}, lb, "10.0.0.9"},
		{"chained trusted proxies are skipped", "192.0.2.10:443", []string{"1.2.3.4, 198.51.100.7, 10.1.1.1, 10.2.2.2"}, chain, "198.51.100.7"},
		{"all hops trusted: the leftmost", "192.0.2.10:443", []string{"10.9.9.9, 10.1.1.1"}, chain, "10.9.9.9"},
		{"unparsable hop: the trusted hop that passed it", "192.0.2.10:443", []string{"1.2.3.4, unknown, 10.1.1.1"}, chain, "10.1.1.1"},
		{"unparsable last hop: the peer", "192.0.2.10:443", []string{"1.2.3.4, garbage"}, lb, "192.0.2.10"},
		{"empty header line: the peer", "192.0.2.10:443", []string{"198.51.100.7", ""}, lb, "192.0.2.10"},
		{"empty hop: the trusted hop before it", "192.0.2.10:443", []string{"198.51.100.7,,10.1.1.1"}, chain, "10.1.1.1"},
		{"several header lines, last line first", "192.0.2.10:443", []string{"1.2.3.4", "198.51.100.7", "10.1.1.1"}, chain, "198.51.100.7"},
		{"several header lines, client in the last", "192.0.2.10:443", []string{"1.2.3.4", "198.51.100.7"}, lb, "198.51.100.7"},
		{"hop with a port", "192.0.2.10:443", []string{"1.2.3.4, 198.51.100.7:5555"}, lb, "198.51.100.7"},
		{"IPv6 peer with brackets and port", "[2001:db8::1]:443", []string{"1.2.3.4"}, nil, "2001:db8::1"},
		{"IPv6 trusted peer, bare IPv6 hop", "[2001:db8:ffff::1]:443", []string{"1.2.3.4, 2001:db8:1::5"}, chain, "2001:db8:1::5"},
		{"IPv6 hop with brackets and port", "[2001:db8:ffff::1]:443", []string{"1.2.3.4, [2001:db8:1::5]:8080"}, chain, "2001:db8:1::5"},
		{"IPv4-mapped peer is unmapped and trusted", "[::ffff:192.0.2.10]:443", []string{"198.51.100.7"}, lb, "198.51.100.7"},
		{"IPv4-mapped hop is unmapped", "192.0.2.10:443", []string{"::ffff:198.51.100.7"}, lb, "198.51.100.7"},
		{"IPv4-mapped trusted hop is skipped", "192.0.2.10:443", []string{"198.51.100.7, ::ffff:10.1.1.1"}, chain, "198.51.100.7"},
		{"IPv4-mapped untrusted peer", "[::ffff:203.0.113.5]:4000", nil, nil, "203.0.113.5"},
		{"bare peer address", "203.0.113.5", []string{"1.2.3.4"}, nil, "203.0.113.5"},
		{"bad RemoteAddr: zero", "not an address", []string{"198.51.100.7"}, lb, ""},
		{"empty RemoteAddr: zero", "", []string{"198.51.100.7"}, lb, ""},
		{"RemoteAddr with a bad port: zero", "192.0.2.10:port", []string{"198.51.100.7"}, lb, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := middleware.ClientAddr(tt.remote, tt.xff, tt.trusted)
			var want netip.Addr
			if tt.want != "" {
				want = netip.MustParseAddr(tt.want)
			}
			if got != want {
				t.Errorf("ClientAddr(%q, %q) = %v, want %v", tt.remote, tt.xff, got, want)
			}
		})
	}
}

// authCounter wraps a real store's Authenticate and counts the calls that
// reach it.
type authCounter struct {
	n    atomic.Int64
	auth func(context.Context, string) (parley.Principal, error)
}

func (c *authCounter) Authenticate(ctx context.Context, token string) (parley.Principal, error) {
	c.n.Add(1)
	return c.auth(ctx, token)
}

func (c *authCounter) calls() int64 { return c.n.Load() }

// fakeClock is an injected Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func identify(t *testing.T, id *middleware.Identifier, token string) (parley.Principal, parley.Code) {
	t.Helper()
	return id.Identify(context.Background(), token)
}

func TestIdentifierCache(t *testing.T) {
	s := openStore(t)
	createUser(t, s, "ana", parley.RoleUser)
	token := login(t, s, "ana", "d1", "i1")
	ac := &authCounter{auth: s.Authenticate}
	clk := newClock()
	id := middleware.NewIdentifier(ac.Authenticate, middleware.IdentifierOptions{TTL: 5 * time.Second, Now: clk.Now})

	steps := []struct {
		name      string
		advance   time.Duration
		wantCalls int64
	}{
		{"first lookup asks the store", 0, 1},
		{"second lookup within TTL is cached", 0, 1},
		{"just before TTL still cached", 5*time.Second - time.Nanosecond, 1},
		{"at TTL asks again", time.Nanosecond, 2},
		{"and caches again", time.Second, 2},
	}
	for _, st := range steps {
		clk.Add(st.advance)
		p, code := identify(t, id, token)
		if code != "" || p.User != "ana" || p.Role != parley.RoleUser || p.DeviceID != "d1" || p.InstallID != "i1" {
			t.Fatalf("%s: Identify = %+v, %q; want ana on d1/i1", st.name, p, code)
		}
		if got := ac.calls(); got != st.wantCalls {
			t.Errorf("%s: store calls = %d, want %d", st.name, got, st.wantCalls)
		}
	}

	// Lookup says when the answer was read from the store: a cached answer
	// keeps the time of its lookup, a fresh one is read now.
	_, _, first := id.Lookup(context.Background(), token)
	time.Sleep(2 * time.Millisecond)
	if _, _, again := id.Lookup(context.Background(), token); !again.Equal(first) {
		t.Errorf("cached answer looked up at %v, the lookup it came from at %v", again, first)
	}
	clk.Add(5 * time.Second)
	if _, _, fresh := id.Lookup(context.Background(), token); !fresh.After(first) {
		t.Errorf("a fresh lookup reports %v, not after %v", fresh, first)
	}

	// Refusals are cached too: an unknown token costs one lookup per TTL.
	before := ac.calls()
	for range 3 {
		if _, code := identify(t, id, "no-such-token"); code != parley.CodeUnauthenticated {
			t.Fatalf("unknown token: code %q, want UNAUTHENTICATED", code)
		}
	}
	if got := ac.calls() - before; got != 1 {
		t.Errorf("unknown token looked up %d times, want 1", got)
	}
}

func TestIdentifierForgetUser(t *testing.T) {
	s := openStore(t)
	createUser(t, s, "ana", parley.RoleUser)
	createUser(t, s, "bob", parley.RoleUser)
	ana := login(t, s, "ana", "d1", "i1")
	ana2 := login(t, s, "ana", "d2", "i1")
	bob := login(t, s, "bob", "d1", "i1")
	ac := &authCounter{auth: s.Authenticate}
	id := middleware.NewIdentifier(ac.Authenticate, middleware.IdentifierOptions{TTL: time.Hour})
	for _, tok := range []string{ana, ana2, bob} {
		if _, code := identify(t, id, tok); code != "" {
			t.Fatalf("Identify: code %q", code)
		}
	}
	if got := id.Len(); got != 3 {
		t.Fatalf("Len = %d, want 3", got)
	}

	if err := s.SetUserDisabled(context.Background(), "ana", true); err != nil {
		t.Fatal(err)
	}
	// Without ForgetUser the change shows only after TTL.
	if _, code := identify(t, id, ana); code != "" {
		t.Fatalf("disabled ana before ForgetUser: code %q, want the cached principal", code)
	}
	id.ForgetUser("ana")
	if got := id.Len(); got != 1 {
		t.Errorf("Len after ForgetUser(ana) = %d, want 1 (bob's entry)", got)
	}
	calls := ac.calls()
	for _, tok := range []string{ana, ana2} {
		if p, code := identify(t, id, tok); code != parley.CodeUnauthenticated || p != (parley.Principal{}) {
			t.Errorf("disabled ana after ForgetUser: %+v, %q; want UNAUTHENTICATED", p, code)
		}
	}
	if got := ac.calls() - calls; got != 2 {
		t.Errorf("store calls after ForgetUser = %d, want 2", got)
	}
	calls = ac.calls()
	if p, code := identify(t, id, bob); code != "" || p.User != "bob" {
		t.Errorf("bob: %+v, %q", p, code)
	}
	if got := ac.calls() - calls; got != 0 {
		t.Errorf("bob's entry was dropped by ForgetUser(ana): %d store calls", got)
	}

	// ForgetToken drops one token (a logout).
	if err := s.Logout(context.Background(), bob); err != nil {
		t.Fatal(err)
	}
	id.ForgetToken(bob)
	if _, code := identify(t, id, bob); code != parley.CodeUnauthenticated {
		t.Errorf("bob after logout and ForgetToken: code %q, want UNAUTHENTICATED", code)
	}
}

// A disable (or logout) that lands while a lookup of the same token is in
// flight must not be undone by that lookup caching what it read before.
func TestIdentifierForgetDuringLookup(t *testing.T) {
	tests := []struct {
		name   string
		revoke func(t *testing.T, s *sqlite.DB, id *middleware.Identifier, token string)
	}{
		{"disable and ForgetUser", func(t *testing.T, s *sqlite.DB, id *middleware.Identifier, _ string) {
			if err := s.SetUserDisabled(context.Background(), "ana", true); err != nil {
				t.Fatal(err)
			}
			id.ForgetUser("ana")
		}},
		{"logout and ForgetToken", func(t *testing.T, s *sqlite.DB, id *middleware.Identifier, token string) {
			if err := s.Logout(context.Background(), token); err != nil {
				t.Fatal(err)
			}
			id.ForgetToken(token)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			createUser(t, s, "ana", parley.RoleUser)
			token := login(t, s, "ana", "d1", "i1")

			read := make(chan struct{})
			release := make(chan struct{})
			var first atomic.Bool
			id := middleware.NewIdentifier(func(ctx context.Context, tok string) (parley.Principal, error) {
				p, err := s.Authenticate(ctx, tok)
				if first.CompareAndSwap(false, true) {
					close(read)
					<-release
				}
				return p, err
			}, middleware.IdentifierOptions{TTL: time.Hour})

			done := make(chan parley.Code)
			go func() {
				_, code := id.Identify(context.Background(), token)
				done <- code
			}()
			<-read // the lookup has read ana as valid
			tt.revoke(t, s, id, token)
			close(release)
			if code := <-done; code != "" {
				t.Fatalf("in-flight lookup: code %q, want the principal it read", code)
			}
			if _, code := identify(t, id, token); code != parley.CodeUnauthenticated {
				t.Errorf("after the revoke: code %q, want UNAUTHENTICATED (the in-flight lookup cached a revoked principal)", code)
			}
		})
	}
}

func TestIdentifierStaleInstall(t *testing.T) {
	s := openStore(t)
	createUser(t, s, "ana", parley.RoleUser)
	old := login(t, s, "ana", "d1", "install-1")
	current := login(t, s, "ana", "d1", "install-2") // same device, new install
	id := middleware.NewIdentifier(s.Authenticate, middleware.IdentifierOptions{})

	tests := []struct {
		name     string
		token    string
		wantCode parley.Code
		wantUser string
	}{
		{"old install", old, parley.CodeStaleInstall, ""},
		{"old install, cached", old, parley.CodeStaleInstall, ""},
		{"new install", current, "", "ana"},
	}
	for _, tt := range tests {
		p, code := identify(t, id, tt.token)
		if code != tt.wantCode || p.User != tt.wantUser {
			t.Errorf("%s: %+v, %q; want user %q, code %q", tt.name, p, code, tt.wantUser, tt.wantCode)
		}
	}
}

// A store that fails (here a real, closed SQLite handle) leaves the caller
// unknown — UNAVAILABLE, not the terminal UNAUTHENTICATED of a refused
// token — and the failure is not cached: the next request asks again.
func TestIdentifierStoreFailureNotCached(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	live := openStoreAt(t, path)
	createUser(t, live, "ana", parley.RoleUser)
	token := login(t, live, "ana", "d1", "i1")
	closed := openStoreAt(t, path)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Authenticate(context.Background(), token); err == nil || parley.ErrorCode(err) == parley.CodeUnauthenticated {
		t.Fatalf("closed store: %v; want an error without a refusal code", err)
	}

	var n atomic.Int64
	id := middleware.NewIdentifier(func(ctx context.Context, tok string) (parley.Principal, error) {
		if n.Add(1) == 1 {
			return closed.Authenticate(ctx, tok)
		}
		return live.Authenticate(ctx, tok)
	}, middleware.IdentifierOptions{TTL: time.Hour})

	if p, code := identify(t, id, token); code != parley.CodeUnavailable || p != (parley.Principal{}) {
		t.Fatalf("failing store: %+v, %q; want no principal and UNAVAILABLE", p, code)
	}
	if got := id.Len(); got != 0 {
		t.Errorf("Len after a store failure = %d, want 0", got)
	}
	if p, code := identify(t, id, token); code != "" || p.User != "ana" {
		t.Errorf("after the store recovered: %+v, %q; want ana", p, code)
	}
	if got := n.Load(); got != 2 {
		t.Errorf("store calls = %d, want 2", got)
	}
}

func TestIdentifierTimeout(t *testing.T) {
	s := openStore(t)
	createUser(t, s, "ana", parley.RoleUser)
	token := login(t, s, "ana", "d1", "i1")
	// A store that answers only when its deadline has passed.
	slow := func(ctx context.Context, tok string) (parley.Principal, error) {
		<-ctx.Done()
		return s.Authenticate(ctx, tok)
	}
	id := middleware.NewIdentifier(slow, middleware.IdentifierOptions{Timeout: 20 * time.Millisecond})
	start := time.Now()
	p, code := identify(t, id, token)
	if code != parley.CodeUnavailable || p != (parley.Principal{}) {
		t.Errorf("slow store: %+v, %q; want no principal and UNAVAILABLE", p, code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Identify took %v with a 20ms timeout", d)
	}
	if got := id.Len(); got != 0 {
		t.Errorf("a timed-out lookup was cached (Len %d)", got)
	}
}

func TestIdentifierMaxEntries(t *testing.T) {
	s := openStore(t)
	createUser(t, s, "ana", parley.RoleUser)
	valid := login(t, s, "ana", "d1", "i1")
	const maxEntries = 8
	id := middleware.NewIdentifier(s.Authenticate, middleware.IdentifierOptions{MaxEntries: maxEntries, TTL: time.Hour})
	for i := range 200 {
		tok := fmt.Sprintf("unknown-token-%d", i)
		if i%10 == 0 {
			tok = valid
		}
		want := parley.CodeUnauthenticated
		if tok == valid {
			want = ""
		}
		if _, code := identify(t, id, tok); code != want {
			t.Fatalf("token %d: code %q, want %q", i, code, want)
		}
		if got := id.Len(); got > maxEntries {
			t.Fatalf("after %d tokens Len = %d, want <= %d", i+1, got, maxEntries)
		}
	}
	if got := id.Len(); got != maxEntries {
		t.Errorf("Len = %d, want %d (a full cache keeps filling its slots)", got, maxEntries)
	}
}

// A full cache drops expired entries before live ones.
func TestIdentifierEvictsExpiredFirst(t *testing.T) {
	s := openStore(t)
	createUser(t, s, "ana", parley.RoleUser)
	valid := login(t, s, "ana", "d1", "i1")
	ac := &authCounter{auth: s.Authenticate}
	clk := newClock()
	// MaxEntries is the eviction sample size here, so every eviction sees
	// every entry and the test is deterministic.
	id := middleware.NewIdentifier(ac.Authenticate, middleware.IdentifierOptions{MaxEntries: 8, TTL: time.Hour, Now: clk.Now})
	for i := range 8 {
		identify(t, id, fmt.Sprintf("old-%d", i))
	}
	clk.Add(2 * time.Hour) // every entry has expired
	live := []string{valid}
	for i := range 6 {
		live = append(live, fmt.Sprintf("live-%d", i))
	}
	for _, tok := range live {
		identify(t, id, tok)
	}
	if got := id.Len(); got != len(live) {
		t.Errorf("Len = %d, want %d: the expired entries go, the live ones stay", got, len(live))
	}
	calls := ac.calls()
	for _, tok := range live {
		identify(t, id, tok)
	}
	if got := ac.calls() - calls; got != 0 {
		t.Errorf("%d live entries were evicted", got)
	}
	identify(t, id, "one-more")
	identify(t, id, "and-another") // full of live entries: one goes
	if got := id.Len(); got != 8 {
		t.Errorf("Len = %d, want 8", got)
	}
}

// BenchmarkIdentifyFullCache is the cost of a token the cache has not seen
// when the cache is full of live entries: what a flood of random tokens
// makes every request pay, under the cache's lock. (The store is a stub;
// this measures the cache.)
func BenchmarkIdentifyFullCache(b *testing.B) {
	id := middleware.NewIdentifier(func(context.Context, string) (parley.Principal, error) {
		return parley.Principal{}, parley.ErrBadToken
	}, middleware.IdentifierOptions{})
	ctx := context.Background()
	for i := range 100_000 {
		id.Identify(ctx, fmt.Sprintf("fill-%d", i))
	}
	for i := 0; b.Loop(); i++ {
		id.Identify(ctx, fmt.Sprintf("new-%d", i))
	}
}

func TestIdentifierConcurrent(t *testing.T) {
	s := openStore(t)
	users := []string{"ana", "bob", "cy"}
	tokens := map[string]string{}
	for _, u := range users {
		createUser(t, s, u, parley.RoleUser)
		tokens[u] = login(t, s, u, "d1", "i1")
	}
	ac := &authCounter{auth: s.Authenticate}
	id := middleware.NewIdentifier(ac.Authenticate, middleware.IdentifierOptions{MaxEntries: 4, TTL: time.Hour})

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				u := users[(g+i)%len(users)]
				switch i % 5 {
				case 3:
					if _, code := id.Identify(context.Background(), fmt.Sprintf("bad-%d-%d", g, i)); code != parley.CodeUnauthenticated {
						errs <- fmt.Errorf("bad token: code %q", code)
					}
				case 4:
					id.ForgetUser(u)
				default:
					if p, code := id.Identify(context.Background(), tokens[u]); code != "" || p.User != u {
						errs <- fmt.Errorf("%s: %+v, %q", u, p, code)
					}
				}
				if n := id.Len(); n > 4 {
					errs <- fmt.Errorf("Len = %d > 4", n)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !middleware.IndexConsistent(id) {
		t.Error("the user index does not match the cache")
	}
}

// TestIdentifierIndex: the user index follows every way an entry leaves
// the cache (eviction, ForgetToken, ForgetUser, a refreshed lookup), under
// concurrent use (run with -race), and ForgetUser drops exactly the
// user's entries.
func TestIdentifierIndex(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	// Tokens "u<user>-<n>" belong to user "u<user>"; "bad-…" are unknown.
	auth := func(_ context.Context, tok string) (parley.Principal, error) {
		if strings.HasPrefix(tok, "bad-") {
			return parley.Principal{}, parley.ErrBadToken
		}
		u, _, _ := strings.Cut(tok, "-")
		return parley.Principal{User: u, Role: parley.RoleUser}, nil
	}
	id := middleware.NewIdentifier(auth, middleware.IdentifierOptions{
		MaxEntries: 64, TTL: 50 * time.Millisecond,
		Now: func() time.Time { return time.Unix(0, now.Load()) },
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 400 {
				u := fmt.Sprint("u", (g+i)%10)
				tok := fmt.Sprintf("%s-%d", u, i%13)
				switch i % 7 {
				case 5:
					id.ForgetUser(u)
				case 6:
					id.ForgetToken(tok)
				case 4:
					id.Identify(context.Background(), fmt.Sprint("bad-", g, "-", i))
					now.Add(int64(time.Millisecond)) // entries expire and are refreshed
				default:
					if p, code := id.Identify(context.Background(), tok); code != "" || p.User != u {
						t.Errorf("%s: %+v %q", tok, p, code)
					}
				}
			}
		})
	}
	wg.Wait()
	if !middleware.IndexConsistent(id) {
		t.Fatal("the user index does not match the cache")
	}

	// ForgetUser drops exactly that user's entries. A fresh cache: in the
	// full one above, adding these entries evicts others, theirs included.
	id = middleware.NewIdentifier(auth, middleware.IdentifierOptions{MaxEntries: 64, TTL: time.Hour})
	for u := range 3 {
		for n := range 5 {
			id.Identify(context.Background(), fmt.Sprintf("v%d-%d", u, n))
		}
	}
	before := id.Len()
	id.ForgetUser("v1")
	if got, want := id.Len(), before-5; got != want {
		t.Errorf("Len after ForgetUser(v1): %d, want %d", got, want)
	}
	if !middleware.IndexConsistent(id) {
		t.Error("the user index does not match the cache after ForgetUser")
	}
}

// BenchmarkForgetUser: forgetting one user's token in a full cache costs
// that user's entries, not the cache's 100,000.
func BenchmarkForgetUser(b *testing.B) {
	id := middleware.NewIdentifier(func(_ context.Context, tok string) (parley.Principal, error) {
		u, _, _ := strings.Cut(tok, "-")
		return parley.Principal{User: u}, nil
	}, middleware.IdentifierOptions{TTL: time.Hour})
	ctx := context.Background()
	for i := range 100_000 {
		id.Identify(ctx, fmt.Sprintf("u%d-%d", i, i))
	}
	for i := 0; b.Loop(); i++ {
		id.Identify(ctx, "target-1")
		id.ForgetUser("target")
	}
}

func TestIdentifierMalformedToken(t *testing.T) {
	ac := &authCounter{auth: func(context.Context, string) (parley.Principal, error) {
		return parley.Principal{User: "ana", Role: parley.RoleUser}, nil
	}}
	id := middleware.NewIdentifier(ac.Authenticate, middleware.IdentifierOptions{})
	for _, tok := range []string{"", string(make([]byte, 257)), fmt.Sprintf("%0300d", 7)} {
		if p, code := identify(t, id, tok); code != parley.CodeUnauthenticated || p != (parley.Principal{}) {
			t.Errorf("token of %d bytes: %+v, %q; want UNAUTHENTICATED", len(tok), p, code)
		}
	}
	if got := ac.calls(); got != 0 {
		t.Errorf("malformed tokens reached the store %d times", got)
	}
	if got := id.Len(); got != 0 {
		t.Errorf("malformed tokens were cached: Len %d", got)
	}
	// The longest well-formed token does reach it.
	if _, code := identify(t, id, fmt.Sprintf("%0256d", 7)); code != "" || ac.calls() != 1 {
		t.Errorf("256-byte token: code %q, %d store calls; want it looked up", code, ac.calls())
	}
}
