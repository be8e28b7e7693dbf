package export

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/wire"
)

// Download serves GET (and HEAD) /download/{id}: a signed link's artifact,
// or with part=files its files archive (FilesPath), with RFC 9110 ranges
// through http.ServeContent. The signature covers the job, not the part:
// both are the job's, for the same user.
//
// Every request is checked in this order, whatever an earlier request
// proved:
//
//	signature (bad, tampered, unknown key id, expired)  403 PERMISSION_DENIED "Access denied"
//	job missing (deleted with its owner's account)      410
//	job of another user than the link's                 403
//	owner's account missing or disabled                 403
//	job revoked, expired, or past its ExpiresAt         410
//	job queued or running (not ready) or failed         404 NOT_FOUND
//	part=files of a job without a files archive, or an
//	unknown part                                        404 NOT_FOUND
//	artifact (or files archive) missing or of the wrong size  410
//	store unavailable, or slower than Timeout           503 UNAVAILABLE (Retry-After)
//
// A missing job answers 410, not 404: the link's signature proves the job
// existed, so it is gone for good and a client must not poll.
//
// Every request is logged (job, user, status, bytes, range, client address)
// and counted in parley_export_downloads_total.
type Download struct {
	Store   DownloadStore
	Dir     string
	Keys    func() *Keyring
	Log     *slog.Logger
	Metrics *metrics.Metrics
	Now     func() time.Time // nil: time.Now
	// Timeout bounds each store call of a request (timeouts.store); nil:
	// config.DefaultStoreTimeout. Sending the file has no such bound: a
	// large download takes as long as the client needs.
	Timeout func() time.Duration
}

// DownloadStore is what Download reads of the store per request: the job
// (parley.Exports.ExportJob) and its owner's account (parley.Store.User).
type DownloadStore interface {
	ExportJob(ctx context.Context, id string) (parley.ExportJob, error)
	User(ctx context.Context, login string) (parley.User, error)
}

// MaxRanges is the most ranges a request may ask for (wire.MaxRanges).
const MaxRanges = wire.MaxRanges

// ServeHTTP implements http.Handler.
func (d *Download) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	rec := &recorder{ResponseWriter: w}
	id := r.PathValue("id")
	user, why := d.serve(rec, r, id, now())
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	d.Metrics.Download(status)
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	addr := r.RemoteAddr
	if a := parley.CallerFromContext(r.Context()).Addr; a.IsValid() {
		addr = a.String()
	}
	attrs := []any{"job", id, "user", user, "status", status, "bytes", rec.bytes,
		"method", r.Method, "range", r.Header.Get("Range"), "if_range", r.Header.Get("If-Range"), "addr", addr}
	if why != "" {
		attrs = append(attrs, "why", why)
	}
	log.Info("export download", attrs...)
}

// serve answers the request and returns the link's user and, for a
// refusal, why (for the log).
func (d *Download) serve(w http.ResponseWriter, r *http.Request, id string, now time.Time) (user, why string) {
	var keys *Keyring
	if d.Keys != nil {
		keys = d.Keys()
	}
	if keys == nil {
		problem(w, http.StatusServiceUnavailable, parley.CodeUnavailable, "downloads are not available: no signing key")
		return "", "no keyring"
	}
	user, err := keys.Verify(id, r.URL.Query(), now)
	if err != nil {
		denied(w)
		return r.URL.Query().Get("u"), err.Error()
	}
	job, why := d.lookup(r.Context(), w, id, user)
	if why != "" {
		return user, why
	}
	if why := refuseState(w, job, now); why != "" {
		return user, why
	}
	return user, d.send(w, r, job)
}

