package ratelimit_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleychat/parley/ratelimit"
)

// clock is a fake time source for Memory.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// backend is one Store under test and how to let time pass for it.
type backend struct {
	store   ratelimit.Store
	advance func(time.Duration)
}

// testStore runs the behaviours every Store shares. Times are real for
// Redis, so its decisions are checked by bounds where Memory's are exact
// (see TestSlidingWindow for those).
func testStore(t *testing.T, newBackend func(t *testing.T) backend) {
	ctx := context.Background()
	allow := func(t *testing.T, s ratelimit.Store, key string, limit int, window time.Duration) ratelimit.Decision {
		t.Helper()
		d, err := s.Allow(ctx, key, limit, window)
		if err != nil {
			t.Fatalf("Allow(%q, %d, %v): %v", key, limit, window, err)
		}
		return d
	}

	t.Run("sliding_window", func(t *testing.T) {
		b := newBackend(t)
		const window = 300 * time.Millisecond
		for i := range 3 {
			d := allow(t, b.store, "w", 3, window)
			if !d.Allowed || d.Limit != 3 || d.Remaining != 2-i || d.RetryAfter != 0 || d.Reset <= 0 || d.Reset > window {
				t.Fatalf("request %d: got %+v, want allowed with limit 3, remaining %d, reset in (0, %v]", i+1, d, 2-i, window)
			}
		}
		d := allow(t, b.store, "w", 3, window)
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > window || d.RetryAfter%time.Millisecond != 0 {
			t.Fatalf("request 4: got %+v, want denied, remaining 0, retry after in (0, %v] in whole ms", d, window)
		}
		b.advance(d.RetryAfter)
		if d := allow(t, b.store, "w", 3, window); !d.Allowed {
			t.Errorf("after waiting RetryAfter: got %+v, want allowed", d)
		}
	})

	t.Run("off", func(t *testing.T) {
		b := newBackend(t)
		for _, c := range []struct {
			limit  int
			window time.Duration
		}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -time.Second}} {
			for range 5 {
				if got, want := allow(t, b.store, "off", c.limit, c.window), (ratelimit.Decision{Allowed: true}); got != want {
					t.Fatalf("limit %d window %v: got %+v, want %+v", c.limit, c.window, got, want)
				}
			}
		}
		// Nothing was counted: the key still has its whole limit.
		if d := allow(t, b.store, "off", 1, time.Minute); !d.Allowed {
			t.Errorf("first counted request after off ones: got %+v, want allowed", d)
		}
	})

	t.Run("keys_independent", func(t *testing.T) {
		b := newBackend(t)
		allow(t, b.store, "send:u1", 1, time.Minute)
		if d := allow(t, b.store, "send:u1", 1, time.Minute); d.Allowed {
			t.Fatalf("second request of send:u1: got %+v, want denied", d)
		}
		for _, key := range []string{"send:u2", "login:u1", "send:ip:u1"} {
			if d := allow(t, b.store, key, 1, time.Minute); !d.Allowed {
				t.Errorf("%s after send:u1 was used up: got %+v, want allowed", key, d)
			}
		}
	})

	for _, limit := range []int{1000, 700} {
		t.Run(fmt.Sprint("one_key_concurrent_", limit), func(t *testing.T) {
			b := newBackend(t)
			got := hammer(t, []ratelimit.Store{b.store}, 50, 100, func(int) string { return "hot" }, limit)
			if got != int64(limit) {
				t.Errorf("allowed out of 5000 with limit %d: got %d, want %d", limit, got, limit)
			}
		})
	}

	t.Run("many_keys_concurrent", func(t *testing.T) {
		b := newBackend(t)
		const goroutines, keys, tries, limit = 20, 10, 8, 5
		var wg sync.WaitGroup
		counts := make([][keys]int, goroutines)
		for g := range goroutines {
			wg.Go(func() {
				for i := range keys * tries {
					k := i % keys
					d, err := b.store.Allow(ctx, fmt.Sprintf("g%d:k%d", g, k), limit, time.Hour)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						counts[g][k]++
					}
				}
			})
		}
		wg.Wait()
		for g := range counts {
			for k, got := range counts[g] {
				if got != limit {
					t.Errorf("g%d:k%d allowed: got %d, want %d", g, k, got, limit)
				}
			}
		}
	})
}

