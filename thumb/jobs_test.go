package thumb_test

import (
	"bytes"
	"context"
	"image"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/blobdir"
	"github.com/parleychat/parley/thumb"
)

// jobsRig is a Jobs on a blob directory under t.TempDir().
type jobsRig struct {
	blobs *blobdir.Dir
	jobs  *thumb.Jobs
}

func newJobs(t *testing.T, o thumb.JobsOptions) *jobsRig {
	t.Helper()
	d, err := blobdir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	o.Blobs = d
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	return &jobsRig{blobs: d, jobs: thumb.New(o)}
}

// run runs the jobs until the test ends.
func (r *jobsRig) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.jobs.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// file stores b as a ready file of type mime and returns its row.
func (r *jobsRig) file(t *testing.T, b []byte, mime string) parley.File {
	t.Helper()
	f := parley.File{ID: parley.NewID(), State: parley.FileReady, MIME: mime, Size: int64(len(b))}
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(b)); err == nil {
		f.Width, f.Height = cfg.Width, cfg.Height
	}
	if _, _, err := r.blobs.Put(context.Background(), f.ID, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	return f
}

// settle waits until nothing is queued or running and returns the counts.
func (r *jobsRig) settle(t *testing.T, want func(thumb.Counts) bool) thumb.Counts {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c := r.jobs.Counts()
		if c.Queued == 0 && c.Running == 0 && want(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs did not settle: %+v", c)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// thumbOf returns the stored thumbnail of f, or nil.
func (r *jobsRig) thumbOf(t *testing.T, f parley.File) (parley.Blob, image.Config) {
	t.Helper()
	rc, b, err := r.blobs.Open(context.Background(), parley.ThumbKey(f.ID))
	if parley.ErrorCode(err) == parley.CodeNotFound {
		return parley.Blob{}, image.Config{}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	cfg, format, err := image.DecodeConfig(rc)
	if err != nil || format != "jpeg" {
		t.Fatalf("thumbnail of %s: %v, %q", f.ID, err, format)
	}
	return b, cfg
}

// Each kind of file ends as its own outcome, and only images get a
// thumbnail.
func TestJobsOutcomes(t *testing.T) {
	r := newJobs(t, thumb.JobsOptions{Workers: 2})
	good := r.file(t, encPNG(t, gradient(800, 400, 255)), "image/png")
	text := r.file(t, []byte("hello"), "text/plain; charset=utf-8")
	corrupt := r.file(t, encPNG(t, gradient(800, 400, 255))[:300], "image/png")
	huge := parley.File{ID: parley.NewID(), State: parley.FileReady, MIME: "image/png", Width: 10000, Height: 5000}
	bomb := r.file(t, bombPNG(t, 100000, 100000), "image/png")
	bomb.Width, bomb.Height = 0, 0 // the row says nothing; the header does
	lost := parley.File{ID: parley.NewID(), State: parley.FileReady, MIME: "image/jpeg", Width: 10, Height: 10}
	uploading := good
	uploading.ID, uploading.State = parley.NewID(), parley.FileUploading
	for _, f := range []parley.File{good, text, corrupt, huge, bomb, lost, uploading} {
		if !r.jobs.Enqueue(f) {
			t.Fatalf("%s not queued", f.ID)
		}
	}
	r.run(t)
	got := r.settle(t, func(c thumb.Counts) bool { return c.Done+c.Failed+c.Refused+c.Skipped == 7 })
	want := thumb.Counts{Done: 1, Failed: 2, Refused: 2, Skipped: 2}
	if got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	if _, cfg := r.thumbOf(t, good); cfg.Width != 320 || cfg.Height != 160 {
		t.Errorf("thumbnail %d×%d, want 320×160", cfg.Width, cfg.Height)
	}
	for _, f := range []parley.File{text, corrupt, huge, bomb, lost, uploading} {
		if b, _ := r.thumbOf(t, f); b.Key != "" {
			t.Errorf("%s: a thumbnail was stored", f.ID)
		}
	}
}

// A second job for a file that has its thumbnail writes nothing: the blob
// keeps its modification time, and the count says skipped.
func TestJobsIdempotent(t *testing.T) {
	r := newJobs(t, thumb.JobsOptions{})
	f := r.file(t, encJPEG(t, gradient(1000, 700, 255)), "image/jpeg")
	r.run(t)
	r.jobs.Enqueue(f)
	r.settle(t, func(c thumb.Counts) bool { return c.Done == 1 })
	first, _ := r.thumbOf(t, f)
	time.Sleep(20 * time.Millisecond) // a rewrite would show in ModTime
	r.jobs.Enqueue(f)
	got := r.settle(t, func(c thumb.Counts) bool { return c.Skipped == 1 })
	if got.Done != 1 {
		t.Errorf("counts %+v: made twice", got)
	}
	if again, _ := r.thumbOf(t, f); !again.ModTime.Equal(first.ModTime) || again.Size != first.Size {
		t.Errorf("thumbnail rewritten: %+v then %+v", first, again)
	}
}

// Enqueue never blocks: a file already queued is not queued twice, and a
// full queue drops the file and counts it.
func TestJobsEnqueue(t *testing.T) {
	r := newJobs(t, thumb.JobsOptions{Queue: 2})
	a, b, c := r.file(t, encPNG(t, gradient(50, 50, 255)), "image/png"), r.file(t, encPNG(t, gradient(60, 60, 255)), "image/png"), r.file(t, encPNG(t, gradient(70, 70, 255)), "image/png")
	start := time.Now()
	results := []bool{r.jobs.Enqueue(a), r.jobs.Enqueue(a), r.jobs.Enqueue(b), r.jobs.Enqueue(c)}
	if want := []bool{true, false, true, false}; !equal(results, want) {
		t.Errorf("queued %v, want %v", results, want)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Enqueue took %v", d)
	}
	if got := r.jobs.Counts(); got.Queued != 2 || got.Dropped != 1 {
		t.Errorf("counts %+v, want 2 queued and 1 dropped", got)
	}
	r.run(t)
	got := r.settle(t, func(c thumb.Counts) bool { return c.Done == 2 })
	if got.Failed+got.Refused+got.Skipped != 0 {
		t.Errorf("counts %+v", got)
	}
	// c was dropped: it has no thumbnail until it is enqueued again.
	if b, _ := r.thumbOf(t, c); b.Key != "" {
		t.Error("a dropped file has a thumbnail")
	}
	r.jobs.Enqueue(c)
	r.settle(t, func(c thumb.Counts) bool { return c.Done == 3 })
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Many workers on one small budget: the budget's peak stays within it,
// every thumbnail is made, and a file that alone needs more than the whole
// budget is refused, not left waiting.
func TestJobsBudget(t *testing.T) {
	r := newJobs(t, thumb.JobsOptions{Workers: 6, MemoryBudget: 12 << 20}) // 2 at a time
	var files []parley.File
	for i := range 12 {
		files = append(files, r.file(t, encPNG(t, gradient(400+i, 400, 255)), "image/png"))
	}
	tooBig := r.file(t, encPNG(t, gradient(1800, 1800, 255)), "image/png")
	r.run(t)
	var wg sync.WaitGroup
	for _, f := range append(files, tooBig) {
		wg.Go(func() { r.jobs.Enqueue(f) })
	}
	wg.Wait()
	got := r.settle(t, func(c thumb.Counts) bool { return c.Done+c.Refused == 13 })
	if got.Done != 12 || got.Refused != 1 {
		t.Errorf("counts %+v, want 12 done, 1 refused", got)
	}
	if b := r.jobs.Budget(); b.Peak() > b.Size() || b.InUse() != 0 {
		t.Errorf("budget peak %d, in use %d, size %d", b.Peak(), b.InUse(), b.Size())
	}
}

// Run stops when its context ends and may be run again; two at once is an
// error.
func TestJobsRun(t *testing.T) {
	r := newJobs(t, thumb.JobsOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.jobs.Run(ctx) }()
	time.Sleep(10 * time.Millisecond)
	if err := r.jobs.Run(ctx); err == nil {
		t.Error("a second Run ran")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	f := r.file(t, encPNG(t, gradient(50, 50, 255)), "image/png")
	r.jobs.Enqueue(f)
	r.run(t)
	r.settle(t, func(c thumb.Counts) bool { return c.Done == 1 })
}
