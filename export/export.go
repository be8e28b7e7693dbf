// Package export writes chat-history exports (SPEC §5) and serves their
// downloads. The store (parley.Exports) keeps the jobs, their durable
// snapshots and the shard records; this package owns the files.
//
// # Files
//
// Everything lives in one directory (Options.Dir, Download.Dir):
//
//	<job>.jsonl.gz          the artifact (ArtifactPath), present once the job is done
//	<job>.jsonl.gz.tmp-*    an artifact being written
//	<job>.shards/000000.jsonl  shard 0 of a running job (and *.tmp-* while written)
//
// Every file is written to a temp file in its final directory, fsynced,
// renamed, and the directory fsynced, so a crash leaves either the old
// name, the complete new file, or a stale temp file the janitor deletes:
// never a partial file under a final name.
//
// # Determinism
//
// A shard holds ExportShardSize message events of one conversation as
// JSONL, one line per event with sorted keys and nothing of the run (no
// host, no wall clock): the same snapshot always gives the same bytes.
// The artifact is the shards in order, gzip-compressed at a fixed level
// with a zero header (no name, mtime 0), so a rerun after any crash gives
// the same sha256, which is the download's strong ETag.
package export

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/parleychat/parley"
)

// File name parts. A job id never holds a dot (parley.CheckExportID), so
// the part before the first dot of a name in the directory is its job.
const (
	artifactSuffix = ".jsonl.gz"
	shardsSuffix   = ".shards"
	tmpInfix       = ".tmp-"
	shardExt       = ".jsonl"
)

// ArtifactPath is where a job's artifact lives in dir.
func ArtifactPath(dir, job string) string {
	return filepath.Join(dir, job+artifactSuffix)
}

// shardDir is the directory of a job's shards in dir.
func shardDir(dir, job string) string {
	return filepath.Join(dir, job+shardsSuffix)
}

// shardPath is the file of shard idx of a job.
func shardPath(dir, job string, idx int) string {
	return filepath.Join(shardDir(dir, job), fmt.Sprintf("%06d%s", idx, shardExt))
}

// line is one exported event. The fields are in key order, so
// encoding/json writes the keys sorted.
type line struct {
	At       string `json:"at"`
	Body     string `json:"body"`
	Conv     string `json:"conv"`
	Device   string `json:"device"`
	Kind     string `json:"kind"`
	MID      string `json:"mid"`
	Recalled bool   `json:"recalled"`
	Sender   string `json:"sender"`
	Seq      int64  `json:"seq"`
}

// timeFormat is RFC 3339 in UTC with milliseconds, the stores' precision.
const timeFormat = "2006-01-02T15:04:05.000Z"

// encodeShard returns the JSONL bytes of a shard's events.
func encodeShard(evs []parley.Event) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, ev := range evs {
		if err := enc.Encode(line{
			At:       ev.At.UTC().Format(timeFormat),
			Body:     ev.Body,
			Conv:     ev.Conv,
			Device:   ev.Device,
			Kind:     string(ev.Kind),
			MID:      ev.MID,
			Recalled: ev.Recalled,
			Sender:   ev.Sender,
			Seq:      ev.Seq,
		}); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileSum returns the sha256 (hex) and size of a file, streaming it.
func fileSum(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeError is a failed file write: the disk is full, the directory is
// gone, fsync failed. The job is retried after a backoff.
type writeError struct {
	op   string
	path string
	err  error
}

func (e *writeError) Error() string { return "export: " + e.op + " " + e.path + ": " + e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

func wrapWrite(op, path string, err error) error {
	if err == nil {
		return nil
	}
	var we *writeError
	if errors.As(err, &we) {
		return err
	}
	return &writeError{op: op, path: path, err: err}
}

// syncDir fsyncs a directory, so the names created or renamed in it
// survive a power cut.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return wrapWrite("open dir", dir, err)
	}
	defer d.Close()
	return wrapWrite("fsync dir", dir, d.Sync())
}

// parseName splits a directory entry of the export directory into its job
// and what it is; ok is false for names this package does not write.
func parseName(name string) (job, kind string, ok bool) {
	job, rest, found := strings.Cut(name, ".")
	if !found || parley.CheckExportID(job) != nil {
		return "", "", false
	}
	rest = "." + rest
	switch {
	case rest == artifactSuffix:
		return job, kindArtifact, true
	case strings.HasPrefix(rest, artifactSuffix+tmpInfix):
		return job, kindTemp, true
	case rest == shardsSuffix:
		return job, kindShards, true
	}
	return "", "", false
}

const (
	kindArtifact = "artifact"
	kindTemp     = "temp"
	kindShards   = "shards"
)
