package export

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
)

// One attempt at a job runs as a pipeline, so that reading the store,
// encoding, writing and fsyncing shard files, recording them and
// compressing the artifact overlap instead of waiting on one another:
//
//	fetch ──events──▶ encode ──pieces──▶ place ──▶ shardWriters × (write, fsync, rename) ──▶ record (batches)
//	                                      └──────bytes──────▶ compress (gzip into the artifact's temp file)
//
// fetch reads the shards' events from the store (or a verified shard's
// file) while encode turns the previous ones into bytes, in export order;
// place hands each shard's bytes to the compressor in that order (the
// artifact's bytes do not depend on how the work was scheduled) and its
// file to a writer; a shard's record is stored only once its file is in
// place, fsynced, in batches gathered for up to recordEvery. Channels
// between the stages hold at most pipeDepth shards, so the memory a run
// needs does not grow with the export.
//
// Crash safety: a shard file is renamed into place complete
// and fsynced, and recorded after that, so after a crash at any point every
// recorded shard whose file verifies is kept; a shard written but not yet
// recorded is recomputed from the store and, when its file already holds
// those bytes, kept and recorded without being written again; a shard
// whose file is missing or corrupt is rewritten. The artifact is
// recomputed from the shards in every attempt, so its bytes never depend
// on where an earlier attempt stopped.
const (
	// pipeDepth is how many shards may wait between two stages.
	pipeDepth = 4
	// shardWriters write shard files at once: an fsync mostly waits on
	// the disk, and concurrent ones share the journal's commits.
	shardWriters = 4
	// recordEvery is how long a batch of shard records may gather before
	// it is committed: what a crash may cost is re-reading this much.
	recordEvery = 50 * time.Millisecond
)

// piece is one shard on its way through an attempt.
type piece struct {
	rec      parley.ExportShard // its record: the stored one or the recomputed one
	data     []byte             // its bytes
	recorded bool               // the store holds its record
	onDisk   bool               // its file holds data already
}

// execute runs one attempt of a job: plan, shards and artifact through the
// pipeline, finish.
func (w *Worker) execute(ctx context.Context, owner string, job parley.ExportJob, started func(total int)) error {
	convs, recs, total, err := w.plan(ctx, owner, job.ID, started)
	if err != nil {
		return err
	}
	dir := shardDir(w.o.Dir, job.ID)
	// Without the directory, no earlier attempt left a shard file to find.
	existed, err := w.mkdir(dir)
	if err != nil {
		return err
	}
	art, err := w.newArtifact(job.ID)
	if err != nil {
		return err
	}
	defer art.discard()
	placed, err := w.stream(ctx, owner, job.ID, convs, recs, existed, art)
	if err != nil {
		return err
	}
	if placed != total {
		return &jobError{reason: fmt.Sprintf("export is not deterministic: planned %d shards, wrote %d; create a new export", total, placed)}
	}
	return w.complete(ctx, owner, job, art, dir)
}

// plan reads the job's snapshot, announces its shard total (the lease is
// extended with it, then started runs), and reads the shard records an
// earlier attempt stored, by index.
func (w *Worker) plan(ctx context.Context, owner, job string, started func(total int)) ([]parley.ExportConv, map[int]parley.ExportShard, int, error) {
	st := w.o.Store
	var convs []parley.ExportConv
	err := w.call(ctx, func(ctx context.Context) (err error) {
		convs, err = st.ExportSnapshot(ctx, job)
		return err
	})
	if err != nil {
		return nil, nil, 0, err
	}
	total := parley.ExportShardTotal(convs)
	if err := w.call(ctx, func(ctx context.Context) error {
		return st.ExtendExport(ctx, owner, job, total, w.o.Lease)
	}); err != nil {
		return nil, nil, 0, err
	}
	started(total)
	var recs []parley.ExportShard
	err = w.call(ctx, func(ctx context.Context) (err error) {
		recs, err = st.ExportShards(ctx, job)
		return err
	})
	if err != nil {
		return nil, nil, 0, err
	}
	byIdx := make(map[int]parley.ExportShard, len(recs))
	for _, r := range recs {
		byIdx[r.Index] = r
	}
	return convs, byIdx, total, nil
}

