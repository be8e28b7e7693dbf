package export

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/fault"
)

// WorkerStore is what a Worker needs of the store (parley.Exports, whose
// doc comments give the contract): the calls that run a job under its
// lease, and the two reads of the janitor.
type WorkerStore interface {
	ClaimExport(ctx context.Context, owner string, lease time.Duration) (job parley.ExportJob, ok bool, err error)
	ExtendExport(ctx context.Context, owner, id string, total int, lease time.Duration) error
	ExportSnapshot(ctx context.Context, id string) ([]parley.ExportConv, error)
	ExportShards(ctx context.Context, id string) ([]parley.ExportShard, error)
	ExportEvents(ctx context.Context, id, conv string, after int64, limit int) ([]parley.Event, error)
	RecordShard(ctx context.Context, owner string, shards ...parley.ExportShard) error
	RecordExportFiles(ctx context.Context, owner, id, sha256 string, bytes int64) error
	FinishExport(ctx context.Context, owner, id, sha256 string, bytes int64, keep time.Duration) error
	FailExport(ctx context.Context, owner, id, reason string, retryAfter time.Duration) error

	ExpireExports(ctx context.Context) ([]string, error)
	ExportJobs(ctx context.Context, ids []string) ([]parley.ExportJob, error)
}

// Options configures a Worker.
type Options struct {
	Store   WorkerStore
	Dir     string                // where shards and artifacts live (created if missing)
	Log     *slog.Logger          // nil: discard
	Config  func() *config.Config // retries, backoff, keep, timeouts.store; nil: config.Default()
	Workers int                   // concurrent jobs, default 2
	Lease   time.Duration         // default 30s; renewed every Lease/3 while a job runs
	Poll    time.Duration         // idle poll interval, default 500ms
	Janitor time.Duration         // expiry/cleanup sweep interval, default 1m
	Owner   string                // lease owner id, default hostname:pid:random
	// Blobs holds the bytes of uploaded files: a job whose lines attach
	// files also writes a files archive (FilesPath) from it. Nil: no
	// archive (the lines still list the attachments).
	Blobs parley.BlobStore
	// Attempt, if not nil, hears how each attempt ended and how long it
	// ran (metrics.ExportAttempt): "done", "retry", "failed", "lost"
	// (revoked, rolled back, taken over or deleted) or "stopped" (this
	// process stopped; the job was handed back).
	Attempt func(outcome string, d time.Duration)
}

// Defaults of Options.
const (
	DefaultWorkers = 2
	DefaultLease   = 30 * time.Second
	DefaultPoll    = 500 * time.Millisecond
	DefaultJanitor = time.Minute
	// MaxBackoff caps the pause before a failed job's next attempt.
	MaxBackoff = 10 * time.Minute
	// gzipLevel is fixed: the artifact's bytes (and so its ETag) depend on
	// it. The default level: level 9 costs 40% more CPU for a file 1%
	// smaller (docs/benchmarks.md).
	gzipLevel = gzip.DefaultCompression
)

// Worker runs export jobs: a pool of goroutines that claim jobs from the
// store with a lease, write their shards and artifacts, and a janitor that
// expires artifacts and deletes the files nothing needs any more.
type Worker struct {
	o   Options
	log *slog.Logger
	cfg func() *config.Config

	mu     sync.Mutex
	wake   chan struct{}   // closed and replaced by Kick
	active map[string]bool // jobs this process is running

	stats struct{ written, skipped, rewritten, artifacts atomic.Int64 }

	// afterShard, when set (tests), is called after each shard of a run
	// is in place: written says whether this run wrote it.
	afterShard func(job string, idx int, written bool)
}

// Stats counts what a Worker did since it was made.
type Stats struct {
	ShardsWritten   int64 // shards written (new or rewritten)
	ShardsSkipped   int64 // shards found present and verified
	ShardsRewritten int64 // shards whose file was missing or corrupt
	Artifacts       int64 // artifacts finished
}

