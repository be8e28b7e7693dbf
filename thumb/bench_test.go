package thumb_test

import (
	"bufio"
	"context"
	"image"
	"image/jpeg"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/thumb"
)

// heapObjects reads the bytes of live and not yet swept heap objects
// without stopping the world.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkMake24MP makes the thumbnail of a 24-megapixel (6000×4000)
// 4:2:0 JPEG read from a file, as a job reads a blob. It reports the
// budget the job took (the estimate) and the heap's peak above its level
// before the job, sampled every 100 µs.
func BenchmarkMake24MP(b *testing.B) {
	path := filepath.Join(b.TempDir(), "24mp.jpeg")
	writePhoto(b, path, 6000, 4000)
	budget := thumb.NewBudget(thumb.DefaultBudget)
	var peak uint64
	var info thumb.Info
	for b.Loop() {
		b.StopTimer()
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		base := heapObjects()
		var top atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if h := heapObjects(); h > top.Load() {
					top.Store(h)
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond):
				}
			}
		}()
		b.StartTimer()
		info, err = thumb.Make(context.Background(), f, io.Discard, thumb.Options{Budget: budget})
		b.StopTimer()
		close(stop)
		<-sampled
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		if t := top.Load(); t > base {
			peak = max(peak, t-base)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(info.Bytes)/(1<<20), "budget-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

// writePhoto writes a w × h JPEG at quality 90 with detail everywhere
// (a gradient with a fine pattern), as a camera's photo has.
func writePhoto(b *testing.B, path string, w, h int) {
	b.Helper()
	m := image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)
	for y := range h {
		for x := range w {
			m.Y[m.YOffset(x, y)] = uint8((x*255/w + (x^y)&31) & 255)
		}
	}
	for y := range h / 2 {
		for x := range w / 2 {
			i := m.COffset(2*x, 2*y)
			m.Cb[i], m.Cr[i] = uint8(x*255/(w/2)), uint8(y*255/(h/2))
		}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	if err := jpeg.Encode(bw, m, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
