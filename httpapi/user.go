package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// maxBody bounds request bodies the API reads.
const maxBody = 64 << 10

// requestTimeout bounds the store calls of one request.
const requestTimeout = 10 * time.Second

type loginBody struct {
	Login     string `json:"login"`
	Password  string `json:"password"`
	DeviceID  string `json:"device_id"`
	InstallID string `json:"install_id"`
}

type loginReply struct {
	User     string `json:"user"`
	DeviceID string `json:"device_id"`
	Token    string `json:"token"`
}

// handleLogin checks a password and issues a device token, also set as an
// HttpOnly SameSite=Strict cookie for browsers.
func handleLogin(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b loginBody
		if err := decode(w, r, &b); err != nil {
			writeError(w, d.Log, err, "login")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		s, err := d.Store.Login(ctx, parley.LoginRequest{Login: b.Login, Password: b.Password, DeviceID: b.DeviceID, InstallID: b.InstallID})
		if err != nil {
			writeError(w, d.Log, err, "login")
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name: wire.SessionCookie, Value: s.Token, Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: d.SecureCookie,
		})
		encode(w, http.StatusOK, loginReply{User: s.User, DeviceID: s.DeviceID, Token: s.Token})
	})
}

// handleLogout revokes the caller's token and clears the cookie.
func handleLogout(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := wire.BearerToken(r)
		if token == "" {
			wire.WriteProblem(w, parley.CodeUnauthenticated, "a bearer token or session cookie is required", "")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		if err := d.Store.Logout(ctx, token); err != nil {
			writeError(w, d.Log, err, "logout")
			return
		}
		if d.Revoke != nil {
			d.Revoke(token)
		}
		http.SetCookie(w, &http.Cookie{Name: wire.SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: d.SecureCookie})
		w.WriteHeader(http.StatusNoContent)
	})
}

// handleHealthz answers while the process is up.
func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "ok\n")
	})
}

// handleReadyz answers 200 when the store answers and no drain is running.
func handleReadyz(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.Draining != nil && d.Draining() {
			wire.WriteProblem(w, parley.CodeUnavailable, "draining", "")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := d.Store.Ping(ctx); err != nil {
			writeError(w, d.Log, err, "readyz")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "ready\n")
	})
}

func handleNotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteProblem(w, parley.CodeNotFound, "no such API route", "")
	})
}

// decode reads a JSON body of at most maxBody bytes into v. Errors are
// INVALID_ARGUMENT.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return parley.Errorf(parley.CodeInvalidArgument, "request body over %d bytes", maxBody)
		}
		return parley.Errorf(parley.CodeInvalidArgument, "request body must be one JSON object: %v", err)
	}
	if dec.More() {
		return parley.Errorf(parley.CodeInvalidArgument, "request body must be one JSON object")
	}
	return nil
}

// encode writes v as JSON with status.
func encode(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError answers err; an error without a protocol code is logged with a
// request id and answered UNAVAILABLE with a generic message and that id.
func writeError(w http.ResponseWriter, log *slog.Logger, err error, op string) {
	var pe *parley.Error
	if errors.As(err, &pe) {
		wire.WriteProblem(w, pe.Code, pe.Msg, "")
		return
	}
	id := parley.NewID()
	log.Error("internal error", "op", op, "request_id", id, "err", err)
	wire.WriteProblem(w, parley.CodeUnavailable, parley.InternalMessage, id)
}
