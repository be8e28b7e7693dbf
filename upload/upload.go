// Package upload serves resumable uploads over tus 1.0 (core, creation and
// termination; https://tus.io/protocols/resumable-upload) at
// /api/uploads/, with github.com/tus/tusd/v2's handler and its file store
// as the staging area. The routes run behind the HTTP API's middleware
// chain (httpapi mounts the Handler): the caller is identified before any
// request reaches it.
//
// What Parley adds to tusd:
//   - Creation declares the size (Upload-Length; a deferred length is
//     refused), checked against max_file_size and the caller's quota by
//     app.CreateUpload before a byte is stored. The file id the store
//     makes is the tus upload id and, later, the blob key.
//   - Only the uploader may HEAD, PATCH or DELETE an upload; anyone else
//     gets the NOT_FOUND of a missing one.
//   - A request with a body must say its length (Content-Length): a body
//     longer than the upload's remaining bytes is refused before it is
//     read, so nothing is stored past the declared size.
//   - The PATCH that brings the last byte returns when the file is ready
//     (app.FinishUpload: measured, moved into the blob store, recorded):
//     200 with the file as a message's attachment shows it. A HEAD or
//     PATCH of a finished upload answers the same, so a client that lost
//     that reply learns the file by asking again; an upload whose bytes all
//     arrived but whose finish did not complete (a crash) is finished by
//     the next HEAD or PATCH.
//   - Every error is problem+json with the protocol code (wire.WriteProblem),
//     tusd's own included.
//   - A PATCH may take as long as its bytes take: the bound is the idle
//     time between two reads (Options.IdleTimeout), not the whole body.
//
// Staged files live in one directory (Options.Dir) on the filesystem of
// the blob directory, so a finish is a rename. Their SHA-256 is computed
// as they arrive and kept across resumes and restarts (hash.go), so a
// finish does not read them again. Sweep removes staged files
// untouched for Options.Expiry or whose upload's row is gone; the rows of
// unfinished uploads are the collector's.
package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/wire"
	"github.com/tus/tusd/v2/pkg/filestore"
	"github.com/tus/tusd/v2/pkg/handler"
	xslog "golang.org/x/exp/slog"
)

// Service is what the uploads need of the application layer; *app.Service
// implements it.
type Service interface {
	CreateUpload(ctx context.Context, p parley.Principal, name string, size int64) (parley.File, error)
	FinishUploadSum(ctx context.Context, p parley.Principal, id, path, sum string) (parley.File, error)
	Upload(ctx context.Context, p parley.Principal, id string) (parley.File, error)
	CancelUpload(ctx context.Context, p parley.Principal, id string) error
	Explain(err error, op, requestID string) app.Failure
}

// BasePath is where the Handler is mounted: the creation URL without its
// slash, each upload at BasePath + "/" + id.
const BasePath = "/api/uploads"

// Defaults of Options.
const (
	DefaultIdleTimeout = 30 * time.Second
	DefaultExpiry      = 24 * time.Hour
)

// Options configure a Handler. Service and Dir are required.
type Options struct {
	Service Service
	// Dir holds the staged uploads (created if missing). It must be on the
	// blob directory's filesystem for a finish to be a rename, and shared
	// by every gateway of a deployment, like the blob directory.
	Dir string
	// IdleTimeout is the longest a request body may pause between two
	// reads before the request is answered 408 (the client resumes from
	// the offset that arrived). Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// StoreTimeout bounds each use-case call (nil: 10s); a finish gets
	// more, by the file's size.
	StoreTimeout func() time.Duration
	// Expiry: Sweep removes staged uploads untouched this long (default
	// DefaultExpiry).
	Expiry time.Duration
	// MaxFileSize is the policy's max_file_size, which OPTIONS announces
	// (Tus-Max-Size); nil: parley.DefaultMaxFileSize.
	MaxFileSize func() int64
	Log         *slog.Logger
}

// Handler serves the tus routes. Its methods are safe for concurrent use.
type Handler struct {
	o     Options
	tus   *handler.UnroutedHandler
	files stagingStore
	locks *locker
	serve http.Handler

	inProgress atomic.Int64 // requests receiving bytes now
	received   atomic.Int64 // bytes received, ever
	outcomes   [len(Outcomes)]atomic.Int64
}

// Outcomes label the uploads counted by Counts: created (creation
// accepted), refused (creation refused: too large, over quota, a bad
// name), ready (finished), failed (a finish that failed), cancelled
// (terminated by its uploader).
var Outcomes = [...]string{"created", "refused", "ready", "failed", "cancelled"}

const (
	outCreated = iota
	outRefused
	outReady
	outFailed
	outCancelled
)

