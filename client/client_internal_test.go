package client

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestBackoffBounds(t *testing.T) {
	base, cap := 100*time.Millisecond, 5*time.Second
	for n := range 100 {
		ceil := min(cap, base<<min(n, 30))
		if got := backoff(n, base, cap, 0); got != 0 {
			t.Errorf("backoff(%d, r=0) = %v, want 0", n, got)
		}
		if got := backoff(n, base, cap, 0.999999); got > ceil || got < ceil*99/100 {
			t.Errorf("backoff(%d, r≈1) = %v, want just under %v", n, got, ceil)
		}
		if got := backoff(n, base, cap, 0.5); got != ceil/2 {
			t.Errorf("backoff(%d, r=0.5) = %v, want %v", n, got, ceil/2)
		}
	}
	if got := backoff(3, base, cap, 0.5); got != 400*time.Millisecond {
		t.Errorf("backoff(3) = %v, want 400ms (half of 800ms)", got)
	}
	if got := backoff(1<<40, base, cap, 0.5); got != cap/2 {
		t.Errorf("backoff(huge) = %v, want %v", got, cap/2)
	}
}

func TestCMIDsAreRandom(t *testing.T) {
	c := &Client{rand: bytes.NewReader(bytes.Repeat([]byte{0xff}, 16))}
	id, err := c.newCMID()
	if err != nil {
		t.Fatal(err)
	}
	if want := "ffffffff-ffff-4fff-bfff-ffffffffffff"; id != want {
		t.Errorf("cmid from all-ones = %s, want %s", id, want)
	}
	if _, err := c.newCMID(); err == nil {
		t.Error("an exhausted random source gave a cmid")
	}
	c = &Client{rand: cryptoRand}
	seen := map[string]bool{}
	for range 1000 {
		id, err := c.newCMID()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("cmid %s twice", id)
		}
		seen[id] = true
	}
}

// testClock is a settable clock, safe for the client's goroutines.
type testClock struct{ ms atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.set(t)
	return c
}
func (c *testClock) set(t time.Time)     { c.ms.Store(t.UnixMilli()) }
func (c *testClock) now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *testClock) add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// cmids of the items in it, in order.
func cmids(items []Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.CMID)
	}
	return out
}

// addItems writes pending items with the given cmids.
func addItems(t *testing.T, c *Client, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := c.box.add(t.Context(), Item{CMID: id, Conv: "c", Kind: KindSend, Body: "hi", Created: c.now()}); err != nil {
			t.Fatal(err)
		}
	}
}

// end ends an item at the clock's time with out's outcome.
func end(t *testing.T, c *Client, id string, out Item) {
	t.Helper()
	if _, ok, err := c.box.finish(t.Context(), id, out, c.now()); err != nil || !ok {
		t.Fatalf("finish %s: %v %v", id, ok, err)
	}
}

// TestOutboxPrunedOnOpen: opening the outbox deletes items that ended more
// than KeepEnded ago (sent, dup and terminal alike, default 7 days), keeps
// younger ones, and never deletes a pending item, however old; a negative
// KeepEnded keeps everything.
func TestOutboxPrunedOnOpen(t *testing.T) {
	ctx := t.Context()
	file := filepath.Join(t.TempDir(), "outbox.db")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	reopen := func(keep time.Duration) *Client {
		t.Helper()
		c, err := open(ctx, Options{Outbox: file, KeepEnded: keep}, clock.now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := reopen(0)
	addItems(t, c, "sent", "expired", "dup", "pending")
	end(t, c, "sent", Item{Seq: 3, Epoch: 1})
	end(t, c, "expired", Item{Code: "ORIGINAL_EXPIRED", Msg: "purged"})
	clock.add(6 * 24 * time.Hour)
	end(t, c, "dup", Item{Seq: 4, Dup: true, Epoch: 1})
	c.Close()

	check := func(c *Client, wantEnded, wantPending []string) {
		t.Helper()
		ended, err := c.Outcomes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pending, err := c.Pending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := cmids(ended); !slices.Equal(got, wantEnded) {
			t.Errorf("ended items %v, want %v", got, wantEnded)
		}
		if got := cmids(pending); !slices.Equal(got, wantPending) {
			t.Errorf("pending items %v, want %v", got, wantPending)
		}
	}

	clock.set(t0.Add(DefaultKeepEnded)) // exactly 7 days after the first two ended
	c = reopen(0)
	check(c, []string{"sent", "expired", "dup"}, []string{"pending"})
	c.Close()

	clock.add(time.Millisecond)
	c = reopen(0)
	check(c, []string{"dup"}, []string{"pending"})
	c.Close()

	clock.add(365 * 24 * time.Hour)
	c = reopen(0)
	addItems(t, c, "kept")
	end(t, c, "kept", Item{Seq: 5, Epoch: 1})
	check(c, []string{"kept"}, []string{"pending"})
	c.Close()

	clock.add(365 * 24 * time.Hour)
	c = reopen(-1)
	check(c, []string{"kept"}, []string{"pending"})
	c.Close()
	c = reopen(time.Hour)
	check(c, nil, []string{"pending"})
	c.Close()
}

// TestOutboxPrunedWhileRunning: Run deletes ended items older than
// KeepEnded periodically, while it tries to connect, and leaves pending
// items alone.
func TestOutboxPrunedWhileRunning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "ws://" + ln.Addr().String() + "/ws"
	ln.Close() // nobody listens: Run keeps retrying
	clock := newTestClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := open(t.Context(), Options{URLs: []string{url}, Token: "t", Outbox: filepath.Join(t.TempDir(), "outbox.db"), KeepEnded: time.Hour}, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.every = 10 * time.Millisecond
	addItems(t, c, "old", "young", "pending")
	end(t, c, "old", Item{Seq: 3, Epoch: 1})
	clock.add(30 * time.Minute)
	end(t, c, "young", Item{Seq: 4, Epoch: 1})
	clock.add(31 * time.Minute)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ended, err := c.Outcomes(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if got := cmids(ended); slices.Equal(got, []string{"young"}) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("ended items %v after 10s of Run, want [young]", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pending, err := c.Pending(t.Context())
	if err != nil || !slices.Equal(cmids(pending), []string{"pending"}) {
		t.Errorf("pending %v, %v; want [pending]", cmids(pending), err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}
