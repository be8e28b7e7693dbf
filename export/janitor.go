package export

import (
	"context"
	"errors"
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
// The job's state and its deletion happen under the worker's lock, so a
// job this process claims meanwhile keeps its files; a job another process
// claims is protected by the age of its temp files and by its state.
func (w *Worker) Sweep(ctx context.Context) {
	expired, err := w.o.Store.ExpireExports(ctx)
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
	var jobs []string
	for _, e := range entries {
		job, _, ok := parseName(e.Name())
		if !ok {
			continue
		}
		if files[job] == nil {
			jobs = append(jobs, job)
		}
		files[job] = append(files[job], e)
	}
	for _, job := range jobs {
		if ctx.Err() != nil {
			return
		}
		w.sweepJob(ctx, job, files[job])
	}
}

func (w *Worker) sweepJob(ctx context.Context, id string, entries []os.DirEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active[id] {
		return
	}
	j, err := w.o.Store.ExportJob(ctx, id)
	switch {
	case errors.Is(err, parley.ErrExportNotFound):
		w.removeAll(id, "job deleted")
		return
	case err != nil:
		if ctx.Err() == nil {
			w.log.Warn("export janitor: reading a job failed", "job", id, "err", err)
		}
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
	w.remove(shardDir(w.o.Dir, id), id, why)
	tmps, _ := filepath.Glob(filepath.Join(w.o.Dir, id+artifactSuffix+tmpInfix+"*"))
	for _, p := range tmps {
		w.remove(p, id, why)
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
