package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// ServeHTTP upgrades GET /ws. The token comes as a bearer token or the
// session cookie; without a valid one the upgrade is refused with 401 and
// a problem body whose code is UNAUTHENTICATED or STALE_INSTALL.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Counted from the start: http.Server.Shutdown stops tracking a request
	// once it is hijacked, and Hub.Shutdown must not miss it.
	h.wg.Add(1)
	defer h.wg.Done()
	if h.draining.Load() {
		w.Header().Set("Retry-After", "1")
		wire.WriteProblem(w, parley.CodeUnavailable, "server is draining; reconnect to another gateway", "")
		return
	}
	token := wire.SessionToken(r, h.o.SecureCookie)
	if token == "" {
		wire.WriteProblem(w, parley.CodeUnauthenticated, "a bearer token or session cookie is required", "")
		return
	}
	p, looked, err := h.authenticate(r, token)
	if err != nil {
		e := h.app.Explain(err, "authenticate", "")
		wire.WriteProblem(w, e.Code, e.Msg, e.RequestID)
		return
	}
	if !h.reserve(p.User) {
		h.stats.Refused.Add(1)
		w.Header().Set("Retry-After", strconv.Itoa(int(socketsRetryAfter.Seconds())))
		wire.WriteProblem(w, parley.CodeRateLimited, fmt.Sprintf("too many open sockets for this user (at most %d); close one, or retry after Retry-After", h.o.MaxUserSockets), "")
		return
	}
	c := h.accept(w, r, p, token)
	if c == nil {
		return // Accept has answered (403 for a foreign origin)
	}
	h.register(c)
	h.checkLate(c, looked) // revoked while it was being upgraded: ask again
	// The socket runs on its reader's goroutine and the handler returns:
	// net/http's goroutine, its stack and its buffers for the request are
	// not kept for the socket's life (an idle socket is one goroutine).
	method, rid := r.Method, parley.RequestIDFromContext(r.Context())
	h.wg.Add(1) // before this handler's Done: Shutdown still waits for the socket
	go func() {
		defer h.wg.Done()
		c.serve()
		h.remove(c)
		h.logLifetime(method, rid, c)
	}()
}

// authenticate returns the principal of the upgrade's token and when it
// was looked up. Behind the HTTP chain the token was just resolved
// (through its cache), and that answer is used: a reconnect storm then
// costs one lookup per socket, not two.
func (h *Hub) authenticate(r *http.Request, token string) (parley.Principal, time.Time, error) {
	caller := parley.CallerFromContext(r.Context())
	p, looked := caller.Principal, caller.Looked
	var err error
	switch {
	case caller.Token == token && caller.Code == parley.CodeUnavailable:
		// The chain could not look the token up (the store is down): 503,
		// never 401, which would make the client drop its session.
		err = parley.Errorf(parley.CodeUnavailable, "the server cannot check your token right now; reconnect after Retry-After")
	case !caller.Known || caller.Token != token:
		looked = time.Now()
		ctx, cancel := context.WithTimeout(r.Context(), h.timeout())
		p, err = h.store.Authenticate(ctx, token)
		cancel()
	}
	return p, looked, err
}

// accept completes the upgrade of a socket of p's, whose slot is reserved.
// It returns nil, with the slot given back, when websocket.Accept refused
// the upgrade (and answered it).
func (h *Hub) accept(w http.ResponseWriter, r *http.Request, p parley.Principal, token string) *conn {
	hw := &hijackWriter{ResponseWriter: w, timeout: h.o.WriteTimeout}
	ws, err := websocket.Accept(hw, r, &websocket.AcceptOptions{
		OriginPatterns:  h.o.OriginPatterns,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		h.release(p.User)
		return nil
	}
	ws.SetReadLimit(parley.MaxFrameBytes)
	c := newConn(h.ctx(), h, ws, p, token)
	c.raw = hw.raw
	return c
}

// logLifetime writes a socket's access line when it ends, at info: who,
// how long, and its close code and reason (the HTTP access line leaves
// the 101 of an upgrade to this one).
func (h *Hub) logLifetime(method, requestID string, c *conn) {
	code, reason, by := c.end()
	h.log.LogAttrs(context.Background(), slog.LevelInfo, "ws connection",
		slog.String("method", method),
		slog.String("route", "GET /ws"),
		slog.Int("status", http.StatusSwitchingProtocols),
		slog.Int("close_code", int(code)),
		slog.String("close_reason", reason),
		slog.String("closed_by", by),
		slog.Float64("duration_ms", float64(time.Since(c.started))/float64(time.Millisecond)),
		slog.String("user", c.p.User),
		slog.String("device", c.p.DeviceID),
		slog.String("request_id", requestID),
	)
}
