package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// step is one request at t0+at and the decision it must get.
type step struct {
	at    time.Duration
	limit int // 0: the case's limit
	want  Decision
}

func allowed(limit, remaining int, reset time.Duration) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: remaining, Reset: reset}
}

func denied(limit int, retry, reset time.Duration) Decision {
	return Decision{Limit: limit, RetryAfter: retry, Reset: reset}
}

func TestSlidingWindow(t *testing.T) {
	const ms = time.Millisecond
	cases := []struct {
		name   string
		limit  int
		window time.Duration
		steps  []step
	}{
		{name: "three_per_second", limit: 3, window: time.Second, steps: []step{
			{at: 0, want: allowed(3, 2, 1000*ms)},
			{at: 100 * ms, want: allowed(3, 1, 1000*ms)},
			{at: 200 * ms, want: allowed(3, 0, 1000*ms)},
			{at: 300 * ms, want: denied(3, 700*ms, 900*ms)},
			{at: 999 * ms, want: denied(3, 1*ms, 201*ms)},
			{at: 999*ms + 500*time.Microsecond, want: denied(3, 1*ms, 201*ms)}, // 0.5ms rounds up
			{at: 1000 * ms, want: allowed(3, 0, 1000*ms)},                      // the first leaves exactly at the window
			{at: 1050 * ms, want: denied(3, 50*ms, 950*ms)},
			{at: 1100 * ms, want: allowed(3, 0, 1000*ms)},
			{at: 3000 * ms, want: allowed(3, 2, 1000*ms)}, // all gone
		}},
		{name: "one_boundary", limit: 1, window: time.Second, steps: []step{
			{at: 0, want: allowed(1, 0, 1000*ms)},
			{at: 999*ms + 999*time.Microsecond, want: denied(1, 1*ms, 1*ms)},
			{at: 1000 * ms, want: allowed(1, 0, 1000*ms)},
		}},
		{name: "denied_not_counted", limit: 2, window: time.Second, steps: []step{
			{at: 0, want: allowed(2, 1, 1000*ms)},
			{at: 1 * ms, want: allowed(2, 0, 1000*ms)},
			{at: 500 * ms, want: denied(2, 500*ms, 501*ms)},
			{at: 600 * ms, want: denied(2, 400*ms, 401*ms)},
			{at: 1000 * ms, want: allowed(2, 0, 1000*ms)},
			{at: 1001 * ms, want: allowed(2, 0, 1000*ms)},
		}},
		{name: "limit_lowered", limit: 3, window: time.Second, steps: []step{
			{at: 0, want: allowed(3, 2, 1000*ms)},
			{at: 100 * ms, want: allowed(3, 1, 1000*ms)},
			{at: 200 * ms, want: allowed(3, 0, 1000*ms)},
			{at: 300 * ms, limit: 1, want: denied(1, 900*ms, 900*ms)}, // free when all three have left
			{at: 1200 * ms, limit: 1, want: allowed(1, 0, 1000*ms)},
		}},
		{name: "limit_raised", limit: 1, window: time.Second, steps: []step{
			{at: 0, want: allowed(1, 0, 1000*ms)},
			{at: 100 * ms, want: denied(1, 900*ms, 900*ms)},
			{at: 200 * ms, limit: 3, want: allowed(3, 1, 1000*ms)},
		}},
		{name: "clock_steps_back", limit: 2, window: time.Second, steps: []step{
			{at: 500 * ms, want: allowed(2, 1, 1000*ms)},
			{at: 0, want: allowed(2, 0, 1000*ms)}, // read as 500ms
			{at: 100 * ms, want: denied(2, 1000*ms, 1000*ms)},
			{at: 1500 * ms, want: allowed(2, 1, 1000*ms)},
		}},
		{name: "sub_millisecond_window", limit: 1, window: 10 * time.Microsecond, steps: []step{
			{at: 0, want: allowed(1, 0, 1*ms)},
			{at: 5 * time.Microsecond, want: denied(1, 1*ms, 1*ms)},
			{at: 10 * time.Microsecond, want: allowed(1, 0, 1*ms)},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewMemory(MemoryOptions{})
			for i, s := range c.steps {
				limit := c.limit
				if s.limit != 0 {
					limit = s.limit
				}
				got := m.allow("k", limit, c.window, t0.Add(s.at))
				if got != s.want {
					t.Errorf("step %d at +%v: got %+v, want %+v", i, s.at, got, s.want)
				}
			}
		})
	}
}

func TestOffTouchesNothing(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	for _, c := range []struct {
		limit  int
		window time.Duration
	}{{0, time.Second}, {-1, time.Second}, {5, 0}, {5, -time.Second}, {0, 0}} {
		for range 10 {
			if got, want := m.allow("k", c.limit, c.window, t0), (Decision{Allowed: true}); got != want {
				t.Fatalf("limit %d window %v: got %+v, want %+v", c.limit, c.window, got, want)
			}
		}
	}
	if got := m.keys.Load(); got != 0 {
		t.Errorf("keys held after off requests: got %d, want 0", got)
	}
}