// stream runs the pipeline's stages (fetch, encode, place, compress) until
// every shard is placed and compressed into art, and returns how many
// shards it placed.
func (w *Worker) stream(ctx context.Context, owner, job string, convs []parley.ExportConv, recs map[int]parley.ExportShard, existed bool, art *artifact) (int, error) {
	var (
		p      = newPipe(ctx)
		events = make(chan fetched, pipeDepth)
		pieces = make(chan *piece, pipeDepth)
		plain  = make(chan []byte, pipeDepth)
		placed int
	)
	p.run(func(ctx context.Context) error {
		defer close(events)
		return w.fetch(ctx, job, convs, recs, events)
	})
	p.run(func(ctx context.Context) error {
		defer close(pieces)
		return w.encode(ctx, job, recs, existed, events, pieces)
	})
	p.run(func(ctx context.Context) error { return art.compress(ctx, plain) })
	p.run(func(ctx context.Context) (err error) {
		defer close(plain)
		placed, err = w.place(ctx, owner, job, pieces, plain)
		return err
	})
	err := p.wait() // placed is final only once every stage returned
	return placed, err
}

// complete finishes the artifact and, when its lines attach files, the
// files archive, records the job done, and removes the shards.
func (w *Worker) complete(ctx context.Context, owner string, j parley.ExportJob, art *artifact, dir string) error {
	job := j.ID
	sha, size, err := art.finish()
	if err != nil {
		return err
	}
	var fsha string
	var fsize int64
	if art.files && w.o.Blobs != nil {
		if fsha, fsize, err = w.writeFiles(ctx, job, art.final); err != nil {
			return err
		}
	}
	// An earlier attempt's record is replaced; one that wrote no archive
	// records nothing (most exports attach no file).
	if fsha != "" || j.FilesSHA256 != "" {
		if err := w.call(ctx, func(ctx context.Context) error {
			return w.o.Store.RecordExportFiles(ctx, owner, job, fsha, fsize)
		}); err != nil {
			return err
		}
	}
	if fsha == "" {
		// An earlier attempt's archive, if any, is no part of this job.
		if err := os.Remove(FilesPath(w.o.Dir, job)); err != nil && !os.IsNotExist(err) {
			w.log.Warn("export: removing a stale files archive failed (the janitor removes it with the job)", "job", job, "err", err)
		}
	}
	if err := w.call(ctx, func(ctx context.Context) error {
		return w.o.Store.FinishExport(ctx, owner, job, sha, size, w.cfg().ExportKeep())
	}); err != nil {
		return err
	}
	w.stats.artifacts.Add(1)
	// The artifact is verified and recorded: the shards are only another
	// copy of the user's data now.
	if err := os.RemoveAll(dir); err != nil {
		w.log.Warn("export: removing shards failed (the janitor retries)", "job", job, "err", err)
	}
	return nil
}

// pipe runs the stages of an attempt: the first error cancels the context
// of all of them, and wait returns it once every stage has returned.
type pipe struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

func newPipe(ctx context.Context) *pipe {
	p := &pipe{}
	p.ctx, p.cancel = context.WithCancelCause(ctx)
	return p
}

func (p *pipe) run(fn func(ctx context.Context) error) {
	p.wg.Go(func() {
		if err := fn(p.ctx); err != nil {
			p.fail(err)
		}
	})
}

func (p *pipe) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.cancel(err)
}

