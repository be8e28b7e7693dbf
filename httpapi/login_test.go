package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/sqlite"
)

// loginAs posts a login from the client address addr (the server trusts
// the loopback proxy, so X-Forwarded-For names the client), with device
// "d1" and install "i1" (the install s.user logged in with).
func (s *server) loginAs(login, password, addr string) reply {
	s.t.Helper()
	return s.loginWith(login, password, addr, "i1")
}

// loginWith is loginAs with the install id install, on the device
// "dev-"+install (another device per install: a login never replaces
// another test install).
func (s *server) loginWith(login, password, addr, install string) reply {
	s.t.Helper()
	device := "dev-" + install
	if install == "i1" {
		device = "d1"
	}
	return s.do("POST", "/api/login", "", map[string]string{
		"login": login, "password": password, "device_id": device, "install_id": install,
	}, "X-Forwarded-For", addr)
}

const trustLoopback = "trusted_proxies: [127.0.0.1, \"::1\"]\n"

// TestLoginBackoffPerAddress: failed logins slow down per (login name,
// client address; IPv6 by /64), before the password is hashed: after the
// free failures the next attempt from that address is 429 RATE_LIMITED with
// Retry-After, even with the right password, while the same name from
// another address is not delayed. An unknown name gets the same answers. A
// success afterwards resets the count. No rate limit is configured: this
// is built in.
func TestLoginBackoffPerAddress(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{
			config:       trustLoopback,
			loginBackoff: ratelimit.NewBackoff(ratelimit.BackoffOptions{Free: 2, Base: time.Minute, Max: time.Minute}),
		})
		s.user("ana", parley.RoleUser)

		for _, name := range []string{"ana", "zed"} { // zed does not exist
			t.Run(name, func(t *testing.T) {
				for _, addr := range []string{"198.51.100.1", "2001:db8:1::1"} {
					s.loginWith(name, "wrong-password", addr, "x1").want(401, parley.CodeUnauthenticated)
					s.loginWith(name, "wrong-password", addr, "x1").want(401, parley.CodeUnauthenticated)
				}
				// The same address, and the same IPv6 /64, wait.
				for _, addr := range []string{"198.51.100.1", "2001:db8:1::1", "2001:db8:1::ffff"} {
					r := s.loginWith(name, "password-"+name, addr, "x1").want(429, parley.CodeRateLimited)
					if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 55 || ra > 60 {
						t.Errorf("from %s: Retry-After %q, want about 60", addr, r.header.Get("Retry-After"))
					}
				}
			})
		}
		// Another address, another /64: not delayed.
		s.loginWith("ana", "password-ana", "203.0.113.9", "ok-a").want(200)
		s.loginWith("ana", "password-ana", "2001:db8:2::1", "ok-b").want(200)

		// A success resets the pair's count: two free failures again.
		const home = "192.0.2.50"
		s.loginWith("ana", "wrong-password", home, "x2").want(401, parley.CodeUnauthenticated)
		s.loginWith("ana", "password-ana", home, "x2").want(200)
		s.loginWith("ana", "wrong-password", home, "x3").want(401, parley.CodeUnauthenticated)
		s.loginWith("ana", "wrong-password", home, "x3").want(401, parley.CodeUnauthenticated)
		s.loginWith("ana", "wrong-password", home, "x3").want(429, parley.CodeRateLimited)
		// Case and spaces do not make another name.
		s.loginWith(" ANA ", "password-ana", home, "x3").want(429, parley.CodeRateLimited)
		if got := metricValue(t, s, `parley_login_refused_total{reason="backoff_address"}`); got < 8 {
			t.Errorf("backoff_address refusals %v, want at least 8", got)
		}
	})
}

// TestLoginLockoutProbe: an attacker hammering cy's account from one
// address never locks cy out: cy logs in from another address, and from
// the attacker's own address (a shared NAT) with an install id cy's
// device already has. A guess carrying cy's install id counts on that
// install's own pair.
func TestLoginLockoutProbe(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{config: trustLoopback})
		if _, err := s.store.CreateUser(context.Background(), parley.NewUser{ID: "cy", Password: "password-cy"}); err != nil {
			t.Fatal(err)
		}
		s.loginWith("cy", "password-cy", "192.0.2.7", "cy-phone").want(200)

		const attacker = "198.51.100.66"
		refused := 0
		for i := range 20 {
			r := s.loginWith("cy", fmt.Sprintf("guess-%d", i), attacker, fmt.Sprintf("bot-%d", i))
			switch r.status {
			case 401:
			case 429:
				refused++
			default:
				t.Fatalf("guess %d: %s", i, r)
			}
		}
		if refused == 0 {
			t.Fatal("the attacker's guesses were never delayed")
		}
		s.loginWith("cy", "password-cy", attacker, "bot-99").want(429, parley.CodeRateLimited)

		s.loginWith("cy", "password-cy", "203.0.113.20", "cy-laptop").want(200) // another address
		s.loginWith("cy", "password-cy", attacker, "cy-phone").want(200)        // a known install
		if got := metricValue(t, s, `parley_login_refused_total{reason="backoff_install"}`); got != 0 {
			t.Errorf("backoff_install refusals %v, want 0", got)
		}
	})
}