// New returns the Handler of o.
func New(o Options) (*Handler, error) {
	if o.Service == nil || o.Dir == "" {
		return nil, errors.New("upload: Service and Dir are required")
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Expiry <= 0 {
		o.Expiry = DefaultExpiry
	}
	if o.StoreTimeout == nil {
		o.StoreTimeout = func() time.Duration { return 10 * time.Second }
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.MaxFileSize == nil {
		o.MaxFileSize = func() int64 { return parley.DefaultMaxFileSize }
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	h := &Handler{o: o, locks: newLocker()}
	files := filestore.New(o.Dir)
	files.DirModePerm, files.FileModePerm = 0o700, 0o600
	h.files = stagingStore{files}
	composer := handler.NewStoreComposer()
	composer.UseCore(h.files)
	composer.UseTerminater(h.files) // advertises termination; DELETE is ours (cancel)
	// No locker for tusd: its way of interrupting the request that holds
	// an upload's lock races with its own body reader (a data race in
	// tusd 2.9.1). serveUpload takes our lock around each of tusd's calls
	// and interrupts a holder by its read deadline.
	tus, err := handler.NewUnroutedHandler(handler.Config{
		StoreComposer:             composer,
		BasePath:                  BasePath + "/",
		DisableDownload:           true,
		DisableConcatenation:      true,
		Cors:                      &handler.CorsConfig{Disable: true}, // the API's browser safety decides origins
		Logger:                    xslog.New(xslog.NewTextHandler(io.Discard, nil)),
		PreUploadCreateCallback:   h.preCreate,
		PreFinishResponseCallback: h.preFinish,
		NetworkTimeout:            o.IdleTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	h.tus = tus
	h.serve = tus.Middleware(http.HandlerFunc(h.route))
	return h, nil
}

// Counts is what the Handler counted, for the metrics.
type Counts struct {
	InProgress    int64            // requests receiving bytes now
	BytesReceived int64            // request body bytes received, ever
	Outcomes      map[string]int64 // uploads by outcome (Outcomes), ever
}

// Counts returns the Handler's counters.
func (h *Handler) Counts() Counts {
	c := Counts{InProgress: h.inProgress.Load(), BytesReceived: h.received.Load(), Outcomes: map[string]int64{}}
	for i, name := range Outcomes {
		c.Outcomes[name] = h.outcomes[i].Load()
	}
	return c
}

// ServeHTTP serves one tus request of an identified caller.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pw := &problemWriter{ResponseWriter: w, r: r, h: h}
	defer pw.finish()
	r = r.WithContext(context.WithValue(r.Context(), writerKey{}, pw))
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		// tusd reads the body of the request its middleware saw.
		h.inProgress.Add(1)
		defer h.inProgress.Add(-1)
		r.Body = &countingBody{ReadCloser: r.Body, n: &h.received}
	}
	if r.Method == http.MethodOptions {
		pw.Header().Set("Tus-Max-Size", strconv.FormatInt(h.o.MaxFileSize(), 10))
	}
	h.serve.ServeHTTP(pw, r)
}

// route dispatches a request tusd's middleware let through.
func (h *Handler) route(w http.ResponseWriter, r *http.Request) {
	id, _ := strings.CutPrefix(r.URL.Path, BasePath)
	id = strings.Trim(id, "/")
	p := parley.CallerFromContext(r.Context()).Principal
	switch {
	case r.Method == http.MethodOptions:
		return // answered by tusd's middleware
	case id == "" && r.Method == http.MethodPost:
		if r.Header.Get("Content-Type") == "application/offset+octet-stream" && !h.lengthKnown(w, r) {
			return
		}
		h.tus.PostFile(w, r)
	case id != "" && (r.Method == http.MethodHead || r.Method == http.MethodPatch || r.Method == http.MethodDelete):
		h.serveUpload(w, r, p, id)
	default:
		w.Header().Set("Allow", "POST, OPTIONS")
		h.fail(w, r, parley.Errorf(parley.CodeInvalidArgument, "method %s not allowed here", r.Method), "upload")
	}
}

// lengthKnown refuses a body of unstated length (chunked): tusd checks a
// stated length against what the upload has left before it reads a byte.
func (h *Handler) lengthKnown(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength >= 0 {
		return true
	}
	h.fail(w, r, parley.Errorf(parley.CodeInvalidArgument, "an upload request with bytes must state their number (Content-Length)"), "upload")
	return false
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// serveUpload answers HEAD, PATCH and DELETE of upload id for p, its
// owner only.
func (h *Handler) serveUpload(w http.ResponseWriter, r *http.Request, p parley.Principal, id string) {
	if parley.CheckFileID(id) != nil {
		h.fail(w, r, parley.ErrNoSuchFile(), "upload")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.StoreTimeout())
	f, err := h.o.Service.Upload(ctx, p, id)
	cancel()
	if err != nil {
		h.fail(w, r, err, "upload")
		return
	}
	if r.Method == http.MethodDelete {
		h.cancel(w, r, p, id)
		return
	}
	if f.State != parley.FileReady {
		st, err := os.Stat(h.binPath(id))
		if err == nil && st.Size() < f.Size {
			// tusd reads the upload id from the path below its base.
			r2 := *r
			u := *r.URL
			u.Path, u.RawPath = "/"+id, ""
			r2.URL = &u
			if r.Method == http.MethodPatch && !h.lengthKnown(w, r) {
				return
			}
			// A request still holding the upload (a PATCH whose client
			// went away unnoticed) is told to stop reading: it keeps what
			// arrived and lets go.
			rc := http.NewResponseController(w)
			unlock, err := h.lock(r.Context(), id, func() { rc.SetReadDeadline(time.Now()) })
			if err != nil {
				h.fail(w, r, err, "upload")
				return
			}
			defer unlock()
			if r.Method == http.MethodHead {
				h.tus.HeadFile(w, &r2)
			} else {
				h.tus.PatchFile(w, &r2)
			}
			return
		}
		// Every byte arrived (or was moved in) but the finish did not
		// complete: finish now, so an offset at the size means ready.
		if f, err = h.finishLocked(r.Context(), p, id, f.Size); err != nil {
			h.fail(w, r, err, "finish upload")
			return
		}
	}
	h.ready(w, r, f)
}

// ready answers a HEAD or PATCH of a finished upload: its offset is its
// size, and a PATCH (at that offset) gets the file.
func (h *Handler) ready(w http.ResponseWriter, r *http.Request, f parley.File) {
	hdr := w.Header()
	size := strconv.FormatInt(f.Size, 10)
	hdr.Set("Upload-Offset", size)
	hdr.Set("Upload-Length", size)
	hdr.Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.Header.Get("Upload-Offset") != size {
		h.fail(w, r, errMismatch, "upload")
		return
	}
	hdr.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(fileJSON(f))
}

var errMismatch = parley.Errorf(parley.CodeCursorAhead, "Upload-Offset is not where the upload stands: HEAD it and continue from its Upload-Offset")

// fileJSON is the body of a finished upload: the file as a message's
// attachment shows it.
func fileJSON(f parley.File) []byte {
	b, _ := json.Marshal(wire.Attachment(parley.AttachmentOf(f)))
	return b
}

// cancel terminates p's upload id: its row (app.CancelUpload), then its
// staged bytes.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, p parley.Principal, id string) {
	unlock, err := h.lock(r.Context(), id, nil)
	if err != nil {
		h.fail(w, r, err, "cancel upload")
		return
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(r.Context(), h.o.StoreTimeout())
	defer cancel()
	if err := h.o.Service.CancelUpload(ctx, p, id); err != nil {
		h.fail(w, r, err, "cancel upload")
		return
	}
	h.outcomes[outCancelled].Add(1)
	h.removeStaged(id)
	w.WriteHeader(http.StatusNoContent)
}

// finishLocked finishes upload id under its lock.
func (h *Handler) finishLocked(ctx context.Context, p parley.Principal, id string, size int64) (parley.File, error) {
	unlock, err := h.lock(ctx, id, nil)
	if err != nil {
		return parley.File{}, err
	}
	defer unlock()
	return h.finish(ctx, p, id, size)
}

// finish makes upload id ready from its staged bytes (the caller holds
// its lock) and removes what is left of its staging.
func (h *Handler) finish(ctx context.Context, p parley.Principal, id string, size int64) (parley.File, error) {
	// Measuring reads every byte and a blob store may copy them: the
	// bound grows with the size (at least 8 MiB/s).
	ctx, cancel := context.WithTimeout(ctx, h.o.StoreTimeout()+time.Duration(size/(8<<20))*time.Second)
	defer cancel()
	// The hash kept while staging; none when the bytes were already moved
	// into the blob store (they are measured there).
	sum, err := stagedSum(h.binPath(id), size)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		h.outcomes[outFailed].Add(1)
		return parley.File{}, err
	}
	f, err := h.o.Service.FinishUploadSum(ctx, p, id, h.binPath(id), sum)
	if err != nil {
		h.outcomes[outFailed].Add(1)
		return f, err
	}
	h.outcomes[outReady].Add(1)
	h.removeStaged(id)
	return f, nil
}

// lock takes upload id's lock, asking a holder to let go; a later
// request calls interrupt to ask this one (nil: it is not asked).
func (h *Handler) lock(ctx context.Context, id string, interrupt func()) (func(), error) {
	l, _ := h.locks.NewLock(id)
	ctx, cancel := context.WithTimeout(ctx, h.o.StoreTimeout())
	defer cancel()
	if err := l.Lock(ctx, interrupt); err != nil {
		return nil, parley.Errorf(parley.CodeUnavailable, "the upload is busy with another request; retry")
	}
	return func() { l.Unlock() }, nil
}

// binPath and infoPath are where tusd's file store stages upload id.
func (h *Handler) binPath(id string) string  { return filepath.Join(h.o.Dir, id) }
func (h *Handler) infoPath(id string) string { return filepath.Join(h.o.Dir, id+".info") }

// removeStaged removes what is staged of upload id (a missing file is
// fine: a finish moved the bytes away).
func (h *Handler) removeStaged(id string) {
	for _, p := range []string{h.binPath(id), h.infoPath(id), hashPath(h.binPath(id)), hashPath(h.binPath(id)) + ".tmp"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			h.o.Log.Warn("upload: staged file not removed; the sweep will", "file", id, "err", err)
		}
	}
}
