package ratelimit

import (
	"sync"
	"time"
)

// BackoffOptions configures NewBackoff. Zero values take the defaults.
type BackoffOptions struct {
	// Free is how many failures in a row cost no wait (default 5).
	Free int
	// Base is the wait after the Free-th failure in a row (default 1s);
	// it doubles with each further failure, up to Max (default 15
	// minutes).
	Base, Max time.Duration
	// Forget is how long after its last failure a key starts afresh
	// (default 1 hour; at least Max).
	Forget time.Duration
	// MaxKeys bounds the keys held (default 100,000).
	MaxKeys int
	Now     func() time.Time
}

// Backoff slows down repeated failures per key (a login name): after Free
// failures in a row, each further attempt must wait Base, then twice as
// long after every further failure, up to Max; a success starts the key
// afresh, and so does Forget without a failure. It is a built-in
// protection, not a configured limit, and it is per process.
//
// An attempt is judged before it is made (Begin) and its result reported
// after (End). While a key's wait runs, Begin refuses and says how long is
// left. Attempts in flight count too: a key with k free failures left
// admits k concurrent attempts (one once none are left), so a burst of
// parallel guesses gets no more tries than a sequence.
//
// Memory is bounded: at most MaxKeys keys. When full, a new key evicts the
// least recently failed key that is not yet waiting, and only when every
// key is waiting, the least recently failed of those; so a flood of
// distinct names (each one failure) cannot push out the keys that matter.
type Backoff struct {
	o BackoffOptions

	mu sync.Mutex
	m  map[string]*attempts
	// fresh (fewer than Free failures) and waiting keys, each in order of
	// their last failure or Begin: the sentinels' next is the oldest.
	fresh, waiting attempts
	evictions      int64
}

type attempts struct {
	key      string
	failures int
	inflight int
	last     time.Time // last failure, or Begin of a key without one
	until    time.Time // no attempt before this

	prev, next *attempts
	list       *attempts // the sentinel of the list it is in
}

// Result is the outcome of an attempt Begin admitted.
type Result int

const (
	// Abandoned: the attempt was not judged (the store failed, the
	// request ended): it counts neither way.
	Abandoned Result = iota
	Failed
	Succeeded
)

// NewBackoff returns an empty Backoff.
func NewBackoff(o BackoffOptions) *Backoff {
	if o.Free <= 0 {
		o.Free = 5
	}
	if o.Base <= 0 {
		o.Base = time.Second
	}
	if o.Max <= 0 {
		o.Max = 15 * time.Minute
	}
	o.Max = max(o.Max, o.Base)
	if o.Forget <= 0 {
		o.Forget = time.Hour
	}
	o.Forget = max(o.Forget, o.Max)
	if o.MaxKeys <= 0 {
		o.MaxKeys = 100_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	b := &Backoff{o: o, m: map[string]*attempts{}}
	for _, l := range []*attempts{&b.fresh, &b.waiting} {
		l.next, l.prev = l, l
	}
	return b
}

// Begin reports whether an attempt for key may be made now. If so, the
// caller must call End(key, result) once the attempt is decided; if not,
// wait is how long until it may be asked again (at least a millisecond).
func (b *Backoff) Begin(key string) (ok bool, wait time.Duration) {
	return b.begin(key, b.o.Now())
}

// End reports the result of an attempt Begin admitted.
func (b *Backoff) End(key string, r Result) {
	b.end(key, r, b.o.Now())
}

// Len reports how many keys are held.
func (b *Backoff) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// Evictions reports how many keys were dropped to make room.
func (b *Backoff) Evictions() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.evictions
}

func (b *Backoff) begin(key string, now time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.m[key]
	if a != nil && a.inflight == 0 && !now.Before(a.last.Add(b.o.Forget)) && !now.Before(a.until) {
		b.drop(a) // forgotten: a fresh start
		a = nil
	}
	if a == nil {
		if len(b.m) >= b.o.MaxKeys {
			b.evict(now)
		}
		a = &attempts{key: key, last: now}
		b.m[key] = a
		b.push(&b.fresh, a)
	}
	if now.Before(a.until) {
		return false, ceilMs(a.until.Sub(now))
	}
	if a.inflight >= max(b.o.Free-a.failures, 1) {
		// Others' attempts are being judged; theirs decide this one's wait.
		return false, time.Second
	}
	a.inflight++
	return true, 0
}

func (b *Backoff) end(key string, r Result, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.m[key]
	if a == nil { // evicted meanwhile
		if r != Failed {
			return
		}
		if len(b.m) >= b.o.MaxKeys {
			b.evict(now)
		}
		a = &attempts{key: key}
		b.m[key] = a
		a.inflight = 1
		b.push(&b.fresh, a)
	}
	a.inflight = max(a.inflight-1, 0)
	switch r {
	case Succeeded:
		a.failures, a.until = 0, time.Time{}
		if a.inflight == 0 {
			b.drop(a)
			return
		}
	case Failed:
		a.failures++
		a.last = now
		if n := a.failures - b.o.Free; n >= 0 {
			wait := b.o.Max
			if n < 40 && b.o.Base<<n < b.o.Max && b.o.Base<<n > 0 {
				wait = b.o.Base << n
			}
			a.until = now.Add(wait)
		}
	case Abandoned:
		if a.failures == 0 && a.inflight == 0 {
			b.drop(a)
			return
		}
	}
	a.unlink()
	if a.failures >= b.o.Free {
		b.push(&b.waiting, a)
	} else {
		b.push(&b.fresh, a)
	}
}

// evict frees one slot: a forgotten key if the oldest of a list is one,
// else the oldest fresh key, else the oldest waiting key.
func (b *Backoff) evict(now time.Time) {
	for _, l := range []*attempts{&b.fresh, &b.waiting} {
		if a := l.next; a != l && a.inflight == 0 && !now.Before(a.last.Add(b.o.Forget)) && !now.Before(a.until) {
			b.drop(a)
			return
		}
	}
	for _, l := range []*attempts{&b.fresh, &b.waiting} {
		if a := l.next; a != l {
			b.drop(a)
			b.evictions++
			return
		}
	}
}

func (b *Backoff) drop(a *attempts) {
	a.unlink()
	delete(b.m, a.key)
}

func (b *Backoff) push(l, a *attempts) {
	a.list = l
	a.prev, a.next = l.prev, l
	l.prev.next = a
	l.prev = a
}

func (a *attempts) unlink() {
	if a.list == nil {
		return
	}
	a.prev.next, a.next.prev = a.next, a.prev
	a.prev, a.next, a.list = nil, nil, nil
}