// lookup reads the job and its owner's account, each read bounded by
// Timeout, and answers the refusals they give: why is empty when the job
// is the link user's and the account may download.
func (d *Download) lookup(ctx context.Context, w http.ResponseWriter, id, user string) (job parley.ExportJob, why string) {
	timeout := config.DefaultStoreTimeout
	if d.Timeout != nil {
		timeout = d.Timeout()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	job, err := d.Store.ExportJob(ctx, id)
	switch {
	case errors.Is(err, parley.ErrExportNotFound), parley.ErrorCode(err) == parley.CodeNotFound:
		problem(w, http.StatusGone, parley.CodeOriginalExpired, "this export no longer exists")
		return job, "job deleted"
	case err != nil:
		unavailable(w)
		return job, "store: " + err.Error()
	}
	if job.User != user {
		denied(w)
		return job, "job of another user"
	}
	acct, err := d.Store.User(ctx, job.User)
	switch {
	case parley.ErrorCode(err) == parley.CodeNotFound:
		denied(w)
		return job, "account missing"
	case err != nil:
		unavailable(w)
		return job, "store: " + err.Error()
	case acct.Disabled:
		denied(w)
		return job, "account disabled"
	}
	return job, ""
}

// refuseState answers a job that has no artifact to serve at now, and
// says why; it returns "" for a done job within its time.
func refuseState(w http.ResponseWriter, job parley.ExportJob, now time.Time) (why string) {
	switch {
	case job.State == parley.ExportRevoked:
		problem(w, http.StatusGone, parley.CodeOriginalExpired, "this export was revoked")
		return "revoked"
	case job.State == parley.ExportExpired,
		job.State == parley.ExportDone && !job.ExpiresAt.IsZero() && !now.Before(job.ExpiresAt):
		problem(w, http.StatusGone, parley.CodeOriginalExpired, "this export has expired; create a new one")
		return "expired"
	case job.State == parley.ExportFailed:
		problem(w, http.StatusNotFound, parley.CodeNotFound, "this export failed; create a new one")
		return "failed"
	case job.State != parley.ExportDone:
		problem(w, http.StatusNotFound, parley.CodeNotFound, "this export is not ready yet")
		return "not ready"
	}
	return ""
}

// part is one file of a done job a link serves: the artifact (no part
// parameter) or the files archive (part=files).
type part struct {
	name, path, sha256, contentType, filename string
	size                                      int64
}

// partOf returns the part the request asks for, or answers 404 when the
// job has no such part and returns ok false.
func (d *Download) partOf(w http.ResponseWriter, r *http.Request, job parley.ExportJob) (p part, ok bool) {
	switch q := r.URL.Query()["part"]; {
	case len(q) == 0:
		return part{name: "artifact", path: ArtifactPath(d.Dir, job.ID), sha256: job.SHA256, size: job.Bytes,
			contentType: "application/gzip", filename: "parley-export-" + job.ID + ".jsonl.gz"}, true
	case len(q) == 1 && q[0] == "files" && job.FilesSHA256 != "":
		return part{name: "files", path: FilesPath(d.Dir, job.ID), sha256: job.FilesSHA256, size: job.FilesBytes,
			contentType: "application/zip", filename: "parley-export-" + job.ID + "-files.zip"}, true
	case len(q) == 1 && q[0] == "files":
		problem(w, http.StatusNotFound, parley.CodeNotFound, "this export has no files")
	default:
		problem(w, http.StatusNotFound, parley.CodeNotFound, "no such part of an export")
	}
	return part{}, false
}

// send serves the part of the job's files the request asks for (ranges
// and Go's error answers as problems through wire.ServeContent), or
// answers 410 when its file is gone or does not match the record; it
// returns why for a refusal.
func (d *Download) send(w http.ResponseWriter, r *http.Request, job parley.ExportJob) (why string) {
	p, ok := d.partOf(w, r, job)
	if !ok {
		return "no such part"
	}
	f, err := os.Open(p.path)
	if err != nil {
		problem(w, http.StatusGone, parley.CodeOriginalExpired, "this export's file is gone; create a new one")
		return p.name + ": " + err.Error()
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.Size() != p.size {
		// Never serve bytes that do not match the recorded ETag.
		problem(w, http.StatusGone, parley.CodeOriginalExpired, "this export's file is damaged; create a new one")
		return p.name + " size differs from the record"
	}
	h := w.Header()
	etag := `"` + p.sha256 + `"`
	h.Set("ETag", etag)
	h.Set("Content-Type", p.contentType)
	h.Set("Content-Disposition", `attachment; filename="`+p.filename+`"`)
	h.Set("Cache-Control", "private, no-store")
	h.Set("Accept-Ranges", "bytes")
	h.Set("X-Content-Type-Options", "nosniff")
	// Go's own error answers (a 416, a failed read) become problems.
	if _, text := wire.ServeContent(w, r, time.Time{}, f, ""); text != "" {
		return "serve: " + text
	}
	return ""
}

// GuardRange is wire.GuardRange: the Range header ServeContent is given.
func GuardRange(method, header string, size int64) string {
	return wire.GuardRange(method, header, size)
}

func denied(w http.ResponseWriter) {
	problem(w, http.StatusForbidden, parley.CodePermissionDenied, "Access denied")
}

func unavailable(w http.ResponseWriter) {
	problem(w, http.StatusServiceUnavailable, parley.CodeUnavailable, parley.InternalMessage)
}

// problem writes an RFC 9457 problem. Statuses the code table maps the
// same way go through wire.WriteProblem (410 is ORIGINAL_EXPIRED: the
// export existed and is gone for good; create a new one).
func problem(w http.ResponseWriter, status int, code parley.Code, detail string) {
	if wire.HTTPStatus(code) == status {
		wire.WriteProblem(w, code, detail, "")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	wire.WriteJSON(w, wire.Problem{
		Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code,
	})
}

// recorder remembers the status and counts the body bytes for the log.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

// ReadFrom keeps sendfile for the body ServeContent copies.
func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := io.Copy(r.ResponseWriter, src)
	r.bytes += n
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