// hammer runs goroutines × calls Allow over stores (round robin per
// goroutine) with a long window and returns how many were allowed.
func hammer(t *testing.T, stores []ratelimit.Store, goroutines, calls int, key func(g int) string, limit int) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		s := stores[g%len(stores)]
		wg.Go(func() {
			for range calls {
				d, err := s.Allow(context.Background(), key(g), limit, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return allowed.Load()
}

func TestMemory(t *testing.T) {
	testStore(t, func(t *testing.T) backend {
		c := newClock()
		return backend{store: ratelimit.NewMemory(ratelimit.MemoryOptions{Now: c.Now}), advance: c.Advance}
	})
}

func TestMemoryIdleKeysExpire(t *testing.T) {
	c := newClock()
	m := ratelimit.NewMemory(ratelimit.MemoryOptions{Now: c.Now})
	for i := range 10 {
		m.Allow(context.Background(), fmt.Sprint("k", i), 1, time.Duration(i+1)*time.Second)
	}
	for _, s := range []struct {
		advance time.Duration
		want    int
	}{{0, 10}, {time.Second, 9}, {4 * time.Second, 5}, {5 * time.Second, 0}} {
		c.Advance(s.advance)
		if got := m.Len(); got != s.want {
			t.Errorf("Len after +%v: got %d, want %d", s.advance, got, s.want)
		}
	}
}

// A full store counts a new key and evicts the least recently used one:
// a flood of new subjects never passes uncounted, and a subject that keeps
// asking stays limited.
func TestMemoryMaxKeys(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	m := ratelimit.NewMemory(ratelimit.MemoryOptions{MaxKeys: 100, Now: c.Now})
	for i := range 100 {
		m.Allow(ctx, fmt.Sprint("k", i), 1, time.Minute)
	}
	if d, _ := m.Allow(ctx, "k7", 1, time.Minute); d.Allowed {
		t.Errorf("held key on a full store: got %+v, want denied", d)
	}
	if d, _ := m.Allow(ctx, "late", 1, time.Minute); !d.Allowed {
		t.Fatalf("new key on a full store: got %+v, want allowed", d)
	}
	for range 5 {
		if d, _ := m.Allow(ctx, "late", 1, time.Minute); d.Allowed {
			t.Fatalf("new key on a full store again: got %+v, want denied (counted)", d)
		}
	}
	// A flood of new keys evicts the idle ones, not k7, which keeps asking.
	for i := range 500 {
		m.Allow(ctx, fmt.Sprint("flood", i), 1, time.Minute)
		if d, _ := m.Allow(ctx, "k7", 1, time.Minute); d.Allowed {
			t.Fatalf("k7 after %d flood keys: got %+v, want denied", i+1, d)
		}
	}
	if got, want := m.Len(), 100; got != want {
		t.Errorf("Len: got %d, want %d", got, want)
	}
	if got, want := m.Evictions(), int64(501); got != want {
		t.Errorf("Evictions: got %d, want %d", got, want)
	}
}

// Distinct keys from many goroutines never take the store past MaxKeys,
// and each one is counted.
func TestMemoryMaxKeysConcurrent(t *testing.T) {
	for _, maxKeys := range []int{64, 10_000} { // one shard; 32 shards
		m := ratelimit.NewMemory(ratelimit.MemoryOptions{MaxKeys: maxKeys})
		var n atomic.Int64
		allowed := hammer(t, []ratelimit.Store{m}, 32, 500, func(int) string { return fmt.Sprint(n.Add(1)) }, 1)
		if got, want := allowed, int64(32*500); got != want {
			t.Errorf("MaxKeys %d: allowed %d, want %d (every key new)", maxKeys, got, want)
		}
		if got := m.Len(); got > maxKeys {
			t.Errorf("MaxKeys %d: Len %d", maxKeys, got)
		}
		if got, want := int64(m.Len())+m.Evictions(), int64(32*500); got != want {
			t.Errorf("MaxKeys %d: Len + Evictions = %d, want %d", maxKeys, got, want)
		}
	}
}

// redisClient connects to PARLEY_TEST_REDIS or skips the test.
func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	url := os.Getenv("PARLEY_TEST_REDIS")
	if url == "" {
		t.Skip("Redis tests skipped: set PARLEY_TEST_REDIS=redis://127.0.0.1:6379/0 to run them")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("PARLEY_TEST_REDIS: %v", err)
	}
	opts.ContextTimeoutEnabled = true
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// redisPrefix returns a prefix of t's own and deletes its keys when t ends.
func redisPrefix(t testing.TB, c *redis.Client) string {
	t.Helper()
	prefix := "parley:rltest:" + rand.Text()[:12] + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("clean %s*: %v", prefix, err)
		}
	})
	return prefix
}

