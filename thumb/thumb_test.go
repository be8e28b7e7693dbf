package thumb_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/color/palette"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/thumb"
)

// gradient is a w × h image whose colour changes across it, with alpha a.
func gradient(w, h int, a uint8) *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			copy(m.Pix[m.PixOffset(x, y):], []uint8{uint8(255 * x / w), uint8(255 * y / h), 128, a})
		}
	}
	return m
}

// solid is a w × h image of one colour.
func solid(w, h int, c color.Color) *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	n := color.NRGBAModel.Convert(c).(color.NRGBA)
	for i := 0; i < len(m.Pix); i += 4 {
		copy(m.Pix[i:], []uint8{n.R, n.G, n.B, n.A})
	}
	return m
}

func encPNG(t testing.TB, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encJPEG(t testing.TB, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encGIF(t testing.TB, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := gif.Encode(&b, m, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gray16 is a 16-bit grey image, which image/png keeps as Gray16.
func gray16(w, h int) image.Image {
	m := image.NewGray16(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.SetGray16(x, y, color.Gray16{uint16(65535 * x / w)})
		}
	}
	return m
}

func paletted(w, h int) image.Image {
	m := image.NewPaletted(image.Rect(0, 0, w, h), palette.Plan9)
	for y := range h {
		for x := range w {
			m.SetColorIndex(x, y, uint8((x+y)%256))
		}
	}
	return m
}

// allocated returns the bytes f allocated (TotalAlloc: everything, garbage
// included, so it bounds the peak from above).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Each format in, a JPEG out that fits the box with the source's aspect,
// never larger than the source, and the estimate the budget was charged
// covers what the decode allocated. Not parallel: it measures allocation.
func TestMake(t *testing.T) {
	tests := []struct {
		name   string
		in     []byte
		format string
		box    int
		w, h   int // the thumbnail's
	}{
		{"png nrgba wide", encPNG(t, gradient(1000, 500, 200)), "png", 0, 320, 160},
		{"png tall", encPNG(t, gradient(300, 900, 255)), "png", 0, 107, 320},
		{"png gray16", encPNG(t, gray16(640, 480)), "png", 0, 320, 240},
		{"png paletted", encPNG(t, paletted(500, 500)), "png", 0, 320, 320},
		{"png small not upscaled", encPNG(t, gradient(100, 50, 255)), "png", 0, 100, 50},
		{"png one pixel high", encPNG(t, gradient(2000, 1, 255)), "png", 0, 320, 1},
		{"jpeg 4:2:0", encJPEG(t, gradient(1200, 800, 255)), "jpeg", 0, 320, 213},
		{"jpeg gray", encJPEG(t, image.NewGray(image.Rect(0, 0, 333, 777))), "jpeg", 0, 137, 320},
		{"jpeg progressive", fixture(t, "video-001.q50.420.progressive.jpeg"), "jpeg", 64, 64, 44},
		{"jpeg cmyk", fixture(t, "video-001.cmyk.jpeg"), "jpeg", 100, 100, 69},
		{"jpeg rgb", fixture(t, "video-001.rgb.jpeg"), "jpeg", 0, 150, 103},
		{"gif", encGIF(t, gradient(640, 480, 255)), "gif", 0, 320, 240},
		{"webp lossy", fixture(t, "video-001.lossy.webp"), "webp", 64, 64, 44},
		{"webp lossless", fixture(t, "gopher-doc.8bpp.lossless.webp"), "webp", 0, 0, 0},
		{"webp alpha", fixture(t, "yellow_rose.lossy-with-alpha.webp"), "webp", 50, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, _, err := image.DecodeConfig(bytes.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			var info thumb.Info
			alloc := allocated(func() {
				info, err = thumb.Make(context.Background(), bytes.NewReader(tt.in), &out, thumb.Options{Box: tt.box})
			})
			if err != nil {
				t.Fatal(err)
			}
			cfg, format, err := image.DecodeConfig(bytes.NewReader(out.Bytes()))
			if err != nil || format != "jpeg" {
				t.Fatalf("output: %v, %q", err, format)
			}
			box := tt.box
			if box == 0 {
				box = thumb.DefaultBox
			}
			if tt.w == 0 { // a fixture: the size follows from the source's
				tt.w, tt.h = wantFit(src.Width, src.Height, box)
			}
			if cfg.Width != tt.w || cfg.Height != tt.h || info.ThumbWidth != tt.w || info.ThumbHeight != tt.h {
				t.Errorf("thumbnail %d×%d (info %d×%d), want %d×%d", cfg.Width, cfg.Height, info.ThumbWidth, info.ThumbHeight, tt.w, tt.h)
			}
			if info.Format != tt.format || info.Width != src.Width || info.Height != src.Height {
				t.Errorf("info %+v, want %s %d×%d", info, tt.format, src.Width, src.Height)
			}
			if alloc > uint64(info.Bytes) {
				t.Errorf("the decode allocated %d bytes, above the %d the budget was charged", alloc, info.Bytes)
			}
		})
	}
}

// wantFit is the thumbnail size of a w × h source in box, by hand.
func wantFit(w, h, box int) (int, int) {
	if w <= box && h <= box {
		return w, h
	}
	if w >= h {
		return box, max(1, int(float64(h)*float64(box)/float64(w)+0.5))
	}
	return max(1, int(float64(w)*float64(box)/float64(h)+0.5)), box
}

// The colours come through: the mean of an area, transparency on white.
func TestMakeColours(t *testing.T) {
	checker := image.NewGray(image.Rect(0, 0, 640, 640)) // halves exactly: 2×2 to a pixel
	for i := range checker.Pix {
		if (i%640+i/640)%2 == 0 {
			checker.Pix[i] = 255
		}
	}
	tests := []struct {
		name string
		in   []byte
		want color.RGBA
	}{
		{"opaque red", encPNG(t, solid(400, 300, color.RGBA{255, 0, 0, 255})), color.RGBA{255, 0, 0, 255}},
		{"transparent is white", encPNG(t, solid(400, 300, color.NRGBA{0, 0, 255, 0})), color.RGBA{255, 255, 255, 255}},
		{"half transparent blue on white", encPNG(t, solid(400, 300, color.NRGBA{0, 0, 255, 128})), color.RGBA{127, 127, 255, 255}},
		{"fine checker averages to grey", encPNG(t, checker), color.RGBA{128, 128, 128, 255}},
		{"gif green", encGIF(t, solid(400, 400, color.RGBA{0, 255, 0, 255})), color.RGBA{0, 255, 0, 255}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if _, err := thumb.Make(context.Background(), bytes.NewReader(tt.in), &out, thumb.Options{}); err != nil {
				t.Fatal(err)
			}
			m, err := jpeg.Decode(&out)
			if err != nil {
				t.Fatal(err)
			}
			b := m.Bounds()
			for _, p := range []image.Point{b.Min, b.Max.Sub(image.Pt(1, 1)), b.Min.Add(b.Max).Div(2)} {
				r, g, bl, _ := m.At(p.X, p.Y).RGBA()
				got := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 255}
				if !near(got, tt.want, 6) {
					t.Errorf("pixel %v: %v, want %v", p, got, tt.want)
				}
			}
		})
	}
}

func near(a, b color.RGBA, tol int) bool {
	d := func(x, y uint8) bool { return int(x)-int(y) <= tol && int(y)-int(x) <= tol }
	return d(a.R, b.R) && d(a.G, b.G) && d(a.B, b.B)
}

// withExif puts an APP1 Exif segment saying orientation o right after a
// JPEG's SOI marker.
func withExif(j []byte, o uint16) []byte {
	tiff := []byte("MM\x00*\x00\x00\x00\x08" + // big-endian, IFD0 at 8
		"\x00\x01" + // one entry
		"\x01\x12\x00\x03\x00\x00\x00\x01") // Orientation, SHORT, count 1
	tiff = binary.BigEndian.AppendUint16(tiff, o)
	tiff = append(tiff, 0, 0, 0, 0, 0, 0) // value padding, no next IFD
	seg := append([]byte("Exif\x00\x00"), tiff...)
	out := append([]byte{}, j[:2]...)
	out = append(out, 0xff, 0xe1)
	out = binary.BigEndian.AppendUint16(out, uint16(len(seg)+2))
	out = append(out, seg...)
	return append(out, j[2:]...)
}

// A camera's EXIF orientation turns the thumbnail upright: a 400×200
// photo, red on its left, marked "turn 90° clockwise to show" (6), gives
// a 160×320 thumbnail red at its top.
func TestMakeOrientation(t *testing.T) {
	m := image.NewRGBA(image.Rect(0, 0, 400, 200))
	for y := range 200 {
		for x := range 400 {
			c := color.RGBA{0, 0, 255, 255}
			if x < 200 {
				c = color.RGBA{255, 0, 0, 255}
			}
			m.SetRGBA(x, y, c)
		}
	}
	red, blue := color.RGBA{255, 0, 0, 255}, color.RGBA{0, 0, 255, 255}
	tests := []struct {
		o             uint16
		w, h          int
		first, second color.RGBA // left and right when wide, top and bottom when tall
	}{
		{1, 320, 160, red, blue},
		{2, 320, 160, blue, red},
		{3, 320, 160, blue, red},
		{6, 160, 320, red, blue},
		{8, 160, 320, blue, red},
	}
	plain := encJPEG(t, m)
	for _, tt := range tests {
		var out bytes.Buffer
		info, err := thumb.Make(context.Background(), bytes.NewReader(withExif(plain, tt.o)), &out, thumb.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := jpeg.Decode(&out)
		if err != nil {
			t.Fatal(err)
		}
		if b := got.Bounds(); b.Dx() != tt.w || b.Dy() != tt.h || info.Orientation != int(tt.o) {
			t.Fatalf("orientation %d: %v, orientation %d; want %d×%d", tt.o, b, info.Orientation, tt.w, tt.h)
		}
		at := func(x, y int) color.RGBA {
			r, g, b, _ := got.At(x, y).RGBA()
			return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}
		}
		first, second := at(5, tt.h/2), at(tt.w-5, tt.h/2)
		if tt.h > tt.w {
			first, second = at(tt.w/2, 5), at(tt.w/2, tt.h-5)
		}
		if !near(first, tt.first, 40) || !near(second, tt.second, 40) {
			t.Errorf("orientation %d: %v then %v, want %v then %v", tt.o, first, second, tt.first, tt.second)
		}
	}
}

// chunk is one PNG chunk with its CRC.
func chunk(typ string, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	b = append(b, typ...)
	b = append(b, data...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(typ), data...)))
}