func (p *pipe) wait() error {
	p.wg.Wait()
	p.cancel(nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// fetched is one shard as fetch found it: a recorded shard whose file
// verified (p), or the events to encode.
type fetched struct {
	idx   int
	conv  string
	after int64
	p     *piece
	evs   []parley.Event
}

// fetch reads the job's shards in export order: a recorded shard whose
// file still holds its bytes is read back; any other's events are read
// from the store, the next page while encode works on the previous one.
func (w *Worker) fetch(ctx context.Context, job string, convs []parley.ExportConv, recs map[int]parley.ExportShard, out chan<- fetched) error {
	idx := 0
	for _, c := range convs {
		var after int64
		for left := c.Messages; left > 0; idx++ {
			want := int(min(left, parley.ExportShardSize))
			f, err := w.fetchShard(ctx, job, idx, c.Conv, after, want, recs)
			if err != nil {
				return err
			}
			select {
			case out <- f:
			case <-ctx.Done():
				return ctx.Err()
			}
			if f.p != nil {
				after = f.p.rec.Last
			} else {
				after = f.evs[len(f.evs)-1].Seq
			}
			left -= int64(want)
		}
	}
	return nil
}

// fetchShard fetches shard idx: want events of conv after seq after.
func (w *Worker) fetchShard(ctx context.Context, job string, idx int, conv string, after int64, want int, recs map[int]parley.ExportShard) (fetched, error) {
	f := fetched{idx: idx, conv: conv, after: after}
	if rec, ok := recs[idx]; ok && rec.Conv == conv && rec.After == after && rec.Count == want {
		if data, err := os.ReadFile(shardPath(w.o.Dir, job, idx)); err == nil && sum(data) == rec.SHA256 {
			f.p = &piece{rec: rec, data: data, recorded: true, onDisk: true}
			return f, nil
		}
	}
	err := w.call(ctx, func(ctx context.Context) (err error) {
		f.evs, err = w.o.Store.ExportEvents(ctx, job, conv, after, parley.ExportShardSize)
		return err
	})
	if err != nil {
		return f, err
	}
	if len(f.evs) > want {
		f.evs = f.evs[:want]
	}
	if len(f.evs) != want {
		return f, &jobError{reason: fmt.Sprintf(
			"export is not deterministic: shard %d (conversation %s after seq %d) has %d events, the snapshot counted %d; create a new export",
			idx, conv, after, len(f.evs), want)}
	}
	return f, nil
}

// encode turns fetched events into shards: bytes that differ from the
// shard's record fail the job (the export would not be deterministic).
// probe says whether an unrecorded shard's file may exist.
func (w *Worker) encode(ctx context.Context, job string, recs map[int]parley.ExportShard, probe bool, in <-chan fetched, out chan<- *piece) error {
	for {
		var f fetched
		select {
		case next, ok := <-in:
			if !ok {
				return nil
			}
			f = next
		case <-ctx.Done():
			return ctx.Err()
		}
		p := f.p
		if p == nil {
			var err error
			if p, err = w.encodeShard(job, f, recs, probe); err != nil {
				return err
			}
		}
		select {
		case out <- p:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (w *Worker) encodeShard(job string, f fetched, recs map[int]parley.ExportShard, probe bool) (*piece, error) {
	data, err := encodeShard(f.evs)
	if err != nil {
		return nil, err
	}
	now := parley.ExportShard{
		Job: job, Index: f.idx, Conv: f.conv, After: f.after, Last: f.evs[len(f.evs)-1].Seq,
		Count: len(f.evs), SHA256: sum(data),
	}
	rec, recorded := recs[f.idx]
	if recorded && rec != now {
		return nil, &jobError{reason: fmt.Sprintf(
			"export is not deterministic: shard %d recomputed to sha256 %s (%d events after seq %d), but %s (%d events after seq %d) was recorded; create a new export",
			f.idx, now.SHA256, now.Count, now.After, rec.SHA256, rec.Count, rec.After)}
	}
	p := &piece{rec: now, data: data, recorded: recorded}
	if !recorded && probe {
		// Written by an attempt that ended before recording it: files are
		// renamed into place complete, so one that holds these bytes is
		// kept, and only recorded.
		if old, err := os.ReadFile(shardPath(w.o.Dir, job, f.idx)); err == nil && bytes.Equal(old, data) {
			p.onDisk = true
		}
	}
	return p, nil
}

// place puts the shards from in in place and passes their bytes on to
// plain, in order, and returns how many it placed. Files are written by
// shardWriters goroutines and recorded in batches (record) once written.
//
// In lab runs (export.after_shard armed, or a test's afterShard hook) each
// shard is written, recorded and announced before the next one is placed,
// so that "after shard N" is one exact state: N shards recorded and no
// other written. The reader and the compressor overlap in both.
func (w *Worker) place(ctx context.Context, owner, job string, in <-chan *piece, plain chan<- []byte) (int, error) {
	stepwise := w.afterShard != nil || fault.Armed(fault.ExportAfterShard)
	p := newPipe(ctx)
	records := make(chan parley.ExportShard, parley.MaxShardBatch)
	if !stepwise {
		p.run(func(ctx context.Context) error { return w.record(ctx, owner, records) })
	}
	var writers sync.WaitGroup
	slots := make(chan struct{}, shardWriters)
	n, err := func() (int, error) {
		n := 0
		for {
			if err := p.ctx.Err(); err != nil {
				return n, err // the hook of a lab run may have stopped it
			}
			var pc *piece
			select {
			case next, ok := <-in:
				if !ok {
					return n, nil
				}
				pc = next
			case <-p.ctx.Done():
				return n, p.ctx.Err()
			}
			select {
			case plain <- pc.data:
			case <-p.ctx.Done():
				return n, p.ctx.Err()
			}
			n++
			if pc.onDisk {
				w.stats.skipped.Add(1)
			}
			if stepwise {
				if err := w.placeNow(p.ctx, owner, job, pc); err != nil {
					return n, err
				}
				continue
			}
			if pc.onDisk && pc.recorded {
				continue
			}
			select {
			case slots <- struct{}{}:
			case <-p.ctx.Done():
				return n, p.ctx.Err()
			}
			writers.Go(func() {
				defer func() { <-slots }()
				if err := w.put(job, pc); err != nil {
					p.fail(err)
					return
				}
				if !pc.recorded {
					select {
					case records <- pc.rec:
					case <-p.ctx.Done():
					}
				}
			})
		}
	}()
	if err != nil {
		p.fail(err)
	}
	writers.Wait()
	close(records)
	if err := p.wait(); err != nil {
		return n, err
	}
	return n, ctx.Err()
}

// placeNow places one shard in a lab run: written, recorded, announced.
func (w *Worker) placeNow(ctx context.Context, owner, job string, p *piece) error {
	if err := w.put(job, p); err != nil {
		return err
	}
	if !p.recorded {
		if err := w.call(ctx, func(ctx context.Context) error { return w.o.Store.RecordShard(ctx, owner, p.rec) }); err != nil {
			return err
		}
	}
	wrote := !p.onDisk
	if wrote {
		if err := fault.Hit(fault.ExportAfterShard); err != nil {
			return &writeError{op: "after shard", path: shardPath(w.o.Dir, job, p.rec.Index), err: err}
		}
	}
	if w.afterShard != nil {
		w.afterShard(job, p.rec.Index, wrote)
	}
	return nil
}

// put writes a shard's file unless it holds its bytes already.
func (w *Worker) put(job string, p *piece) error {
	if p.onDisk {
		return nil
	}
	path := shardPath(w.o.Dir, job, p.rec.Index)
	if err := writeFile(filepath.Dir(path), filepath.Base(path), p.data); err != nil {
		return err
	}
	if p.recorded {
		w.stats.rewritten.Add(1)
		w.log.Warn("export: shard file missing or corrupt; rewritten", "job", job, "shard", p.rec.Index)
	}
	w.stats.written.Add(1)
	return nil
}

// record stores the records of written shards from in, in batches: one
// gathers for up to recordEvery (or MaxShardBatch records), then commits
// in one call. It returns once in is closed and everything is committed.
func (w *Worker) record(ctx context.Context, owner string, in <-chan parley.ExportShard) error {
	batch := make([]parley.ExportShard, 0, parley.MaxShardBatch)
	for {
		select {
		case s, ok := <-in:
			if !ok {
				return nil
			}
			batch = append(batch[:0], s)
		case <-ctx.Done():
			return ctx.Err()
		}
		closed := false
		t := time.NewTimer(recordEvery)
	gather:
		for len(batch) < parley.MaxShardBatch {
			select {
			case s, ok := <-in:
				if !ok {
					closed = true
					break gather
				}
				batch = append(batch, s)
			case <-t.C:
				break gather
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		t.Stop()
		if err := w.call(ctx, func(ctx context.Context) error { return w.o.Store.RecordShard(ctx, owner, batch...) }); err != nil {
			return err
		}
		if closed {
			return nil
		}
	}
}

// artifact is a job's artifact being written: the shards' bytes, in
// order, through gzip into a temp file, hashed on the way.
type artifact struct {
	output
	bw    *bufio.Writer
	zw    *gzip.Writer
	files bool // a line lists attachments (attachmentsKey)
}

func (w *Worker) newArtifact(job string) (*artifact, error) {
	final := ArtifactPath(w.o.Dir, job)
	tmp, err := os.CreateTemp(w.o.Dir, job+artifactSuffix+tmpInfix+"*")
	if err != nil {
		return nil, wrapWrite("create", final, err)
	}
	a := &artifact{output: output{final: final, tmp: tmp, h: sha256.New()}}
	a.bw = bufio.NewWriterSize(io.MultiWriter(tmp, a.h), 64<<10)
	a.zw, err = gzip.NewWriterLevel(&counter{w: a.bw, n: &a.size}, gzipLevel)
	if err != nil {
		a.discard()
		return nil, err
	}
	return a, nil
}

// compress feeds the shards' bytes from in to the artifact until in is
// closed.
func (a *artifact) compress(ctx context.Context, in <-chan []byte) error {
	for {
		select {
		case b, ok := <-in:
			if !ok {
				return nil
			}
			if _, err := a.zw.Write(b); err != nil {
				return wrapWrite("write", a.final, err)
			}
			a.files = a.files || bytes.Contains(b, attachmentsKey)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// finish completes the artifact, fsyncs it, renames it into place, fsyncs
// the directory, and returns its sha256 and size, verified by reading it
// back.
func (a *artifact) finish() (string, int64, error) {
	if err := a.zw.Close(); err != nil {
		return "", 0, wrapWrite("write", a.final, err)
	}
	if err := a.bw.Flush(); err != nil {
		return "", 0, wrapWrite("write", a.final, err)
	}
	if err := faultWrite(a.final); err != nil {
		return "", 0, err
	}
	return a.install()
}

// output is a file being written under a temp name and installed at
// final once complete: the artifact and the files archive.
type output struct {
	final string
	tmp   *os.File // nil once renamed into place
	h     hash.Hash
	size  int64
}

// install fsyncs the complete temp file, renames it into place, fsyncs
// the directory, and returns its sha256 and size, verified by reading it
// back (a file that does not read back as written is removed).
func (o *output) install() (string, int64, error) {
	if err := o.tmp.Sync(); err != nil {
		return "", 0, wrapWrite("fsync", o.final, err)
	}
	if err := o.tmp.Close(); err != nil {
		return "", 0, wrapWrite("close", o.final, err)
	}
	if err := os.Rename(o.tmp.Name(), o.final); err != nil {
		return "", 0, wrapWrite("rename", o.final, err)
	}
	o.tmp = nil
	if err := syncDir(filepath.Dir(o.final)); err != nil {
		os.Remove(o.final)
		return "", 0, err
	}
	sha := hex.EncodeToString(o.h.Sum(nil))
	got, n, err := fileSum(o.final)
	if err != nil || got != sha || n != o.size {
		os.Remove(o.final)
		if err == nil {
			err = fmt.Errorf("read back sha256 %s (%d bytes), wrote %s (%d bytes)", got, n, sha, o.size)
		}
		return "", 0, wrapWrite("verify", o.final, err)
	}
	return sha, o.size, nil
}

// discard removes the temp file of an output that was not finished.
func (o *output) discard() {
	if o.tmp != nil {
		o.tmp.Close()
		os.Remove(o.tmp.Name())
		o.tmp = nil
	}
}