// TestLoginHashGateSaturated: with every password-hash slot taken, a login
// and a user creation with a password wait at most HashWait and then get
// 503 UNAVAILABLE with Retry-After, which counts as no failure; once a
// slot is free they succeed.
func TestLoginHashGateSaturated(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		gate := httpapi.NewPasswordGate(1)
		s := start(t, open(t, parley.Options{}), serverOptions{
			config: trustLoopback, hashes: gate, hashWait: 50 * time.Millisecond,
			loginBackoff: ratelimit.NewBackoff(ratelimit.BackoffOptions{Free: 2}),
		})
		root := s.user("root", parley.RoleAdmin)

		release, err := gate.Acquire(context.Background(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // more than the free failures: a 503 is not one
			r := s.loginAs("root", "wrong-password", "198.51.100.1").want(503, parley.CodeUnavailable)
			if r.header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		}
		r := s.do("POST", "/api/admin/users", root, map[string]string{"id": "dee", "password": "password-dee"}).want(503, parley.CodeUnavailable)
		if r.header.Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
		// A bot (no password) needs no hash.
		s.do("POST", "/api/admin/users", root, map[string]string{"id": "bot"}).want(201)
		release()

		s.loginAs("root", "wrong-password", "198.51.100.1").want(401, parley.CodeUnauthenticated)
		s.loginAs("root", "password-root", "198.51.100.1").want(200)
		s.do("POST", "/api/admin/users", root, map[string]string{"id": "dee", "password": "password-dee"}).want(201)
		if got := gate.InUse(); got != 0 {
			t.Errorf("slots in use after the requests: %d", got)
		}
	})
}

// TestShortPasswordRefused: an account cannot be given a password under 8
// characters through the operations API: 400 INVALID_ARGUMENT, and no
// account is created. Eight characters are enough.
func TestShortPasswordRefused(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		root := s.user("root", parley.RoleAdmin)
		for _, pw := range []string{"x", "1234567", "ééééééé"} {
			s.do("POST", "/api/admin/users", root, map[string]string{"id": "dee", "password": pw}).want(400, parley.CodeInvalidArgument)
		}
		if _, err := s.store.User(context.Background(), "dee"); parley.ErrorCode(err) != parley.CodeNotFound {
			t.Fatalf("dee after refused creations: %v, want NOT_FOUND", err)
		}
		s.do("POST", "/api/admin/users", root, map[string]string{"id": "dee", "password": "12345678"}).want(201)
		s.loginAs("dee", "12345678", "198.51.100.1").want(200)
	})
}

// TestLoginPublishesOnlyOnReplace: a login that replaces no install (a new
// device, the device's current install) publishes no account notice, so it
// costs the gateways nothing; one that replaces an install does, and the
// old install's sockets end (TestNewInstallEndsOldSockets).
func TestLoginPublishesOnlyOnReplace(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		var mu sync.Mutex
		notices := map[string]int{}
		s := start(t, open(t, parley.Options{}), serverOptions{onAccount: func(u string) {
			mu.Lock()
			notices[u]++
			mu.Unlock()
		}})
		count := func(u string) int {
			mu.Lock()
			defer mu.Unlock()
			return notices[u]
		}
		s.user("cy", parley.RoleUser) // d1/i1: a new device
		s.login("cy", "d1", "i1")     // the current install
		s.login("cy", "d2", "i1")     // another new device
		s.user("dan", parley.RoleUser)
		// A replacing login of another user: the bus delivers in order, so
		// once its notice came back, any earlier one has too.
		s.login("dan", "d1", "i2")
		eventually(t, "dan's notice, published and heard back from the bus", func() bool { return count("dan") >= 2 })
		if got := count("cy"); got != 0 {
			t.Errorf("logins that replaced nothing: %d account notices for cy, want 0", got)
		}
		s.login("cy", "d2", "i2") // replaces d2's install
		eventually(t, "cy's notice", func() bool { return count("cy") >= 1 })
	})
}

// TestLoginStorm: many concurrent logins with bad passwords, for one
// account and for many names, against a real server with the built-in
// protections only. The server keeps answering other requests, every
// storm answer is 401, 429 or 503 (never a hang or a 5xx of another
// kind), the heap stays near what the hash slots allow, the backoff
// table stays within its bound, and afterwards the real user logs in once
// the backoff has run out. Backends run one after the other, so the heap
// measured is one server's.
func TestLoginStorm(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		loginStorm(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		s, err := postgres.Open(context.Background(), pgtest.DSN(t), parley.Options{}) // skips without PARLEY_TEST_POSTGRES
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		loginStorm(t, s)
	})
}