// bombPNG declares w × h RGBA pixels with a valid header and a small zlib
// stream of zeros: kilobytes that would decode to w·h·4 bytes.
func bombPNG(t testing.TB, w, h uint32) []byte {
	t.Helper()
	var ihdr []byte
	ihdr = binary.BigEndian.AppendUint32(ihdr, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 6, 0, 0, 0) // 8-bit RGBA, no interlace
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	b := []byte("\x89PNG\r\n\x1a\n")
	b = append(b, chunk("IHDR", ihdr)...)
	b = append(b, chunk("IDAT", z.Bytes())...)
	return append(b, chunk("IEND", nil)...)
}

// A decompression bomb is refused from its header: the call allocates
// almost nothing, whatever the image declares.
func TestBombs(t *testing.T) {
	jpegHuge := encJPEG(t, gradient(16, 16, 255))
	// Patch the frame header's size: SOF0 is FFC0, then length, precision,
	// height, width.
	i := bytes.Index(jpegHuge, []byte{0xff, 0xc0})
	binary.BigEndian.PutUint16(jpegHuge[i+5:], 65000)
	binary.BigEndian.PutUint16(jpegHuge[i+7:], 65000)
	gifHuge := encGIF(t, gradient(16, 16, 255))
	binary.LittleEndian.PutUint16(gifHuge[6:], 65535)
	binary.LittleEndian.PutUint16(gifHuge[8:], 65535)
	tests := []struct {
		name   string
		in     []byte
		budget int64
		want   error
	}{
		{"png 100000×100000", bombPNG(t, 100000, 100000), 0, thumb.ErrTooManyPixels},
		{"png 40 MP and one row", bombPNG(t, 8000, 5001), 0, thumb.ErrTooManyPixels},
		{"png overflowing", bombPNG(t, 1<<31-1, 1<<31-1), 0, nil},
		{"png 36 MP, small budget", bombPNG(t, 6000, 6000), 64 << 20, thumb.ErrOverBudget},
		{"jpeg 65000×65000", jpegHuge, 0, thumb.ErrTooManyPixels},
		{"gif 65535×65535", gifHuge, 0, thumb.ErrTooManyPixels},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := thumb.Options{}
			if tt.budget > 0 {
				o.Budget = thumb.NewBudget(tt.budget)
			}
			var out bytes.Buffer
			var err error
			alloc := allocated(func() { _, err = thumb.Make(context.Background(), bytes.NewReader(tt.in), &out, o) })
			switch {
			case err == nil:
				t.Fatal("made a thumbnail of a bomb")
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("err %v, want %v", err, tt.want)
			}
			// The header reader's buffers and a JPEG's one segment buffer.
			if alloc > 256<<10 {
				t.Errorf("refusing took %d bytes", alloc)
			}
			if out.Len() != 0 {
				t.Errorf("wrote %d bytes", out.Len())
			}
		})
	}
}

