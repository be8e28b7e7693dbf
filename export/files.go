package export

import (
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/parleychat/parley"
)

// The files archive: when the lines of a job attach files, the job also
// writes <job>.files.zip (FilesPath) beside the artifact, with the bytes
// of the files its lines list, read from the blob store:
//
//	files/<file id>/<name>   each distinct file once, in the order the lines
//	                         first list it, stored (not compressed: most
//	                         files are compressed already), its time the
//	                         `at` of the first message that lists it
//	manifest.json            every attachment of every line, in export
//	                         order, with whether its bytes are included
//
// It is derived from the artifact (read back once it is in place) and the
// blobs, so it is rebuilt from scratch by every attempt and its bytes are
// deterministic: the same snapshot and the same blobs give the same
// archive, whose sha256 is its download's strong ETag. A file whose blob
// is gone when the archive is built (recalled after the snapshot and
// collected, or lost) is listed as missing; a blob whose bytes differ
// from the file's recorded size or sha256 is listed as damaged. Neither
// fails the job. A blob store that does not answer fails the attempt,
// which is retried like a full disk.

const (
	filesSuffix = ".files.zip"
	// manifestName is the archive's last entry.
	manifestName = "manifest.json"
)

// attachmentsKey starts the attachments member of a line; it cannot occur
// inside a JSON string (a quote there is escaped), so a shard holds it
// exactly when one of its lines lists files.
var attachmentsKey = []byte(`,"attachments":[`)

// FilesPath is where a job's files archive lives in dir.
func FilesPath(dir, job string) string {
	return filepath.Join(dir, job+filesSuffix)
}

