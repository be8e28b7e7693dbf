package client

import (
	"bytes"
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
