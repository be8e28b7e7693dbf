// Package thumb makes the thumbnails of uploaded images: a small JPEG that
// fits a box, made by a background job after the upload finished, so a
// message never waits for one and a file without a thumbnail is still a
// file.
//
// An uploaded image is outside input, and decoding one costs memory in
// proportion to its pixels, not to its bytes: a PNG of a few kilobytes may
// declare 100,000 × 100,000 pixels, 40 GB once decoded. So nothing is
// decoded before its header is read: the pixel size comes from the header
// (image.DecodeConfig), an image above MaxPixels is refused there, and the
// bytes its decoder will allocate are estimated from the header (format,
// colour model, sampling, interlacing, progressive coding) and taken from a
// shared Budget before decoding starts. A job larger than the whole budget
// is refused, not queued forever; jobs that fit wait their turn.
//
// In: JPEG, PNG, GIF (its first frame) and WebP. Out: JPEG, baseline,
// quality 80, transparency composited on white. Go's libraries have no
// WebP encoder, so thumbnails are JPEG only.
package thumb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"sync"

	"golang.org/x/sync/semaphore"
)

// Limits and defaults.
const (
	// MaxPixels is the largest image a thumbnail is made of: 40
	// megapixels, above any phone camera's photo and far below what
	// would make one decode a danger to the server.
	MaxPixels = 40_000_000
	// DefaultBox is the side of the square a thumbnail fits in.
	DefaultBox = 320
	// MaxBox bounds Options.Box.
	MaxBox = 2048
	// DefaultQuality is the JPEG quality of a thumbnail.
	DefaultQuality = 80
	// DefaultBudget is the decoded bytes all thumbnail jobs of a process
	// may hold at once: enough for the largest common photo, a 40 MP
	// progressive JPEG (about 300 MB in Go's decoder), one at a time.
	DefaultBudget = 384 << 20
)

// Errors of Make. A refused image (ErrTooManyPixels, ErrOverBudget) is
// one no thumbnail will ever be made of; any other error is a failure
// (a corrupt image, the reader's or the writer's error).
var (
	ErrFormat        = errors.New("thumb: not a JPEG, PNG, GIF or WebP image")
	ErrTooManyPixels = fmt.Errorf("thumb: image above %d pixels", MaxPixels)
	ErrOverBudget    = errors.New("thumb: decoding the image needs more memory than the whole budget")
)

// Refused reports whether err says the image is refused by the limits
// (too many pixels, more memory than the budget), not broken.
func Refused(err error) bool {
	return errors.Is(err, ErrTooManyPixels) || errors.Is(err, ErrOverBudget)
}

// Options tune Make. The zero value is DefaultBox, DefaultQuality and a
// private budget of DefaultBudget bytes for this call alone.
type Options struct {
	Box     int     // the thumbnail fits Box × Box pixels; never upscaled
	Quality int     // JPEG quality, 1–100
	Budget  *Budget // shared by concurrent calls; nil: DefaultBudget for this call
}

func (o Options) withDefaults() Options {
	if o.Box <= 0 {
		o.Box = DefaultBox
	}
	o.Box = min(o.Box, MaxBox)
	if o.Quality <= 0 || o.Quality > 100 {
		o.Quality = DefaultQuality
	}
	if o.Budget == nil {
		o.Budget = NewBudget(DefaultBudget)
	}
	return o
}

// Info describes what Make read and wrote.
type Info struct {
	Format        string // "jpeg", "png", "gif" or "webp"
	Width, Height int    // of the source, as its header declares
	// Bytes is the memory the decode was estimated to need and took from
	// the budget (set once the header was read, refused or not).
	Bytes int64
	// ThumbWidth and ThumbHeight are the thumbnail's, after orientation.
	ThumbWidth, ThumbHeight int
	// Orientation is the EXIF orientation applied (1–8; 1 for none).
	Orientation int
}

