package thumb_test

import (
	"bytes"
	"context"
	"image"
	"os"
	"path/filepath"
	"testing"

	"github.com/parleychat/parley/thumb"
)

// FuzzMake feeds Make what an uploader could: any bytes. It must not
// panic, and what it writes is a JPEG that fits the box, of a bounded
// size, made within the budget.
func FuzzMake(f *testing.F) {
	f.Add(encPNG(f, gradient(40, 30, 100)))
	f.Add(encPNG(f, paletted(33, 17)))
	f.Add(encJPEG(f, gradient(50, 20, 255)))
	f.Add(withExif(encJPEG(f, gradient(20, 50, 255)), 6))
	f.Add(encGIF(f, gradient(30, 30, 255)))
	f.Add(bombPNG(f, 100000, 100000))
	names, _ := filepath.Glob(filepath.Join("testdata", "*.*[gp]"))
	for _, n := range names {
		if b, err := os.ReadFile(n); err == nil {
			f.Add(b)
		}
	}
	const box = 64
	budget := thumb.NewBudget(32 << 20)
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		info, err := thumb.Make(context.Background(), bytes.NewReader(in), &out, thumb.Options{Box: box, Budget: budget})
		if budget.InUse() != 0 {
			t.Fatalf("%d bytes of the budget still taken", budget.InUse())
		}
		if err != nil {
			if out.Len() != 0 {
				t.Fatalf("failed (%v) after writing %d bytes", err, out.Len())
			}
			return
		}
		if info.Bytes > budget.Size() {
			t.Fatalf("decoded with %d bytes, above the budget", info.Bytes)
		}
		if out.Len() > 64<<10 {
			t.Fatalf("a %d×%d thumbnail of %d bytes", info.ThumbWidth, info.ThumbHeight, out.Len())
		}
		cfg, format, err := image.DecodeConfig(&out)
		if err != nil || format != "jpeg" || cfg.Width > box || cfg.Height > box || cfg.Width < 1 || cfg.Height < 1 {
			t.Fatalf("output %v %q %d×%d", err, format, cfg.Width, cfg.Height)
		}
	})
}