// Long enough for 50 goroutines on one key under -race.
const testTimeout = 2 * time.Second

func TestRedis(t *testing.T) {
	redisClient(t)
	testStore(t, func(t *testing.T) backend {
		c := redisClient(t)
		s := ratelimit.NewRedis(c, ratelimit.RedisOptions{Prefix: redisPrefix(t, c), Timeout: testTimeout})
		return backend{store: s, advance: time.Sleep}
	})
}

// Two instances (two clients) share one limit exactly.
func TestRedisSharedAcrossInstances(t *testing.T) {
	c1, c2 := redisClient(t), redisClient(t)
	prefix := redisPrefix(t, c1)
	stores := []ratelimit.Store{
		ratelimit.NewRedis(c1, ratelimit.RedisOptions{Prefix: prefix, Timeout: testTimeout}),
		ratelimit.NewRedis(c2, ratelimit.RedisOptions{Prefix: prefix, Timeout: testTimeout}),
	}
	if got := hammer(t, stores, 40, 50, func(int) string { return "shared" }, 700); got != 700 {
		t.Errorf("allowed out of 2000 through two instances with limit 700: got %d, want 700", got)
	}
}

// The key lives no longer than its window and sits under the prefix.
func TestRedisKeyExpires(t *testing.T) {
	c := redisClient(t)
	prefix := redisPrefix(t, c)
	s := ratelimit.NewRedis(c, ratelimit.RedisOptions{Prefix: prefix})
	if _, err := s.Allow(context.Background(), "send:u1", 2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ttl, err := c.PTTL(context.Background(), prefix+"send:u1").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > 5*time.Second {
		t.Errorf("PTTL of %ssend:u1: got %v, want in (0, 5s]", prefix, ttl)
	}
}

// An unreachable Redis is an error with an allowing Decision, not a hang.
func TestRedisDownFailsOpen(t *testing.T) {
	// A listener that accepts and never answers: every call must time out.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	conns.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer conn.Close()
				var buf [512]byte
				for {
					if _, err := conn.Read(buf[:]); err != nil {
						return
					}
				}
			})
		}
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	s := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: 50 * time.Millisecond})

	start := time.Now()
	d, err := s.Allow(context.Background(), "send:u1", 3, time.Second)
	if err == nil {
		t.Fatal("Allow on a silent server: got no error")
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Allow on a silent server took %v, want about the 50ms timeout", elapsed)
	}
	if want := (ratelimit.Decision{Allowed: true, Limit: 3, Remaining: 2}); d != want {
		t.Errorf("Decision with the error: got %+v, want %+v", d, want)
	}

	// A caller's deadline wins over the store's own (a reloaded
	// timeouts.redis applies at once).
	slow := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := slow.Allow(ctx, "send:u1", 3, time.Second); err == nil {
		t.Fatal("Allow past the caller's deadline: got no error")
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Allow with a 50ms caller deadline took %v", elapsed)
	}
}

func ExampleMemory() {
	limiter := ratelimit.NewMemory(ratelimit.MemoryOptions{})
	for range 3 {
		// The caller builds the key: bucket, then subject.
		d, err := limiter.Allow(context.Background(), "send:u_42", 2, time.Minute)
		if err != nil {
			// Only Redis fails; log it and let the request pass.
			continue
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter > 0)
	}
	// Output:
	// true 1 false
	// true 0 false
	// false 0 true
}

func BenchmarkMemoryAllow(b *testing.B) {
	ctx := context.Background()
	b.Run("one_key", func(b *testing.B) {
		m := ratelimit.NewMemory(ratelimit.MemoryOptions{})
		for b.Loop() {
			m.Allow(ctx, "send:u_42", 100, time.Second)
		}
	})
	b.Run("parallel_many_keys", func(b *testing.B) {
		m := ratelimit.NewMemory(ratelimit.MemoryOptions{})
		keys := make([]string, 10_000)
		for i := range keys {
			keys[i] = fmt.Sprint("send:u_", i)
		}
		var seed atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919))
			for pb.Next() {
				m.Allow(ctx, keys[i%len(keys)], 100, time.Second)
				i++
			}
		})
	})
}

func BenchmarkRedisAllow(b *testing.B) {
	c := redisClient(b)
	s := ratelimit.NewRedis(c, ratelimit.RedisOptions{Prefix: redisPrefix(b, c)})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Allow(context.Background(), "send:u_42", 100, time.Second); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
