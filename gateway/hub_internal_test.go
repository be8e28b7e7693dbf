package gateway

import (
	"testing"
	"time"
)

// TestUniformJitter: the default resync delay stays inside the window and
// spreads over it (1000 draws all within a tenth of the window would mean
// a broken draw, with odds far below one in a billion for a uniform one).
func TestUniformJitter(t *testing.T) {
	const window = 10 * time.Second
	lo, hi := window, time.Duration(0)
	for range 1000 {
		d := uniformJitter(window)
		if d < 0 || d >= window {
			t.Fatalf("jitter %v outside [0, %v)", d, window)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi-lo < window/10 {
		t.Fatalf("1000 draws span only %v..%v of %v", lo, hi, window)
	}
	if d := uniformJitter(0); d != 0 {
		t.Fatalf("jitter of an empty window = %v", d)
	}
	if o := (Options{}).withDefaults(); o.ResyncWindow != DefaultResyncWindow || o.Jitter == nil {
		t.Fatalf("defaults: window %v, jitter set %v", o.ResyncWindow, o.Jitter != nil)
	}
}
