package middleware

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/parleychat/parley"
)

// RequestIDHeader carries the id of a request on its response, and in every
// log line about it (the access line, an internal error), so an operator
// can go from a client's report to the server's lines.
const RequestIDHeader = "X-Request-Id"

// StatusClientClosed is the status an access line gives a request whose
// client hung up before it was answered (nginx's 499): nobody read the
// answer, and nothing went wrong on the server's side.
const StatusClientClosed = 499

// requestInfo is what the access line learns while the request runs: the
// chain and the handlers write it, the line reads it after the handler.
type requestInfo struct {
	mu sync.Mutex
	// user is the identified caller, or the account a login opened.
	user string
}

type requestInfoKey struct{}

// NoteUser names the user a request acted for, for its access line, when
// the chain could not identify one (a login names the account it opened).
func NoteUser(ctx context.Context, user string) {
	if ri, ok := ctx.Value(requestInfoKey{}).(*requestInfo); ok {
		ri.mu.Lock()
		ri.user = user
		ri.mu.Unlock()
	}
}

// access writes one line per request at info: method, route template
// (never the raw path), status, duration, bytes written, user and request
// id, refusals (401, 403, 429, 503) included. It gives the request its id
// (the X-Request-Id response header). A request whose client hung up
// before its answer is logged with status 499, never as an error. A
// WebSocket upgrade that succeeded (101) is left to the gateway, which logs
// the socket's whole lifetime with its close code when it ends.
func (c *Chain) access(p Policy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := c.Now()
		id, ri := parley.NewID(), &requestInfo{}
		w.Header().Set(RequestIDHeader, id)
		sw := statusOf(w)
		// The id goes in the context on its own (parley.RequestIDFromContext)
		// for the handlers and the gateway; ri only for this line.
		ctx := parley.NewContextWithRequestID(r.Context(), id)
		r = r.WithContext(context.WithValue(ctx, requestInfoKey{}, ri))
		next.ServeHTTP(sw, r)
		status := sw.status()
		if status == http.StatusSwitchingProtocols {
			return
		}
		if errors.Is(r.Context().Err(), context.Canceled) {
			status = StatusClientClosed
		}
		ri.mu.Lock()
		user := ri.user
		ri.mu.Unlock()
		c.Log.LogAttrs(r.Context(), slog.LevelInfo, "http request",
			slog.String("method", r.Method),
			slog.String("route", p.Pattern),
			slog.Int("status", status),
			slog.Float64("duration_ms", float64(c.Now().Sub(start))/float64(time.Millisecond)),
			slog.Int64("bytes", sw.bytes),
			slog.String("user", user),
			slog.String("request_id", id),
		)
	})
}
