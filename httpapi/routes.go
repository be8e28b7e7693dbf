// Package httpapi serves Parley's HTTP API (SPEC §4): login, logout, health
// and readiness today, and the WebSocket gateway at /ws. Errors are RFC 9457
// problem details carrying the protocol code (wire.WriteProblem).
package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/parleychat/parley"
)

// Deps are what the handlers need.
type Deps struct {
	Store   parley.Store
	Gateway http.Handler // GET /ws
	Log     *slog.Logger
	// Draining reports a graceful drain in progress: /readyz answers 503.
	Draining func() bool
	// Revoke ends the sockets that use a token, after a logout (nil: none).
	Revoke func(token string)
	// SecureCookie sets the Secure attribute on the session cookie (serve
	// over TLS, or behind a TLS-terminating proxy).
	SecureCookie bool
}

// NewHandler returns the HTTP API: every route is listed here.
func NewHandler(d Deps) http.Handler {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("POST /api/login", handleLogin(d))
	mux.Handle("POST /api/logout", handleLogout(d))
	mux.Handle("GET /healthz", handleHealthz())
	mux.Handle("GET /readyz", handleReadyz(d))
	mux.Handle("GET /ws", d.Gateway)
	mux.Handle("/api/", handleNotFound())
	return mux
}