// NewWorker returns a Worker; Run starts it.
func NewWorker(o Options) *Worker {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Janitor <= 0 {
		o.Janitor = DefaultJanitor
	}
	if o.Owner == "" {
		host, _ := os.Hostname()
		o.Owner = host + ":" + strconv.Itoa(os.Getpid()) + ":" + rand.Text()[:8]
	}
	w := &Worker{o: o, log: o.Log, cfg: o.Config, wake: make(chan struct{}), active: map[string]bool{}}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.cfg == nil {
		w.cfg = config.Default
	}
	return w
}

// Running is how many jobs this process is running now.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.active)
}

func (w *Worker) attempt(outcome string, start time.Time) {
	if w.o.Attempt != nil {
		w.o.Attempt(outcome, time.Since(start))
	}
}

// Stats returns the Worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{
		ShardsWritten:   w.stats.written.Load(),
		ShardsSkipped:   w.stats.skipped.Load(),
		ShardsRewritten: w.stats.rewritten.Load(),
		Artifacts:       w.stats.artifacts.Load(),
	}
}

// storeContext bounds one store call of the worker and its janitor by
// timeouts.store: a store that stops answering fails the call (and the
// attempt, retried with backoff) instead of hanging a worker or the janitor.
func (w *Worker) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.cfg().StoreTimeout())
}

// Kick wakes idle workers now (after a job was created). It takes only the
// worker's lock, which nobody holds across a store call or file I/O.
func (w *Worker) Kick() {
	w.mu.Lock()
	close(w.wake)
	w.wake = make(chan struct{})
	w.mu.Unlock()
}

func (w *Worker) woken() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wake
}

// Run runs the pool and the janitor until ctx ends, and returns when every
// goroutine it started has stopped. A job running at that moment is handed
// back to the queue (it resumes from its last verified shard).
func (w *Worker) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.o.Dir, 0o700); err != nil {
		return fmt.Errorf("export dir: %w", err)
	}
	var wg sync.WaitGroup
	for i := range w.o.Workers {
		// Each goroutine is its own lease owner, so a job taken over by a
		// sibling is lost to the first.
		owner := w.o.Owner + "/" + strconv.Itoa(i)
		wg.Go(func() { w.loop(ctx, owner) })
	}
	wg.Go(func() { w.janitor(ctx) })
	wg.Wait()
	return nil
}

func (w *Worker) loop(ctx context.Context, owner string) {
	for ctx.Err() == nil {
		wake := w.woken()
		sctx, cancel := w.storeContext(ctx)
		job, ok, err := w.o.Store.ClaimExport(sctx, owner, w.o.Lease)
		cancel()
		if err != nil && ctx.Err() == nil {
			w.log.Warn("export: claim failed", "err", err)
		}
		if ok {
			w.runJob(ctx, owner, job)
			continue
		}
		t := time.NewTimer(w.o.Poll)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// jobError is an outcome that ends a job for good.
type jobError struct{ reason string }

func (e *jobError) Error() string { return e.reason }

// runJob runs one attempt of a claimed job, with its lease renewed while
// it runs, and records how it ended.
func (w *Worker) runJob(ctx context.Context, owner string, job parley.ExportJob) {
	w.mu.Lock()
	w.active[job.ID] = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.active, job.ID)
		w.mu.Unlock()
	}()
	log := w.log.With("job", job.ID, "user", job.User, "attempt", job.Attempts)
	cfg := w.cfg()
	maxAttempts := cfg.ExportRetries() + 1
	if job.Attempts > maxAttempts {
		w.exhausted(ctx, log, owner, job, maxAttempts)
		return
	}
	log.Info("export: running", "done", job.Done, "total", job.Total)
	start := time.Now()

	jctx, cancel := context.WithCancelCause(ctx)
	var renew sync.WaitGroup
	defer renew.Wait()
	defer cancel(nil) // stop the renewal before waiting for it
	err := w.execute(jctx, owner, job, func(total int) {
		renew.Go(func() { w.renew(jctx, cancel, log, owner, job.ID, total) })
	})
	if cause := context.Cause(jctx); err != nil && errors.Is(cause, parley.ErrLeaseLost) {
		err = cause
	}
	w.settle(ctx, log, owner, job, err, attemptRun{start: start, max: maxAttempts, backoff: cfg.ExportBackoff()})
}