// Make reads the image in src and writes its thumbnail, a JPEG, to dst.
// src is read from its start; it is read twice (the header, then the
// image), hence a ReadSeeker. The order is the point: header, then
// limits, then the budget, then the decode; an image refused by the
// limits costs a few kilobytes of memory. ctx bounds the wait for the
// budget; a decode already running finishes (the reader, if it honours
// ctx as a blob store's does, cuts it short). A panic of a decoder is
// returned as an error.
func Make(ctx context.Context, src io.ReadSeeker, dst io.Writer, o Options) (Info, error) {
	o = o.withDefaults()
	h, err := readHeader(src)
	if err == nil {
		h.need += overhead(h.width, h.height, o.Box)
	}
	info := Info{Format: h.format, Width: h.width, Height: h.height, Bytes: h.need, Orientation: h.orientation}
	if err != nil {
		return info, err
	}
	if err := o.Budget.acquire(ctx, h.need); err != nil {
		return info, err
	}
	var once sync.Once
	release := func() { once.Do(func() { o.Budget.release(h.need) }) }
	defer release()

	small, err := shrink(src, h, o.Box)
	if err != nil {
		return info, err
	}
	release() // the large image is garbage now; a slow dst must not hold the budget
	small = orient(small, h.orientation)
	info.ThumbWidth, info.ThumbHeight = small.Rect.Dx(), small.Rect.Dy()
	if err := jpeg.Encode(dst, small, &jpeg.Options{Quality: o.Quality}); err != nil {
		return info, fmt.Errorf("thumb: writing the thumbnail: %w", err)
	}
	return info, nil
}

// shrink decodes the image and scales it to fit box; the decoded image
// is garbage when it returns.
func shrink(src io.ReadSeeker, h header, box int) (*image.RGBA, error) {
	img, err := decode(src, h)
	if err != nil {
		return nil, err
	}
	// A GIF's first frame may cover part of its canvas: the thumbnail is
	// of the canvas, with what the frame leaves uncovered transparent.
	canvas := image.Rect(0, 0, h.width, h.height)
	tw, th := fit(h.width, h.height, box)
	return scale(img, canvas, tw, th), nil
}

// decode decodes the image src holds, from its start, and checks that it
// is no larger than its header declared.
func decode(src io.ReadSeeker, h header) (img image.Image, err error) {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("thumb: %w", err)
	}
	defer func() {
		// The decoders are fuzzed upstream, but an uploaded image must
		// never take the server down with it.
		if p := recover(); p != nil {
			img, err = nil, fmt.Errorf("thumb: decoding the %s image: panic: %v", h.format, p)
		}
	}()
	img, _, err = image.Decode(bufio.NewReaderSize(src, 32<<10))
	if err != nil {
		return nil, fmt.Errorf("thumb: decoding the %s image: %w", h.format, err)
	}
	if b := img.Bounds(); b.Empty() || !b.In(image.Rect(0, 0, h.width, h.height)) {
		return nil, fmt.Errorf("thumb: the %s image decoded to %v, outside the %d×%d its header declares", h.format, b, h.width, h.height)
	}
	return img, nil
}

// fit returns the size of a w × h image scaled to fit box × box, keeping
// its aspect, never larger than it is, at least one pixel each way.
func fit(w, h, box int) (int, int) {
	if w <= box && h <= box {
		return w, h
	}
	if w >= h {
		return box, max(1, int((int64(h)*int64(box)+int64(w)/2)/int64(w)))
	}
	return max(1, int((int64(w)*int64(box)+int64(h)/2)/int64(h))), box
}

// Budget bounds the memory of the decodes running at once: each takes the
// bytes its header says it will need before it starts and gives them back
// when its image is scaled. The bound is on live decoded images; the
// garbage they leave is the Go collector's (GOMEMLIMIT bounds that).
type Budget struct {
	size int64
	sem  *semaphore.Weighted

	mu          sync.Mutex
	inUse, peak int64
}

// NewBudget returns a budget of size bytes.
func NewBudget(size int64) *Budget {
	return &Budget{size: size, sem: semaphore.NewWeighted(size)}
}

// Size is the budget's total.
func (b *Budget) Size() int64 { return b.size }

// InUse is the bytes taken now; Peak the most ever taken at once.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inUse
}

// Peak is the most bytes ever taken at once.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// acquire takes n bytes, waiting while other decodes hold them; more than
// the whole budget is ErrOverBudget at once (the semaphore would wait for
// ever).
func (b *Budget) acquire(ctx context.Context, n int64) error {
	if n > b.size {
		return ErrOverBudget
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return fmt.Errorf("thumb: waiting for memory: %w", err)
	}
	b.mu.Lock()
	b.inUse += n
	b.peak = max(b.peak, b.inUse)
	b.mu.Unlock()
	return nil
}

func (b *Budget) release(n int64) {
	b.mu.Lock()
	b.inUse -= n
	b.mu.Unlock()
	b.sem.Release(n)
}
