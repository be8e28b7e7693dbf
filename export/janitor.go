package export

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/parleychat/parley"
)

// janitor sweeps at start and every Options.Janitor until ctx ends.
func (w *Worker) janitor(ctx context.Context) {
	t := time.NewTicker(w.o.Janitor)
	defer t.Stop()
	for {
		w.Sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep expires the done jobs whose time is up and deletes the files
// nothing needs any more:
//   - every file of a job that no longer exists (its owner's account was
//     deleted) or is revoked, expired or failed;
//   - the shards of a done job (the artifact holds its bytes);
//   - temp files of jobs that are not running (a crash left them), once
//     they are older than a lease.
//
// It reads the states of every job that has files in one store call, and
// never holds the worker's lock across a store call or a file operation
// (Kick, and so POST /exports, must not wait on the disk or the database).
// That is safe because a job's state only moves forward: revoked, expired,
// failed for good and deleted are final, so their files may go whatever
// happens meanwhile; a done job never needs its shards again; and for a
// queued job, which this or another process may claim right after the
// read, only temp files older than a lease go, which a running job does
// not have. A job this process is running is skipped.
func (w *Worker) Sweep(ctx context.Context) {
	sctx, cancel := w.storeContext(ctx)
	expired, err := w.o.Store.ExpireExports(sctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("export janitor: expiring jobs failed", "err", err)
		}
		return
	}
	for _, id := range expired {
		w.removeAll(id, "expired")
	}
	entries, err := os.ReadDir(w.o.Dir)
	if err != nil {
		w.log.Warn("export janitor: reading the export directory failed", "err", err)
		return
	}
	files := map[string][]os.DirEntry{}
	var ids []string
	for _, e := range entries {
		job, _, ok := parseName(e.Name())
		if !ok {
			continue
		}
		if files[job] == nil {
			ids = append(ids, job)
		}
		files[job] = append(files[job], e)
	}
	if len(ids) == 0 {
		return
	}
	sctx, cancel = w.storeContext(ctx)
	jobs, err := w.o.Store.ExportJobs(sctx, ids)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("export janitor: reading the jobs failed", "jobs", len(ids), "err", err)
		}
		return
	}
	byID := make(map[string]parley.ExportJob, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		j, found := byID[id]
		w.sweepJob(id, j, found, files[id])
	}
}

// isActive reports whether this process is running job id.
func (w *Worker) isActive(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active[id]
}

// sweepJob deletes what job id (found: j) no longer needs of its files.
func (w *Worker) sweepJob(id string, j parley.ExportJob, found bool, entries []os.DirEntry) {
	if w.isActive(id) {
		return
	}
	if !found {
		// The job had files, so it existed: its owner's account was deleted.
		w.removeAll(id, "job deleted")
		return
	}
	switch j.State {
	case parley.ExportRevoked, parley.ExportExpired, parley.ExportFailed:
		w.removeAll(id, string(j.State))
		return
	case parley.ExportRunning:
		return // its worker (maybe in another process) owns the files
	}
	stale := time.Now().Add(-w.o.Lease)
	for _, e := range entries {
		path := filepath.Join(w.o.Dir, e.Name())
		_, kind, _ := parseName(e.Name())
		switch {
		case kind == kindShards && j.State == parley.ExportDone:
			w.remove(path, id, "shards of a done job")
		case kind == kindShards:
			// A queued job resumes from these; only temp files go.
			sub, err := os.ReadDir(path)
			if err != nil {
				continue
			}
			for _, s := range sub {
				if strings.Contains(s.Name(), tmpInfix) && olderThan(s, stale) {
					w.remove(filepath.Join(path, s.Name()), id, "stale temp file")
				}
			}
		case kind == kindTemp && olderThan(e, stale):
			w.remove(path, id, "stale temp file")
		}
	}
}

func olderThan(e os.DirEntry, t time.Time) bool {
	info, err := e.Info()
	return err == nil && info.ModTime().Before(t)
}

// removeAll deletes every file of a job.
func (w *Worker) removeAll(id, why string) {
	w.remove(ArtifactPath(w.o.Dir, id), id, why)
	w.remove(FilesPath(w.o.Dir, id), id, why)
	w.remove(shardDir(w.o.Dir, id), id, why)
	for _, suffix := range []string{artifactSuffix, filesSuffix} {
		tmps, _ := filepath.Glob(filepath.Join(w.o.Dir, id+suffix+tmpInfix+"*"))
		for _, p := range tmps {
			w.remove(p, id, why)
		}
	}
}

func (w *Worker) remove(path, id, why string) {
	if _, err := os.Lstat(path); err != nil {
		return
	}
	if err := os.RemoveAll(path); err != nil {
		w.log.Warn("export janitor: delete failed", "job", id, "path", path, "err", err)
		return
	}
	w.log.Info("export janitor: deleted", "job", id, "path", filepath.Base(path), "why", why)
}