// exhausted fails a job claimed once more than its attempts allow. Crash
// takeovers count: a job that kills its worker every time must not be
// retried forever.
func (w *Worker) exhausted(ctx context.Context, log *slog.Logger, owner string, job parley.ExportJob, maxAttempts int) {
	reason := fmt.Sprintf("export failed: %d attempts did not finish it (the limit is %d)", job.Attempts-1, maxAttempts)
	if job.Error != "" {
		reason += "; last error: " + job.Error
	}
	log.Error("export: giving up", "reason", reason)
	w.fail(ctx, log, owner, job.ID, reason, 0)
	w.attempt("failed", time.Now())
}

// attemptRun is what settle needs of an attempt: when it started, and the
// retry policy in force when it did.
type attemptRun struct {
	start   time.Time
	max     int           // attempts allowed
	backoff time.Duration // the pause before the second attempt
}

// settle records how an attempt that returned err ended: done, lost,
// handed back, retried later, or failed for good.
func (w *Worker) settle(ctx context.Context, log *slog.Logger, owner string, job parley.ExportJob, err error, a attemptRun) {
	var je *jobError
	switch {
	case err == nil:
		log.Info("export: done", "took", time.Since(a.start).Round(time.Millisecond))
		w.attempt("done", a.start)
	case errors.Is(err, parley.ErrLeaseLost):
		// Revoked, failed by a rollback, or taken over: someone else
		// decides now.
		log.Info("export: lease lost; stopping")
		w.attempt("lost", a.start)
	case errors.Is(err, parley.ErrExportNotFound):
		log.Info("export: job deleted; stopping")
		w.attempt("lost", a.start)
	case ctx.Err() != nil:
		// Hand the job back so another worker (or this one, restarted)
		// resumes it without waiting for the lease to run out.
		log.Info("export: worker stopping; job handed back")
		w.fail(context.WithoutCancel(ctx), log, owner, job.ID,
			"the export worker stopped; the job resumes from its last verified shard", time.Millisecond)
		w.attempt("stopped", a.start)
	case errors.As(err, &je):
		log.Error("export: failed for good", "reason", je.reason)
		w.fail(ctx, log, owner, job.ID, je.reason, 0)
		w.attempt("failed", a.start)
	case retryable(err):
		w.retry(ctx, log, owner, job, err, a)
	default:
		reason := "export failed: " + parley.ErrorMessage(err)
		log.Error("export: failed for good", "err", err)
		w.fail(ctx, log, owner, job.ID, reason, 0)
		w.attempt("failed", a.start)
	}
}

// retry hands back a job whose attempt failed for a passing reason (a
// write, a store that did not answer) with a backoff, or fails it for good
// after its last attempt.
func (w *Worker) retry(ctx context.Context, log *slog.Logger, owner string, job parley.ExportJob, err error, a attemptRun) {
	what := "writing the export failed"
	if errors.Is(err, syscall.ENOSPC) {
		what = "the disk is full"
	} else if _, ok := errors.AsType[*blobError](err); ok {
		what = "reading the files failed"
	} else if _, ok := errors.AsType[*writeError](err); !ok {
		what = "the database is unavailable"
	}
	if job.Attempts >= a.max {
		reason := fmt.Sprintf("export failed: %s (attempt %d of %d); giving up", what, job.Attempts, a.max)
		log.Error("export: failed for good", "reason", reason, "err", err)
		w.fail(ctx, log, owner, job.ID, reason, 0)
		w.attempt("failed", a.start)
		return
	}
	wait := backoff(a.backoff, job.Attempts)
	reason := fmt.Sprintf("%s (attempt %d of %d); retrying in %s", what, job.Attempts, a.max, wait)
	log.Warn("export: attempt failed; retrying", "reason", reason, "err", err)
	w.fail(ctx, log, owner, job.ID, reason, wait)
	w.attempt("retry", a.start)
}

