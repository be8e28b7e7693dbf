package main

import (
	"context"
	"flag"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/metrics"
)

// Defaults of the file collector (docs/operations.md, "File collector").
const (
	DefaultCollectEvery = time.Hour
	DefaultFilesGrace   = 24 * time.Hour
	DefaultUploadExpiry = 24 * time.Hour
	// collectFirst is how long after the start the first pass waits
	// (at most --files-collect-every): a restart loop does not walk the
	// blobs every time.
	collectFirst = time.Minute
)

// collectFlags are serve's file collector flags, and what its last pass
// found, for /metrics.
type collectFlags struct {
	every, grace, expiry time.Duration

	collected, orphans, failures atomic.Int64 // since the start
	blobs, bytes, lost           atomic.Int64 // of the last pass that ended
}

func (f *collectFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.every, "files-collect-every", DefaultCollectEvery, "how often the file collector runs a pass (unfinished uploads, unlinked files, orphan blobs, lost files); 0 turns it off on this gateway (one gateway of a cluster is enough; several are safe)")
	fs.DurationVar(&f.grace, "files-grace", DefaultFilesGrace, "how long a finished file no message attaches is kept (to be attached) before the collector deletes it; also the age past which a blob without a file is deleted")
	fs.DurationVar(&f.expiry, "upload-expiry", DefaultUploadExpiry, "how long an upload may stay unfinished (and resumable) before the collector deletes it")
}

func (f *collectFlags) check() error {
	if f.every != 0 && f.every < time.Second {
		return usagef("--files-collect-every %s: want 0 (off) or at least 1s", f.every)
	}
	if f.grace < time.Minute {
		return usagef("--files-grace %s: want at least 1m (a file is attached after its upload)", f.grace)
	}
	if f.expiry < time.Minute {
		return usagef("--upload-expiry %s: want at least 1m (an upload takes a while)", f.expiry)
	}
	return nil
}

// registerMetrics exposes the collector on /metrics.
func (f *collectFlags) registerMetrics(m *metrics.Metrics) {
	m.CounterFunc("parley_files_collected_total", "Files the collector deleted (uploads not finished within --upload-expiry, files no message attached within --files-grace), with their blobs.",
		func() float64 { return float64(f.collected.Load()) })
	m.CounterFunc("parley_files_orphan_blobs_total", "Blobs the collector deleted because no file owned them (older than --files-grace).",
		func() float64 { return float64(f.orphans.Load()) })
	m.CounterFunc("parley_files_collect_failures_total", "File collector passes that stopped on an error (logged; the next pass starts over).",
		func() float64 { return float64(f.failures.Load()) })
	m.GaugeFunc("parley_files_blobs", "Blobs in the blob store (thumbnails included), as the last finished collector pass counted them.",
		func() float64 { return float64(f.blobs.Load()) })
	m.GaugeFunc("parley_files_stored_bytes", "Bytes of those blobs.", func() float64 { return float64(f.bytes.Load()) })
	m.GaugeFunc("parley_files_lost", "Ready files whose blob is missing or of the wrong size, found by the last finished collector pass (see the log).",
		func() float64 { return float64(f.lost.Load()) })
}

// run runs a collector pass every f.every until ctx ends (at once when it
// is off or the server has no blob store).
func (f *collectFlags) run(ctx context.Context, svc *app.Service, log *slog.Logger) {
	if f.every <= 0 || svc == nil {
		log.Info("file collector off on this gateway")
		return
	}
	wait := min(collectFirst, f.every)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = f.every
		start := time.Now()
		res, err := svc.CollectFiles(ctx, start, f.grace, f.expiry)
		f.collected.Add(int64(res.Collected))
		f.orphans.Add(int64(res.Orphans))
		if err != nil {
			if ctx.Err() == nil {
				f.failures.Add(1)
				log.Error("file collector pass failed", "err", err, "collected", res.Collected, "orphans", res.Orphans)
			}
			continue
		}
		f.blobs.Store(res.Blobs)
		f.bytes.Store(res.Bytes)
		f.lost.Store(int64(res.Lost))
		log.Info("file collector pass", "collected", res.Collected, "orphans", res.Orphans, "blobs", res.Blobs,
			"bytes", res.Bytes, "lost", res.Lost, "took", time.Since(start).Round(time.Millisecond).String())
	}
}
