package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/blobdir"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/s3"
	"github.com/parleychat/parley/thumb"
	"github.com/parleychat/parley/upload"
)

// fileFlags are serve's flags of uploaded files.
type fileFlags struct {
	dir   string // --files-dir: the blob directory and the upload staging
	store string // --files: "" (the blob directory) or s3://BUCKET…
}

func (f *fileFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "files-dir", "", "where uploaded files are kept (FILES-DIR/blobs) and unfinished uploads staged (FILES-DIR/uploads), shared by every gateway of a cluster: required with a PostgreSQL store; empty (SQLite only): DATA-DIR/files")
	fs.StringVar(&f.store, "files", "", "keep the bytes of uploaded files in an S3-compatible bucket instead of FILES-DIR/blobs: s3://BUCKET[/PREFIX]?endpoint=HOST:PORT&region=REGION&secure=false, with the credentials in PARLEY_S3_ACCESS_KEY and PARLEY_S3_SECRET_KEY (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); uploads are still staged in FILES-DIR/uploads")
}

// check refuses what serve cannot keep files with, before anything opens.
func (f *fileFlags) check(fs *flag.FlagSet, dsn string) error {
	if f.store != "" && !strings.HasPrefix(f.store, "s3://") {
		return usagef("--files %q: want s3://BUCKET?endpoint=HOST:PORT, or nothing for FILES-DIR/blobs", f.store)
	}
	return requireSharedFilesDir(fs, dsn)
}

// requireSharedFilesDir refuses a PostgreSQL store without an explicit
// --files-dir (flag or PARLEY_FILES_DIR), for the reason of
// requireSharedExportDir: an upload is staged by whichever gateway gets
// its first request and resumed on whichever gets the next, and a file is
// downloaded from any gateway.
func requireSharedFilesDir(fs *flag.FlagSet, dsn string) error {
	if kind, err := storeKind(dsn); err != nil || kind != "postgres" {
		return nil
	}
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "files-dir" })
	if set {
		return nil
	}
	return usagef("serve: a PostgreSQL store needs --files-dir (or PARLEY_FILES_DIR): a directory every gateway of the deployment shares (NFS or another shared volume; with one gateway, any local directory), because an upload may resume on another gateway and a file is downloaded from any of them")
}

// openBlobs opens the blob store of the flags: the bucket --files names,
// or FILES-DIR/blobs.
func (f *fileFlags) openBlobs(ctx context.Context, getenv func(string) string) (parley.BlobStore, error) {
	if f.store != "" {
		s, err := s3.Open(ctx, f.store, getenv)
		if err != nil {
			return nil, fmt.Errorf("--files: %w", err)
		}
		return s, nil
	}
	d, err := blobdir.Open(filepath.Join(f.dir, "blobs"))
	if err != nil {
		return nil, fmt.Errorf("--files-dir: %w", err)
	}
	return d, nil
}

// stagingDir is where unfinished uploads are staged: beside the blobs, so
// a finished upload is renamed in.
func (f *fileFlags) stagingDir() string { return filepath.Join(f.dir, "uploads") }

// uploadSweepEvery is how often abandoned staged uploads are looked for.
const uploadSweepEvery = time.Hour

// registerUploadMetrics exports the uploads' counters.
func registerUploadMetrics(m *metrics.Metrics, u *upload.Handler) {
	m.GaugeFunc(metrics.NameUploadsInProgress, "Upload requests receiving bytes now.", func() float64 { return float64(u.Counts().InProgress) })
	m.CounterFunc(metrics.NameUploadBytes, "Bytes of upload request bodies received.", func() float64 { return float64(u.Counts().BytesReceived) })
	m.LabeledCounterFunc(metrics.NameUploads, "Uploads by outcome: created, refused (at creation: too large, over quota, a bad name), ready, failed (a finish that failed), cancelled.",
		"outcome", upload.Outcomes[:], func() (map[string]float64, bool) {
			out := map[string]float64{}
			for k, v := range u.Counts().Outcomes {
				out[k] = float64(v)
			}
			return out, true
		})
}

// newThumbs makes the thumbnail jobs of the files in blobs (nil without a
// blob store), with their counts on /metrics.
func newThumbs(blobs parley.BlobStore, log *slog.Logger, m *metrics.Metrics) *thumb.Jobs {
	if blobs == nil {
		return nil
	}
	jobs := thumb.New(thumb.JobsOptions{Blobs: blobs, Log: log})
	m.GaugeFunc(metrics.NameThumbsQueued, "Files waiting for their thumbnail.", func() float64 { return float64(jobs.Counts().Queued) })
	m.GaugeFunc(metrics.NameThumbsRunning, "Thumbnails being made now.", func() float64 { return float64(jobs.Counts().Running) })
	m.LabeledCounterFunc(metrics.NameThumbs, "Thumbnail jobs by outcome: done, failed (a corrupt image, the blob store), refused (above 40 MP or the memory budget), skipped (not an image, or made already), dropped (the queue was full; made when the thumbnail is next asked for).",
		"outcome", thumbOutcomes, func() (map[string]float64, bool) {
			c := jobs.Counts()
			return map[string]float64{"done": float64(c.Done), "failed": float64(c.Failed), "refused": float64(c.Refused),
				"skipped": float64(c.Skipped), "dropped": float64(c.Dropped)}, true
		})
	return jobs
}

var thumbOutcomes = []string{"done", "failed", "refused", "skipped", "dropped"}
