package middleware

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// DefaultBodyTimeout is how long a request's body may take to arrive when
// BodyDeadline is given no other value: 64 KiB (the largest body a route
// reads) at about 2 KiB/s.
const DefaultBodyTimeout = 30 * time.Second

// BodyDeadline bounds the time a request's body may take to arrive: a
// client that sends its headers and then trickles (or stops sending) its
// body is answered 408 with code UNAVAILABLE (the request had no effect:
// retry it) and its connection is closed, instead of holding a handler,
// and whatever it holds, forever.
//
// It is a per-request read deadline (http.ResponseController), set only
// for requests that have a body and cleared as soon as the body is read,
// not http.Server.ReadTimeout: that one would also stay on a connection a
// WebSocket upgrade hijacked (coder/websocket clears no deadline), and it
// cannot tell a slow body from a long handler. Requests without a body —
// WebSocket upgrades, export downloads, every GET — are untouched.
//
// timeout returns the bound in force (read per request); nil or a value
// <= 0 means DefaultBodyTimeout.
func BodyDeadline(timeout func() time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
				next.ServeHTTP(w, r)
				return
			}
			d := DefaultBodyTimeout
			if timeout != nil {
				if v := timeout(); v > 0 {
					d = v
				}
			}
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
				next.ServeHTTP(w, r)
				return
			}
			bw := &bodyWriter{ResponseWriter: w}
			body := &deadlineBody{ReadCloser: r.Body, rc: rc, w: bw, d: d}
			r.Body = body
			next.ServeHTTP(bw, r)
			// A body the handler did not read to its end: the deadline
			// stays for net/http's discard of the rest, then the next
			// request's header deadline replaces it.
		})
	}
}

// deadlineBody ends the read deadline with the body: a handler that works
// longer than the deadline after reading its body must keep its request
// context. (net/http clears the deadline itself when it starts its
// background read at the body's end; clearing it here too keeps that
// property from resting on an implementation detail.)
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	w    *bodyWriter
	d    time.Duration
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.w.timedOut(b.d)
	default:
		b.once.Do(func() { b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

// bodyWriter answers 408 for a request whose body timed out and drops what
// the handler writes after that (its answer to a body it could not read,
// a 400, would be a terminal code for what is a slow network).
type bodyWriter struct {
	http.ResponseWriter
	mu      sync.Mutex
	wrote   bool // a status was written, by the handler or by timedOut
	dropped bool // the 408 was written: the handler's writes go nowhere
}

func (w *bodyWriter) timedOut(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wrote {
		return
	}
	w.wrote, w.dropped = true, true
	h := w.ResponseWriter.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Connection", "close")
	w.ResponseWriter.WriteHeader(http.StatusRequestTimeout)
	wire.WriteJSON(w.ResponseWriter, wire.Problem{
		Type: "about:blank", Title: http.StatusText(http.StatusRequestTimeout), Status: http.StatusRequestTimeout,
		Detail: "the request body did not arrive within " + d.String() + "; nothing was done: retry",
		Code:   parley.CodeUnavailable,
	})
}

func (w *bodyWriter) WriteHeader(status int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dropped {
		return
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(status)
}

func (w *bodyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dropped {
		return len(p), nil
	}
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

func (w *bodyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
