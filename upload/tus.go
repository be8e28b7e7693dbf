package upload

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/wire"
	"github.com/tus/tusd/v2/pkg/handler"
)

// preCreate is tusd's pre-create callback: the file row (size and quota
// checked) before tusd stages anything, and its id as the upload's.
func (h *Handler) preCreate(hook handler.HookEvent) (handler.HTTPResponse, handler.FileInfoChanges, error) {
	p := parley.CallerFromContext(hook.Context).Principal
	name := hook.Upload.MetaData["filename"]
	if name == "" {
		name = hook.Upload.MetaData["name"]
	}
	ctx, cancel := context.WithTimeout(hook.Context, h.o.StoreTimeout())
	defer cancel()
	f, err := h.o.Service.CreateUpload(ctx, p, name, hook.Upload.Size)
	if err != nil {
		h.outcomes[outRefused].Add(1)
		return handler.HTTPResponse{}, handler.FileInfoChanges{}, h.hookError(hook.Context, err, "create upload")
	}
	h.outcomes[outCreated].Add(1)
	return handler.HTTPResponse{}, handler.FileInfoChanges{ID: f.ID, MetaData: handler.MetaData{"filename": f.Name, "owner": p.User}}, nil
}

// preFinish is tusd's pre-finish callback, run with the upload's lock
// held when its last byte is stored: the reply waits for the file to be
// ready and carries it.
func (h *Handler) preFinish(hook handler.HookEvent) (handler.HTTPResponse, error) {
	p := parley.CallerFromContext(hook.Context).Principal
	f, err := h.finish(hook.Context, p, hook.Upload.ID, hook.Upload.Size)
	if err != nil {
		return handler.HTTPResponse{}, h.hookError(hook.Context, err, "finish upload")
	}
	status := http.StatusOK
	if hook.HTTPRequest.Method == http.MethodPost {
		status = http.StatusCreated // an empty file, or one created with all its bytes
	}
	return handler.HTTPResponse{StatusCode: status, Body: string(fileJSON(f)), Header: handler.HTTPHeader{"Content-Type": "application/json"}}, nil
}

// hookError hands err to the request's problemWriter, which writes it as
// problem+json, and gives tusd an error whose own answer is dropped.
func (h *Handler) hookError(ctx context.Context, err error, op string) error {
	if pw, ok := ctx.Value(writerKey{}).(*problemWriter); ok {
		f := h.o.Service.Explain(err, op, parley.RequestIDFromContext(ctx))
		pw.failure = &f
	}
	return handler.NewError("ERR_PARLEY", "see the problem body", http.StatusBadRequest)
}

// fail writes err as problem+json.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error, op string) {
	f := h.o.Service.Explain(err, op, parley.RequestIDFromContext(r.Context()))
	w.Header().Del("Content-Length")
	wire.WriteProblem(w, f.Code, f.Msg, f.RequestID)
}

type writerKey struct{}

// problemWriter turns every error tusd writes into problem+json with a
// protocol code: an error a callback of ours raised (failure), or tusd's
// own, mapped by its error code (tusProblem). It also makes tusd's
// absolute Location relative, since the host tusd saw may not be the one
// the client reached (a proxy).
type problemWriter struct {
	http.ResponseWriter
	r       *http.Request
	h       *Handler
	wrote   bool
	status  int          // an error status tusd wrote, held back
	body    bytes.Buffer // its text, the first 1 KiB
	failure *app.Failure
}

func (w *problemWriter) WriteHeader(code int) {
	if w.wrote || w.status != 0 {
		return
	}
	hdr := w.Header()
	if code >= 400 && !strings.HasPrefix(hdr.Get("Content-Type"), "application/problem+json") {
		w.status = code
		return
	}
	if loc := hdr.Get("Location"); loc != "" {
		if u, err := url.Parse(loc); err == nil && u.IsAbs() {
			hdr.Set("Location", u.EscapedPath())
		}
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *problemWriter) Write(p []byte) (int, error) {
	if !w.wrote && w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.status != 0 {
		if room := 1024 - w.body.Len(); room > 0 {
			w.body.Write(p[:min(len(p), room)])
		}
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets tusd's http.ResponseController reach the connection (its
// read deadlines).
func (w *problemWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the held-back error, if any.
func (w *problemWriter) finish() {
	if w.status == 0 {
		return
	}
	hdr := w.Header()
	hdr.Del("Content-Length")
	hdr.Del("Content-Type")
	rid := parley.RequestIDFromContext(w.r.Context())
	if w.failure != nil {
		wire.WriteProblem(w.ResponseWriter, w.failure.Code, w.failure.Msg, w.failure.RequestID)
		return
	}
	f := w.h.o.Service.Explain(tusProblem(w.status, w.body.String()), "upload", rid)
	wire.WriteProblem(w.ResponseWriter, f.Code, f.Msg, f.RequestID)
}

// tusProblem maps an error tusd answered (status, and a body "ERR_CODE:
// message") to a protocol error. Failures of the connection, the lock or
// the disk have no code: they are explained as internal (UNAVAILABLE,
// logged).
func tusProblem(status int, body string) error {
	code, msg, _ := strings.Cut(strings.TrimSpace(body), ": ")
	switch code {
	case "ERR_MISMATCHED_OFFSET":
		return errMismatch
	case "ERR_UPLOAD_SIZE_EXCEEDED", "ERR_MAX_SIZE_EXCEEDED":
		return parley.Errorf(parley.CodeTooLarge, "more bytes than the upload declared (Upload-Length)")
	case "ERR_UPLOAD_NOT_FOUND":
		return parley.ErrNoSuchFile()
	case "ERR_NOT_IMPLEMENTED", "ERR_INVALID_UPLOAD_LENGTH_DEFER", "ERR_AMBIGUOUS_UPLOAD_LENGTH":
		return parley.Errorf(parley.CodeInvalidArgument, "an upload declares its size at creation (Upload-Length); a deferred length is not supported")
	case "ERR_UPLOAD_INTERRUPTED", "ERR_UPLOAD_LOCKED", "ERR_LOCK_TIMEOUT", "ERR_READ_TIMEOUT",
		"ERR_CONNECTION_RESET", "ERR_UNEXPECTED_EOF", "ERR_SERVER_SHUTDOWN":
		return parley.Errorf(parley.CodeUnavailable, "the upload was interrupted (%s): HEAD it and continue from its Upload-Offset", strings.ToLower(strings.TrimPrefix(code, "ERR_")))
	}
	if status >= 500 || msg == "" {
		return errors.New("tus: " + body) // internal: logged, never shown
	}
	return parley.Errorf(parley.CodeInvalidArgument, "%s", msg)
}