// retryable reports whether a failed attempt may be retried: a write
// failure or a store that did not answer.
func retryable(err error) bool {
	if _, ok := errors.AsType[*writeError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*blobError](err); ok {
		return true
	}
	return parley.ErrorCode(err) == parley.CodeUnavailable
}

// backoff is base times 2^(attempt-1), capped at MaxBackoff and at least
// a millisecond (a zero retryAfter would fail the job for good).
func backoff(base time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < MaxBackoff; i++ {
		d *= 2
	}
	return max(min(d, MaxBackoff), time.Millisecond)
}

func (w *Worker) fail(ctx context.Context, log *slog.Logger, owner, id, reason string, retryAfter time.Duration) {
	ctx, cancel := w.storeContext(ctx)
	defer cancel()
	if err := w.o.Store.FailExport(ctx, owner, id, reason, retryAfter); err != nil && !errors.Is(err, parley.ErrLeaseLost) {
		// The lease runs out and another attempt takes the job over.
		log.Warn("export: recording the failure failed", "err", err)
	}
}

// renew extends the lease every Lease/3 until ctx ends; a lost lease
// cancels the job.
func (w *Worker) renew(ctx context.Context, cancel context.CancelCauseFunc, log *slog.Logger, owner, id string, total int) {
	t := time.NewTicker(w.o.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, done := w.storeContext(ctx)
		err := w.o.Store.ExtendExport(sctx, owner, id, total, w.o.Lease)
		done()
		switch {
		case errors.Is(err, parley.ErrLeaseLost), errors.Is(err, parley.ErrExportNotFound):
			cancel(err)
			return
		case err != nil && ctx.Err() == nil:
			log.Warn("export: lease renewal failed", "err", err)
		}
	}
}

// call runs one store call under storeContext.
func (w *Worker) call(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := w.storeContext(ctx)
	defer cancel()
	return fn(ctx)
}

// mkdir makes a job's shard directory and reports whether it existed.
func (w *Worker) mkdir(dir string) (existed bool, err error) {
	if _, err := os.Stat(dir); err == nil {
		return true, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, wrapWrite("mkdir", dir, err)
	}
	return false, syncDir(filepath.Dir(dir))
}

// faultWrite is the export.write fault point: armed, a write fails as on
// a full disk.
func faultWrite(path string) error {
	if err := fault.Hit(fault.ExportWrite); err != nil {
		return &writeError{op: "write", path: path, err: fmt.Errorf("%w (%v)", syscall.ENOSPC, err)}
	}
	return nil
}

// writeFile writes name in dir atomically: a temp file, fsynced, renamed.
// On failure nothing is left. The directory is not fsynced per shard (a
// third of a shard's cost): a rename lost in a crash only loses a shard
// that the next attempt finds missing and writes again with the same
// bytes, and the artifact's own rename is made durable before the job is
// marked done.
func writeFile(dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	if err := faultWrite(path); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, name+tmpInfix+"*")
	if err != nil {
		return wrapWrite("create", path, err)
	}
	if err := finishTemp(tmp, path, func(f io.Writer) error {
		_, err := f.Write(data)
		return err
	}); err != nil {
		return err
	}
	return nil
}

// finishTemp fills tmp with fill, fsyncs and closes it and renames it to
// path; on any failure it removes tmp.
func finishTemp(tmp *os.File, path string, fill func(io.Writer) error) (err error) {
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return wrapWrite("write", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return wrapWrite("fsync", path, err)
	}
	if err := tmp.Close(); err != nil {
		return wrapWrite("close", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return wrapWrite("rename", path, err)
	}
	return nil
}

type counter struct {
	w io.Writer
	n *int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	*c.n += int64(n)
	return n, err
}
