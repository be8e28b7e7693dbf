package thumb

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A decode waiting for the budget gives up with its context: a job
// stopped by shutdown does not hang on memory other jobs hold.
func TestBudgetWaitEndsWithContext(t *testing.T) {
	b := NewBudget(100)
	if err := b.acquire(context.Background(), 80); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.acquire(ctx, 30); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
	if err := b.acquire(context.Background(), 101); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("err %v, want ErrOverBudget", err)
	}
	b.release(80)
	if b.InUse() != 0 || b.Peak() != 80 {
		t.Errorf("in use %d, peak %d", b.InUse(), b.Peak())
	}
}

// A malformed Exif segment is orientation 1, whatever it claims.
func TestExifOrientation(t *testing.T) {
	tests := []struct {
		name string
		tiff string
		want int
	}{
		{"empty", "", 1},
		{"not tiff", "XX\x00*\x00\x00\x00\x08", 1},
		{"ifd past the end", "II*\x00\xff\xff\xff\x7f", 1},
		{"count past the end", "MM\x00*\x00\x00\x00\x08\xff\xff", 1},
		{"big-endian 6", "MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00", 6},
		{"little-endian 8", "II*\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00\x08\x00\x00\x00", 8},
		{"out of range", "MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x09\x00\x00", 1},
		{"wrong type", "MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12\x00\x04\x00\x00\x00\x01\x00\x06\x00\x00", 1},
	}
	for _, tt := range tests {
		if got := exifOrientation([]byte(tt.tiff)); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// Every source pixel's weight adds up to one, and every output pixel
// gets n/m of them.
func TestSpans(t *testing.T) {
	for _, c := range [][2]int{{1, 1}, {7, 3}, {400, 320}, {1000, 320}, {321, 320}, {100000, 1}} {
		n, m := c[0], c[1]
		got := make([]float64, m)
		for _, s := range spans(n, m) {
			got[s.i] += float64(s.f)
			if s.f < 1 {
				got[s.i+1] += 1 - float64(s.f)
			}
		}
		for i, g := range got {
			if d := g - float64(n)/float64(m); d > 1e-3*float64(n)/float64(m) || d < -1e-3*float64(n)/float64(m) {
				t.Errorf("spans(%d, %d): output %d gets %v", n, m, i, g)
			}
		}
	}
}