// filesLine is what the archive reads of a line.
type filesLine struct {
	At          time.Time `json:"at"`
	Conv        string    `json:"conv"`
	Seq         int64     `json:"seq"`
	Attachments []struct {
		ID     string `json:"id"`
		MIME   string `json:"mime"`
		Name   string `json:"name"`
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"attachments"`
}

// manifestEntry is one attachment in manifest.json, fields in key order.
type manifestEntry struct {
	Conv     string `json:"conv"`
	ID       string `json:"id"`
	Included bool   `json:"included"`
	MIME     string `json:"mime"`
	Missing  string `json:"missing,omitempty"` // "gone" or "damaged" when not included
	Name     string `json:"name"`
	Path     string `json:"path,omitempty"` // the entry holding its bytes
	Seq      int64  `json:"seq"`
	SHA256   string `json:"sha256"`
	Size     int64  `json:"size"`
}

// blobError is a failed read of the blob store (not a missing blob): the
// attempt is retried.
type blobError struct{ err error }

func (e *blobError) Error() string { return "export: reading a file's bytes: " + e.err.Error() }
func (e *blobError) Unwrap() error { return e.err }

// entryName is the archive path of a file: its id keeps names apart, and a
// name that is a path step of its own ("." or "..") is replaced, so no
// entry leaves files/<id>/ when unpacked (names hold no '/' or '\').
func entryName(id, name string) string {
	if name == "." || name == ".." || name == "" {
		name = "_"
	}
	return "files/" + id + "/" + name
}

// eachFilesLine calls fn with every line of the artifact at path that
// lists attachments, in order.
func eachFilesLine(ctx context.Context, path string, fn func(l *filesLine) error) error {
	f, err := os.Open(path)
	if err != nil {
		return wrapWrite("open", path, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return wrapWrite("read", path, err)
	}
	br := bufio.NewReaderSize(zr, 64<<10)
	for {
		raw, err := br.ReadBytes('\n')
		if len(raw) > 0 && bytes.Contains(raw, attachmentsKey) {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			var l filesLine
			if jerr := json.Unmarshal(raw, &l); jerr != nil {
				return &jobError{reason: fmt.Sprintf("export: a line of the artifact does not decode: %v", jerr)}
			}
			if ferr := fn(&l); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return wrapWrite("read", path, err)
		}
	}
}

// filesArchive is a files archive being written: a zip through a hash
// into a temp file.
type filesArchive struct {
	output
	bw   *bufio.Writer
	zw   *zip.Writer
	seen map[string]manifestEntry // by file id: how its bytes went in
	last time.Time                // the latest line time seen: the manifest's
}

// writeFiles builds job's files archive from its artifact (art, in place)
// and the blob store, renames it into place and returns its sha256 and
// size.
func (w *Worker) writeFiles(ctx context.Context, job, art string) (string, int64, error) {
	final := FilesPath(w.o.Dir, job)
	if err := faultWrite(final); err != nil {
		return "", 0, err
	}
	tmp, err := os.CreateTemp(w.o.Dir, job+filesSuffix+tmpInfix+"*")
	if err != nil {
		return "", 0, wrapWrite("create", final, err)
	}
	a := &filesArchive{output: output{final: final, tmp: tmp, h: sha256.New()}, seen: map[string]manifestEntry{}}
	defer a.discard()
	a.bw = bufio.NewWriterSize(io.MultiWriter(tmp, a.h), 64<<10)
	a.zw = zip.NewWriter(&counter{w: a.bw, n: &a.size})
	err = eachFilesLine(ctx, art, func(l *filesLine) error {
		a.last = maxTime(a.last, l.At)
		for _, at := range l.Attachments {
			if _, ok := a.seen[at.ID]; ok {
				continue
			}
			e := manifestEntry{ID: at.ID, MIME: at.MIME, Name: at.Name, SHA256: at.SHA256, Size: at.Size}
			if err := w.addFile(ctx, a, &e, l.At); err != nil {
				return err
			}
			a.seen[at.ID] = e
		}
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	if err := a.manifest(ctx, art); err != nil {
		return "", 0, err
	}
	return a.finish()
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// addFile streams the blob of e's file into the archive, or marks it
// missing (gone or damaged).
func (w *Worker) addFile(ctx context.Context, a *filesArchive, e *manifestEntry, at time.Time) error {
	r, blob, err := w.o.Blobs.Open(ctx, e.ID)
	switch {
	case parley.ErrorCode(err) == parley.CodeNotFound:
		e.Missing = "gone"
		w.log.Warn("export: a file's bytes are gone; listed as missing", "file", e.ID)
		return nil
	case err != nil:
		return &blobError{err: err}
	}
	defer r.Close()
	if blob.Size != e.Size {
		e.Missing = "damaged"
		w.log.Error("export: a file's stored size differs from its record; listed as damaged", "file", e.ID, "stored", blob.Size, "size", e.Size)
		return nil
	}
	path := entryName(e.ID, e.Name)
	out, err := a.zw.CreateHeader(&zip.FileHeader{Name: path, Method: zip.Store, Modified: at.UTC()})
	if err != nil {
		return wrapWrite("write", a.final, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), readErrors{r})
	if err != nil {
		if be, ok := errors.AsType[*blobError](err); ok {
			return be
		}
		return wrapWrite("write", a.final, err)
	}
	if n != e.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		// The entry is written: it holds what the store had.
		e.Missing, e.Path = "damaged", path
		w.log.Error("export: a file's stored bytes differ from its sha256; listed as damaged", "file", e.ID)
		return nil
	}
	e.Included, e.Path = true, path
	return nil
}

// readErrors tags the errors of a blob reader, so a failed read is told
// apart from a failed write.
type readErrors struct{ r io.Reader }

func (r readErrors) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &blobError{err: err}
	}
	return n, err
}

// manifest writes manifest.json: every attachment of every line, read
// from the artifact again, with how its file went in.
func (a *filesArchive) manifest(ctx context.Context, art string) error {
	out, err := a.zw.CreateHeader(&zip.FileHeader{Name: manifestName, Method: zip.Deflate, Modified: a.last.UTC()})
	if err != nil {
		return wrapWrite("write", a.final, err)
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	if _, err := io.WriteString(out, "{\"files\":[\n"); err != nil {
		return wrapWrite("write", a.final, err)
	}
	first := true
	err = eachFilesLine(ctx, art, func(l *filesLine) error {
		for _, at := range l.Attachments {
			e := a.seen[at.ID]
			e.Conv, e.Seq, e.MIME, e.Name, e.SHA256, e.Size = l.Conv, l.Seq, at.MIME, at.Name, at.SHA256, at.Size
			if !first {
				if _, err := io.WriteString(out, ","); err != nil {
					return wrapWrite("write", a.final, err)
				}
			}
			first = false
			if err := enc.Encode(e); err != nil {
				return wrapWrite("write", a.final, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := io.WriteString(out, "]}\n"); err != nil {
		return wrapWrite("write", a.final, err)
	}
	return nil
}

// finish completes the archive, fsyncs it, renames it into place, fsyncs
// the directory, and returns its sha256 and size, verified by reading it
// back.
func (a *filesArchive) finish() (string, int64, error) {
	if err := a.zw.Close(); err != nil {
		return "", 0, wrapWrite("write", a.final, err)
	}
	if err := a.bw.Flush(); err != nil {
		return "", 0, wrapWrite("write", a.final, err)
	}
	return a.install()
}
