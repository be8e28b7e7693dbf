package thumb

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley"
)

// Job defaults.
const (
	DefaultWorkers = 1
	DefaultQueue   = 1024
	DefaultTimeout = 2 * time.Minute
)

// JobsOptions configure a Jobs.
type JobsOptions struct {
	Blobs parley.BlobStore // where the files are and the thumbnails go
	// Workers is the number of thumbnails made at once (default 1); the
	// budget, not this number, bounds their memory.
	Workers int
	// Queue is the number of files waiting at most (default 1024).
	Queue int
	// MemoryBudget is the bytes of decoded images all workers together
	// may hold (default DefaultBudget); an image that alone needs more is
	// refused.
	MemoryBudget int64
	Box, Quality int           // Make's options; 0 for the defaults
	Timeout      time.Duration // one job at most (default 2 min)
	Log          *slog.Logger  // default slog.Default()
}

// Jobs makes the thumbnails of ready image files in the background.
//
// Guarantees:
//   - Enqueue never blocks: a file is queued, or dropped when the queue
//     is full (it then has no thumbnail until it is enqueued again), or
//     ignored when it is already queued or being made.
//   - A job is idempotent: it makes nothing when the thumbnail blob
//     exists, and the blob store's atomic Put means two processes making
//     the same thumbnail at once leave one whole thumbnail.
//   - A file that is not a JPEG, PNG, GIF or WebP image by its recorded
//     MIME type is skipped; one above MaxPixels by its recorded size is
//     refused without reading a byte of it.
//   - The thumbnail streams from the decoder into the blob store: nothing
//     is buffered whole but the decoded image, whose memory the budget
//     bounds.
//   - Every error is logged and counted (Counts), never returned: a
//     missing thumbnail is a file shown without a preview.
type Jobs struct {
	blobs   parley.BlobStore
	workers int
	timeout time.Duration
	opts    Options
	log     *slog.Logger
	queue   chan parley.File
	running atomic.Bool

	mu      sync.Mutex
	pending map[string]bool // queued or being made, by file id

	nQueued, nRunning                            atomic.Int64
	nDone, nFailed, nRefused, nSkipped, nDropped atomic.Int64
}

// New returns the jobs of o; Run works them.
func New(o JobsOptions) *Jobs {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.MemoryBudget <= 0 {
		o.MemoryBudget = DefaultBudget
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Jobs{
		blobs:   o.Blobs,
		workers: o.Workers,
		timeout: o.Timeout,
		opts:    Options{Box: o.Box, Quality: o.Quality, Budget: NewBudget(o.MemoryBudget)},
		log:     o.Log,
		queue:   make(chan parley.File, o.Queue),
		pending: map[string]bool{},
	}
}

// Budget is the memory budget the jobs share.
func (j *Jobs) Budget() *Budget { return j.opts.Budget }

// Counts are what the jobs did, for metrics: Queued and Running are now;
// the others count since New.
type Counts struct {
	Queued  int64 // waiting
	Running int64 // being made
	Done    int64 // thumbnails written
	Failed  int64 // errors: a corrupt image, the blob store
	Refused int64 // above MaxPixels, or needing more than the whole budget
	Skipped int64 // not an image, or the thumbnail already existed
	Dropped int64 // not queued: the queue was full
}

// Counts returns the counts now.
func (j *Jobs) Counts() Counts {
	return Counts{
		Queued: j.nQueued.Load(), Running: j.nRunning.Load(),
		Done: j.nDone.Load(), Failed: j.nFailed.Load(), Refused: j.nRefused.Load(),
		Skipped: j.nSkipped.Load(), Dropped: j.nDropped.Load(),
	}
}

// Enqueue asks for f's thumbnail and returns at once; it reports whether
// f was queued (false: already queued or running, or the queue is full).
func (j *Jobs) Enqueue(f parley.File) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending[f.ID] {
		return false
	}
	select {
	case j.queue <- f:
		j.pending[f.ID] = true
		j.nQueued.Add(1)
		return true
	default:
		j.nDropped.Add(1)
		return false
	}
}

// Run works the queue with the configured workers until ctx ends, then
// waits for the jobs in progress (their context is ctx: they stop soon)
// and returns nil. Files still queued stay queued for a later Run. A
// second Run while one runs is an error.
func (j *Jobs) Run(ctx context.Context) error {
	if !j.running.CompareAndSwap(false, true) {
		return errors.New("thumb: jobs already running")
	}
	defer j.running.Store(false)
	var wg sync.WaitGroup
	for range j.workers {
		wg.Go(func() {
			for ctx.Err() == nil { // before the select: a stopped Run takes no more files
				select {
				case <-ctx.Done():
					return
				case f := <-j.queue:
					j.nQueued.Add(-1)
					j.nRunning.Add(1)
					j.work(ctx, f)
					j.nRunning.Add(-1)
					j.mu.Lock()
					delete(j.pending, f.ID)
					j.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// imageTypes are the MIME types (as http.DetectContentType names them)
// a thumbnail is made of.
var imageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// work makes one thumbnail and counts the outcome.
func (j *Jobs) work(ctx context.Context, f parley.File) {
	ctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	log := j.log.With("file", f.ID)
	if f.State != parley.FileReady || !imageTypes[f.MIME] {
		j.nSkipped.Add(1)
		return
	}
	if f.Width > MaxPixels || f.Height > MaxPixels || int64(f.Width)*int64(f.Height) > MaxPixels {
		j.nRefused.Add(1)
		log.Info("thumbnail refused", "width", f.Width, "height", f.Height, "err", ErrTooManyPixels)
		return
	}
	key := parley.ThumbKey(f.ID)
	switch _, err := j.blobs.Stat(ctx, key); {
	case err == nil:
		j.nSkipped.Add(1)
		return
	case parley.ErrorCode(err) != parley.CodeNotFound:
		j.nFailed.Add(1)
		log.Warn("thumbnail failed", "err", err)
		return
	}
	info, err := j.put(ctx, f.ID, key)
	switch {
	case err == nil:
		j.nDone.Add(1)
		log.Debug("thumbnail made", "format", info.Format, "width", info.Width, "height", info.Height, "bytes", info.Bytes)
	case Refused(err):
		j.nRefused.Add(1)
		log.Info("thumbnail refused", "format", info.Format, "width", info.Width, "height", info.Height, "bytes", info.Bytes, "err", err)
	default:
		j.nFailed.Add(1)
		log.Warn("thumbnail failed", "format", info.Format, "err", err)
	}
}

// put makes the thumbnail of blob id into blob key, streaming: Make
// writes into a pipe the blob store reads. An error of Make aborts the
// Put (the key keeps no blob); an error of Put stops Make's writes.
func (j *Jobs) put(ctx context.Context, id, key string) (Info, error) {
	src, _, err := j.blobs.Open(ctx, id)
	if err != nil {
		return Info{}, err
	}
	defer src.Close()
	pr, pw := io.Pipe()
	var (
		info    Info
		makeErr error
		made    = make(chan struct{})
	)
	go func() {
		defer close(made)
		info, makeErr = Make(ctx, src, pw, j.opts)
		pw.CloseWithError(makeErr)
	}()
	_, _, putErr := j.blobs.Put(ctx, key, pr)
	pr.CloseWithError(errors.Join(putErr, errors.New("thumb: the blob store stopped reading")))
	<-made
	if makeErr != nil {
		return info, makeErr
	}
	return info, putErr
}