func loginStorm(t *testing.T, store parley.Store) {
	backoff := ratelimit.NewBackoff(ratelimit.BackoffOptions{Free: 2, Base: 100 * time.Millisecond, Max: time.Second, MaxKeys: 16})
	gate := httpapi.NewPasswordGate(0)
	s := start(t, store, serverOptions{config: trustLoopback, hashes: gate, loginBackoff: backoff})
	ana := s.user("ana", parley.RoleUser)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // heap sampler
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	})
	client := &http.Client{Timeout: time.Minute}
	var served atomic.Int64
	wg.Go(func() { // the rest of the server keeps answering
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, path := range []string{"/healthz", "/api/convs"} {
				req, _ := http.NewRequest("GET", s.URL+path, nil)
				req.Header.Set("Authorization", "Bearer "+ana)
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("GET %s during the storm: %v", path, err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("GET %s during the storm: %d", path, resp.StatusCode)
				}
				served.Add(1)
			}
		}
	})

	const workers, perWorker = 24, 2
	var statuses sync.Map // status → *atomic.Int64
	var storm sync.WaitGroup
	for w := range workers {
		storm.Go(func() {
			for i := range perWorker {
				login := "ana"
				if (w+i)%2 == 1 {
					login = fmt.Sprintf("ghost-%d", w*perWorker+i) // a fresh name each time
				}
				// Six workers share each /64: the backoff is per address.
				r := s.loginAs(login, "wrong-password", fmt.Sprintf("2001:db8:%x::1", w%4))
				n, _ := statuses.LoadOrStore(r.status, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		})
	}
	storm.Wait()
	close(stop)
	wg.Wait()

	statuses.Range(func(k, v any) bool {
		t.Logf("storm logins answered %d: %d", k, v.(*atomic.Int64).Load())
		switch k.(int) {
		case 401, 429, 503:
		default:
			t.Errorf("%d storm logins answered %d", v.(*atomic.Int64).Load(), k)
		}
		return true
	})
	if n, ok := statuses.Load(429); !ok || n.(*atomic.Int64).Load() == 0 {
		t.Error("no storm login was refused by the backoff")
	}
	if served.Load() == 0 {
		t.Error("no other request was served during the storm")
	}
	// Hash memory is what the slots allow (argon2id: 19 MiB each), with
	// room for the collector's pace; unbounded, 24 parallel hashes would
	// hold 456 MiB.
	slack := uint64(httpapi.DefaultPasswordHashes())*19<<20*3 + 64<<20
	t.Logf("heap in use: %d MiB before, peak %d MiB during the storm", base>>20, peak.Load()>>20)
	if p := peak.Load(); p > base && p-base > slack {
		t.Errorf("heap grew by %d MiB during the storm, want at most %d MiB", (p-base)>>20, slack>>20)
	}
	if got := backoff.Len(); got > 16 {
		t.Errorf("backoff table holds %d keys, bound 16", got)
	}
	if got := gate.InUse(); got != 0 {
		t.Errorf("%d hash slots still taken", got)
	}

	// The real user gets in once the backoff has run out.
	for try := 0; ; try++ {
		r := s.loginAs("ana", "password-ana", "192.0.2.1")
		if r.status == 200 {
			break
		}
		r.want(429, parley.CodeRateLimited)
		if try == 5 {
			t.Fatal("ana still refused after 5 waits")
		}
		ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
		time.Sleep(time.Duration(ra) * time.Second)
	}
}

// TestLoginSprayLimited: with no rate_limits in the configuration, the
// built-in login limit applies per client address: a password spray over
// many names from one address is refused once it is spent, while another
// address still logs in.
func TestLoginSprayLimited(t *testing.T) {
	s := start(t, openSQLite(t), serverOptions{config: trustLoopback, builtinLimits: true})
	s.user("ana", parley.RoleUser)
	limit := config.DefaultRateLimits()[ratelimit.BucketLogin].Limit
	if limit <= 0 {
		t.Fatal("no built-in login limit")
	}
	const sprayer = "198.51.100.77"
	for i := range limit {
		// A fresh name each time: the backoff, per name, never applies.
		s.loginWith(fmt.Sprintf("victim-%d", i), "Winter2026!", sprayer, "spray").want(401, parley.CodeUnauthenticated)
	}
	r := s.loginWith("ana", "password-ana", sprayer, "spray").want(429, parley.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	s.loginWith("ana", "password-ana", "203.0.113.5", "i2").want(200)
}