// A broken image is an error, never a panic, whichever byte it ends at
// or has wrong.
func TestCorrupt(t *testing.T) {
	images := map[string][]byte{
		"png":           encPNG(t, gradient(300, 200, 100)),
		"jpeg":          encJPEG(t, gradient(300, 200, 255)),
		"progressive":   fixture(t, "video-001.q50.420.progressive.jpeg"),
		"gif":           encGIF(t, gradient(300, 200, 255)),
		"webp lossy":    fixture(t, "video-001.lossy.webp"),
		"webp lossless": fixture(t, "gopher-doc.8bpp.lossless.webp"),
		"webp alpha":    fixture(t, "yellow_rose.lossy-with-alpha.webp"),
	}
	for name, img := range images {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{0, 1, 8, 16, 30, 64, len(img) / 4, len(img) / 2, len(img) * 3 / 4} {
				if _, err := thumb.Make(context.Background(), bytes.NewReader(img[:n]), &bytes.Buffer{}, thumb.Options{}); err == nil {
					t.Errorf("truncated to %d of %d bytes: no error", n, len(img))
				}
			}
			// Damage a byte at a time along the file; most damage is
			// an error, some only changes pixels: neither panics.
			for i := 0; i < len(img); i += max(1, len(img)/50) {
				bad := bytes.Clone(img)
				bad[i] ^= 0x5a
				thumb.Make(context.Background(), bytes.NewReader(bad), &bytes.Buffer{}, thumb.Options{})
			}
		})
	}
	for _, in := range [][]byte{nil, []byte("not an image at all"), []byte("BM\x00\x00")} {
		if _, err := thumb.Make(context.Background(), bytes.NewReader(in), &bytes.Buffer{}, thumb.Options{}); !errors.Is(err, thumb.ErrFormat) {
			t.Errorf("%q: %v, want ErrFormat", in, err)
		}
	}
}

// Concurrent decodes share one budget: together they never hold more than
// it, all of them finish, and one that alone needs more than the budget is
// refused at once rather than waiting for ever.
func TestBudget(t *testing.T) {
	img := encPNG(t, gradient(600, 600, 255)) // about 4.7 MB each to decode
	budget := thumb.NewBudget(10 << 20)       // two at a time
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			_, err := thumb.Make(context.Background(), bytes.NewReader(img), &bytes.Buffer{}, thumb.Options{Budget: budget})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if budget.Peak() > budget.Size() || budget.Peak() == 0 || budget.InUse() != 0 {
		t.Errorf("peak %d, in use %d of %d", budget.Peak(), budget.InUse(), budget.Size())
	}

	big := encPNG(t, gradient(1500, 1500, 255)) // about 13 MB
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := thumb.Make(ctx, bytes.NewReader(big), &bytes.Buffer{}, thumb.Options{Budget: budget}); !errors.Is(err, thumb.ErrOverBudget) {
		t.Errorf("an image larger than the budget: %v, want ErrOverBudget", err)
	}
}
