package ratelimit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultMaxKeys is the MaxKeys of a zero MemoryOptions.
	DefaultMaxKeys = 100_000

	shardCount = 32
	// sweepEvery is how many Allow calls pass between two sweeps of one
	// shard (round robin), so keys never touched again still go.
	sweepEvery = 1024
)

// MemoryOptions configures NewMemory.
type MemoryOptions struct {
	// MaxKeys bounds how many keys the store holds; <= 0 means
	// DefaultMaxKeys. Memory is about MaxKeys × (limit × 8 bytes + key).
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Memory is a Store in this process's memory. Its limits are per instance:
// behind a load balancer with n instances a client may get up to n × limit
// (use Redis for a cluster-wide limit). Allow never returns an error.
//
// Memory is bounded: a key holds at most limit timestamps, a key whose
// requests have all left the window is dropped, and at most MaxKeys keys
// are held. When it is full of keys that are still live, a request for a
// new key is allowed without being counted (failing open, the safe side:
// a flood of distinct subjects must not lock out everyone else, nor grow
// memory without bound) and Overflows goes up; keys already held are still
// limited.
type Memory struct {
	now     func() time.Time
	maxKeys int64

	keys      atomic.Int64  // keys held, over all shards
	calls     atomic.Uint64 // drives the round-robin sweep
	overflows atomic.Int64

	shards [shardCount]shard
}

var _ Store = (*Memory)(nil)

type shard struct {
	mu   sync.Mutex
	logs map[string]*keyLog
	// expiry (unix ns) is a lower bound of when the first key of the
	// shard expires: a sweep before it cannot free anything, which keeps a
	// full store from rescanning live keys on every new one.
	expiry int64
}

// NewMemory returns an empty in-process store.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{now: opts.Now, maxKeys: int64(opts.MaxKeys)}
	if m.now == nil {
		m.now = time.Now
	}
	if m.maxKeys <= 0 {
		m.maxKeys = DefaultMaxKeys
	}
	for i := range m.shards {
		m.shards[i].logs = make(map[string]*keyLog)
		m.shards[i].expiry = math.MaxInt64
	}
	return m
}

// Allow implements Store. It never fails; ctx is not used.
func (m *Memory) Allow(_ context.Context, key string, limit int, window time.Duration) (Decision, error) {
	return m.allow(key, limit, window, m.now()), nil
}

// Len returns how many keys are held, after dropping those whose requests
// have all left their window.
func (m *Memory) Len() int {
	m.sweep(m.now().UnixNano())
	return int(m.keys.Load())
}

// Overflows returns how many requests were allowed uncounted because the
// store was full (see Memory). A rising count means MaxKeys is too small
// for the traffic, or someone is cycling subjects to evade the limit.
func (m *Memory) Overflows() int64 { return m.overflows.Load() }

func (m *Memory) allow(key string, limit int, window time.Duration, now time.Time) Decision {
	if off(limit, window) {
		return Decision{Allowed: true}
	}
	t := now.UnixNano()
	if c := m.calls.Add(1); c%sweepEvery == 0 {
		m.sweepShard(&m.shards[c/sweepEvery%shardCount], t)
	}

	sh := &m.shards[shardIndex(key)]
	sh.mu.Lock()
	l := sh.logs[key]
	if l == nil && !m.reserve() {
		// Full: free expired keys (without holding our shard, as the sweep
		// takes every shard lock in turn), then look again.
		sh.mu.Unlock()
		m.sweep(t)
		sh.mu.Lock()
		if l = sh.logs[key]; l == nil && !m.reserve() {
			sh.mu.Unlock()
			m.overflows.Add(1)
			return allowOpen(limit)
		}
	}
	if l == nil {
		l = &keyLog{}
		sh.logs[key] = l
	}
	d := l.allow(t, limit, int64(window))
	sh.expiry = min(sh.expiry, l.expiry())
	sh.mu.Unlock()
	return d
}

// reserve takes a slot for a new key, or reports that the store is full.
func (m *Memory) reserve() bool {
	for {
		n := m.keys.Load()
		if n >= m.maxKeys {
			return false
		}
		if m.keys.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// sweep drops the expired keys of every shard that may have some.
func (m *Memory) sweep(t int64) {
	for i := range m.shards {
		m.sweepShard(&m.shards[i], t)
	}
}

func (m *Memory) sweepShard(sh *shard, t int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t < sh.expiry {
		return
	}
	next := int64(math.MaxInt64)
	for k, l := range sh.logs {
		if l.expired(t) {
			delete(sh.logs, k)
			m.keys.Add(-1)
			continue
		}
		next = min(next, l.expiry())
	}
	sh.expiry = next
}

// shardIndex is FNV-1a, inline so that hashing a key does not allocate.
func shardIndex(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h % shardCount
}

// keyLog is the sliding window log of one key: a ring of unix-ns
// timestamps, oldest first, never more than the limit. It grows on demand,
// so a key with a large limit and little traffic stays small.
type keyLog struct {
	ts     []int64
	head   int
	n      int
	window int64 // of the latest request, for sweeping
}

func (l *keyLog) allow(t int64, limit int, window int64) Decision {
	if l.n > 0 && t < l.newest() {
		// The wall clock stepped back: keep the log in order, as if no
		// time had passed.
		t = l.newest()
	}
	l.window = window
	for l.n > 0 && t-l.ts[l.head] >= window {
		l.head = (l.head + 1) % len(l.ts)
		l.n--
	}
	l.trim(limit)

	d := Decision{Limit: limit}
	if l.n < limit {
		l.push(t, limit)
		d.Allowed = true
	} else {
		d.RetryAfter = ceilMs(time.Duration(window - (t - l.ts[l.head])))
	}
	d.Remaining = limit - l.n
	d.Reset = ceilMs(time.Duration(window - (t - l.newest())))
	return d
}

func (l *keyLog) newest() int64 { return l.ts[(l.head+l.n-1)%len(l.ts)] }

func (l *keyLog) expired(t int64) bool { return l.n == 0 || t-l.newest() >= l.window }

// expiry is when the newest request leaves the window (saturating, for a
// window of centuries).
func (l *keyLog) expiry() int64 {
	if l.n == 0 {
		return math.MinInt64
	}
	t := l.newest()
	if t > math.MaxInt64-l.window {
		return math.MaxInt64
	}
	return t + l.window
}

func (l *keyLog) push(t int64, limit int) {
	if l.n == len(l.ts) {
		l.resize(min(max(2*len(l.ts), 4), limit))
	}
	l.ts[(l.head+l.n)%len(l.ts)] = t
	l.n++
}

// trim keeps the newest limit timestamps, for a limit lowered by a
// configuration reload. The decision is the same: with limit kept, the
// oldest of them leaving is what admits the next request.
func (l *keyLog) trim(limit int) {
	if l.n > limit {
		l.head = (l.head + l.n - limit) % len(l.ts)
		l.n = limit
	}
	if len(l.ts) > limit {
		l.resize(limit)
	}
}

// resize moves the log into a new ring of size >= l.n, oldest at 0.
func (l *keyLog) resize(size int) {
	ts := make([]int64, size)
	for i := range l.n {
		ts[i] = l.ts[(l.head+i)%len(l.ts)]
	}
	l.ts, l.head = ts, 0
}