func TestIdleKeysExpire(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	m.allow("a", 5, time.Second, t0)
	m.allow("b", 5, time.Second, t0.Add(500*time.Millisecond))
	m.allow("c", 5, time.Hour, t0)
	for _, s := range []struct {
		at   time.Duration
		want int64
	}{
		{999 * time.Millisecond, 3},
		{time.Second, 2}, // a's only request leaves exactly at the window
		{1500 * time.Millisecond, 1},
		{time.Hour, 0},
	} {
		m.sweep(t0.Add(s.at).UnixNano())
		if got := m.keys.Load(); got != s.want {
			t.Errorf("keys after a sweep at +%v: got %d, want %d", s.at, got, s.want)
		}
	}
}

// Keys that are never touched again go without anyone calling Len: the
// round-robin sweep visits every shard as other keys are used.
func TestAmortisedSweep(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	for i := range 500 {
		m.allow(fmt.Sprint("idle", i), 1, time.Second, t0)
	}
	later := t0.Add(2 * time.Second)
	for range sweepEvery * shardCount {
		m.allow("busy", 1, time.Second, later)
	}
	if got := m.keys.Load(); got != 1 {
		t.Errorf("keys held: got %d, want 1 (only busy)", got)
	}
}

// A full store frees expired keys first; when every key is live it evicts
// the least recently used one, and the new key is counted (never waved
// through uncounted).
func TestFullStoreEvictsLeastRecentlyUsed(t *testing.T) {
	m := NewMemory(MemoryOptions{MaxKeys: 4})
	for i := range 4 {
		m.allow(fmt.Sprint("k", i), 1, time.Second, t0.Add(time.Duration(i)*time.Millisecond))
	}
	half := t0.Add(500 * time.Millisecond)
	m.allow("k0", 1, time.Second, half) // denied, but k0 is now the most recently used

	// Full of live keys: "new" is counted, and k1 (used longest ago) goes.
	if got, want := m.allow("new", 1, time.Second, half), allowed(1, 0, time.Second); got != want {
		t.Fatalf("new key on a full store: got %+v, want %+v", got, want)
	}
	if got := m.allow("new", 1, time.Second, half); got.Allowed {
		t.Errorf("second request of the new key: got %+v, want denied (counted)", got)
	}
	for _, k := range []string{"k0", "k2", "k3"} {
		if _, held := m.shards[0].logs[k]; !held {
			t.Errorf("%s was evicted, want k1 (least recently used) only", k)
		}
	}
	if _, held := m.shards[0].logs["k1"]; held {
		t.Error("k1 is still held")
	}
	if got, want := m.Evictions(), int64(1); got != want {
		t.Errorf("evictions: got %d, want %d", got, want)
	}
	if got, want := m.keys.Load(), int64(4); got != want {
		t.Errorf("keys: got %d, want %d", got, want)
	}

	// Once keys expire, a full store sweeps them instead of evicting.
	later := t0.Add(1003 * time.Millisecond) // k0 (its denied request did not count), k2, k3 expired
	m.allow("fresh", 1, time.Second, later)
	if got, want := m.Evictions(), int64(1); got != want {
		t.Errorf("evictions after the sweep: got %d, want %d", got, want)
	}
	if got, want := m.keys.Load(), int64(2); got != want {
		t.Errorf("keys after the sweep: got %d, want %d (new, fresh)", got, want)
	}
}

// The use order stays consistent through sweeps and evictions.
func TestLRUOrder(t *testing.T) {
	m := NewMemory(MemoryOptions{MaxKeys: 3})
	sh := &m.shards[0]
	order := func() []string {
		var ks []string
		for l := sh.lru.next; l != &sh.lru; l = l.next {
			ks = append(ks, l.key)
		}
		return ks
	}
	m.allow("a", 9, time.Hour, t0)
	m.allow("b", 9, time.Second, t0)
	m.allow("c", 9, time.Hour, t0)
	m.allow("a", 9, time.Hour, t0)
	if got, want := fmt.Sprint(order()), "[b c a]"; got != want {
		t.Fatalf("order: got %s, want %s", got, want)
	}
	m.allow("d", 9, time.Hour, t0.Add(2*time.Second)) // b expired: swept, not evicted
	if got, want := fmt.Sprint(order()), "[c a d]"; got != want {
		t.Errorf("order after a sweep: got %s, want %s", got, want)
	}
	m.allow("e", 9, time.Hour, t0.Add(2*time.Second)) // c evicted
	if got, want := fmt.Sprint(order()), "[a d e]"; got != want {
		t.Errorf("order after an eviction: got %s, want %s", got, want)
	}
	if got, want := len(sh.logs), 3; got != want {
		t.Errorf("keys: got %d, want %d", got, want)
	}
}

// A key holds at most limit timestamps, and a small log for little traffic.
func TestLogBounded(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	log := func() *keyLog { return m.shards[shardIndex("k")].logs["k"] }

	m.allow("k", 1000, time.Hour, t0)
	if got := len(log().ts); got > 4 {
		t.Errorf("ring after one request with limit 1000: got %d slots, want <= 4", got)
	}
	for i := range 50 {
		m.allow("k", 10, time.Hour, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if got, want := len(log().ts), 10; got != want {
		t.Errorf("ring after 50 requests with limit 10: got %d slots, want %d", got, want)
	}
	m.allow("k", 2, time.Hour, t0.Add(time.Second))
	if got, want := len(log().ts), 2; got != want {
		t.Errorf("ring after the limit dropped to 2: got %d slots, want %d", got, want)
	}
	if got, want := log().n, 2; got != want {
		t.Errorf("timestamps after the limit dropped to 2: got %d, want %d", got, want)
	}
}
