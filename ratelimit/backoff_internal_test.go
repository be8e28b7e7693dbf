package ratelimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func newTestBackoff(maxKeys int) *Backoff {
	return NewBackoff(BackoffOptions{Free: 3, Base: time.Second, Max: 8 * time.Second, Forget: time.Minute, MaxKeys: maxKeys})
}

// fail makes one failed attempt at at, which must be admitted.
func fail(t *testing.T, b *Backoff, key string, at time.Time) {
	t.Helper()
	if ok, wait := b.begin(key, at); !ok {
		t.Fatalf("%s at %v: refused (wait %v), want admitted", key, at.Sub(t0), wait)
	}
	b.end(key, Failed, at)
}

// The schedule: Free failures cost nothing, then the wait doubles from
// Base up to Max; a refused attempt does not count; a success starts
// afresh.
func TestBackoffSchedule(t *testing.T) {
	b := newTestBackoff(100)
	at := t0
	for range 3 {
		fail(t, b, "ana", at)
	}
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		ok, wait := b.begin("ana", at)
		if ok || wait != want {
			t.Fatalf("after %v: ok %v wait %v, want refused for %v", at.Sub(t0), ok, wait, want)
		}
		if ok, _ := b.begin("ana", at.Add(want-time.Millisecond)); ok {
			t.Fatalf("a millisecond early: admitted")
		}
		at = at.Add(want)
		fail(t, b, "ana", at)
	}
	// Another key is not touched.
	if ok, _ := b.begin("ben", at); !ok {
		t.Fatal("another key refused")
	}
	b.end("ben", Abandoned, at)

	at = at.Add(8 * time.Second)
	if ok, _ := b.begin("ana", at); !ok {
		t.Fatal("after the wait: refused")
	}
	b.end("ana", Succeeded, at)
	for range 3 { // afresh: three free failures again
		fail(t, b, "ana", at)
	}
	if got := b.Len(); got != 1 {
		t.Errorf("keys held: %d, want 1 (ana; ben's abandoned attempt left nothing)", got)
	}
}

// Attempts in flight count: a key with k free failures left admits k
// concurrent attempts, one once none are left; an abandoned attempt gives
// its slot back without counting.
func TestBackoffInflight(t *testing.T) {
	b := newTestBackoff(100)
	for i := range 3 {
		if ok, _ := b.begin("ana", t0); !ok {
			t.Fatalf("concurrent attempt %d refused", i+1)
		}
	}
	if ok, wait := b.begin("ana", t0); ok || wait != time.Second {
		t.Fatalf("fourth concurrent attempt: ok %v wait %v, want refused for 1s", ok, wait)
	}
	b.end("ana", Abandoned, t0)
	b.end("ana", Failed, t0)
	b.end("ana", Failed, t0)
	// Two failures, one free left, none in flight.
	if ok, _ := b.begin("ana", t0); !ok {
		t.Fatal("third attempt refused")
	}
	if ok, _ := b.begin("ana", t0); ok {
		t.Fatal("a second attempt beside the last free one: admitted")
	}
	b.end("ana", Failed, t0)
	if ok, wait := b.begin("ana", t0); ok || wait != time.Second {
		t.Fatalf("after three failures: ok %v wait %v, want refused for 1s", ok, wait)
	}
}

// A key starts afresh Forget after its last failure.
func TestBackoffForget(t *testing.T) {
	b := newTestBackoff(100)
	for range 4 {
		at := t0
		if ok, _ := b.begin("ana", at); ok {
			b.end("ana", Failed, at)
		}
	}
	if ok, _ := b.begin("ana", t0.Add(59*time.Second)); !ok {
		t.Fatal("after the wait: refused")
	}
	b.end("ana", Abandoned, t0.Add(59*time.Second))
	if ok, _ := b.begin("ana", t0.Add(time.Minute)); !ok {
		t.Fatal("after Forget: refused")
	}
	b.end("ana", Abandoned, t0.Add(time.Minute))
	if got := b.Len(); got != 0 {
		t.Errorf("keys held after a forgotten key's abandoned attempt: %d, want 0", got)
	}
}

// The table is bounded, and a flood of new names evicts fresh keys, never
// a waiting one while fresh ones remain.
func TestBackoffBounded(t *testing.T) {
	b := newTestBackoff(10)
	for range 3 {
		fail(t, b, "victim", t0)
	}
	for i := range 1000 {
		fail(t, b, fmt.Sprint("flood", i), t0.Add(time.Millisecond))
	}
	if got := b.Len(); got != 10 {
		t.Errorf("keys held: %d, want 10", got)
	}
	if ok, wait := b.begin("victim", t0.Add(time.Millisecond)); ok || wait <= 0 {
		t.Errorf("victim after the flood: ok %v, want still waiting", ok)
	}
	if got := b.Evictions(); got != 1000-9 {
		t.Errorf("evictions: %d, want %d", got, 1000-9)
	}
	// Only waiting keys: the oldest goes.
	for i := range 10 {
		for range 3 {
			fail(t, b, fmt.Sprint("w", i), t0.Add(time.Second))
		}
	}
	if _, held := b.m["victim"]; held {
		t.Error("victim (the oldest waiting key) still held")
	}
	if got := b.Len(); got != 10 {
		t.Errorf("keys held: %d, want 10", got)
	}
}

// Concurrent use keeps the table and its lists consistent (run with
// -race).
func TestBackoffConcurrent(t *testing.T) {
	b := NewBackoff(BackoffOptions{MaxKeys: 50})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				key := fmt.Sprint("k", (g*7+i)%80)
				if ok, _ := b.Begin(key); ok {
					b.End(key, Result(i%3))
				}
			}
		})
	}
	wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range []*attempts{&b.fresh, &b.waiting} {
		for a := l.next; a != l; a = a.next {
			if a.list != l || b.m[a.key] != a {
				t.Fatalf("key %s: list or map out of step", a.key)
			}
			n++
		}
	}
	if n != len(b.m) || n > 50 {
		t.Errorf("listed %d keys, map holds %d (max 50)", n, len(b.m))
	}
}
