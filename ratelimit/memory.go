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

	// shardCount is how many shards a large store has; one of fewer than
	// shardCount*minShardKeys keys has a single shard, so that its bound
	// is exact and its eviction truly least recently used.
	shardCount   = 32
	minShardKeys = 256
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
// are held. When a new key finds the store full of keys that are still
// live, the least recently used key (of its shard: the store is split in
// 32 shards of MaxKeys/32 keys each, one shard when MaxKeys is below 8192)
// is evicted to make room, and Evictions goes up. Every request is
// counted: a flood of distinct subjects cannot pass uncounted, and what it
// costs the others is that keys idle the longest forget their count — a
// subject that keeps asking stays the most recently used and stays limited.
type Memory struct {
	now      func() time.Time
	perShard int // keys one shard may hold

	keys      atomic.Int64  // keys held, over all shards
	calls     atomic.Uint64 // drives the round-robin sweep
	evictions atomic.Int64

	shards []shard
}

var _ Store = (*Memory)(nil)

type shard struct {
	mu   sync.Mutex
	logs map[string]*keyLog
	// lru is the sentinel of the shard's keys in order of use: lru.next
	// is the least recently used, lru.prev the most recent.
	lru keyLog
	// expiry (unix ns) is a lower bound of when the first key of the
	// shard expires: a sweep before it cannot free anything, which keeps a
	// full store from rescanning live keys on every new one.
	expiry int64
}

// NewMemory returns an empty in-process store.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{now: opts.Now}
	if m.now == nil {
		m.now = time.Now
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := shardCount
	if maxKeys < shardCount*minShardKeys {
		n = 1
	}
	m.perShard = maxKeys / n
	m.shards = make([]shard, n)
	for i := range m.shards {
		sh := &m.shards[i]
		sh.logs = make(map[string]*keyLog)
		sh.lru.next, sh.lru.prev = &sh.lru, &sh.lru
		sh.expiry = math.MaxInt64
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

// Evictions returns how many live keys were dropped to make room for new
// ones (see Memory). A rising count means MaxKeys is too small for the
// traffic, or someone is cycling subjects.
func (m *Memory) Evictions() int64 { return m.evictions.Load() }

func (m *Memory) allow(key string, limit int, window time.Duration, now time.Time) Decision {
	if off(limit, window) {
		return Decision{Allowed: true}
	}
	t := now.UnixNano()
	if c := m.calls.Add(1); c%sweepEvery == 0 {
		m.sweepShard(&m.shards[c/sweepEvery%uint64(len(m.shards))], t)
	}

	sh := &m.shards[shardIndex(key)%uint32(len(m.shards))]
	sh.mu.Lock()
	l := sh.logs[key]
	if l == nil {
		if len(sh.logs) >= m.perShard {
			m.sweepLocked(sh, t)
		}
		if len(sh.logs) >= m.perShard {
			m.evictLocked(sh)
		}
		l = &keyLog{key: key}
		sh.logs[key] = l
		m.keys.Add(1)
	} else {
		l.unlink()
	}
	sh.pushBack(l)
	d := l.allow(t, limit, int64(window))
	sh.expiry = min(sh.expiry, l.expiry())
	sh.mu.Unlock()
	return d
}

// evictLocked drops the shard's least recently used key.
func (m *Memory) evictLocked(sh *shard) {
	victim := sh.lru.next
	if victim == &sh.lru {
		return
	}
	victim.unlink()
	delete(sh.logs, victim.key)
	m.keys.Add(-1)
	m.evictions.Add(1)
}

func (sh *shard) pushBack(l *keyLog) {
	l.prev, l.next = sh.lru.prev, &sh.lru
	sh.lru.prev.next = l
	sh.lru.prev = l
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
	m.sweepLocked(sh, t)
}

func (m *Memory) sweepLocked(sh *shard, t int64) {
	if t < sh.expiry {
		return
	}
	next := int64(math.MaxInt64)
	for k, l := range sh.logs {
		if l.expired(t) {
			l.unlink()
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

	key        string
	prev, next *keyLog // the shard's use order
}

func (l *keyLog) unlink() {
	l.prev.next, l.next.prev = l.next, l.prev
	l.prev, l.next = nil, nil
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
