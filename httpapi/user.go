package httpapi

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/wire"
)

// sessions is what login and logout need besides the use cases: the
// password hash guards, the chain's identity cache, and the cookie policy.
type sessions struct {
	calls
	hashes       hashGate
	backoff      *ratelimit.Backoff
	installs     installs
	ident        *middleware.Identifier
	metrics      *metrics.Metrics
	secureCookie bool
	log          *slog.Logger
}

type loginBody struct {
	Login     string `json:"login"`
	Password  string `json:"password"`
	DeviceID  string `json:"device_id"`
	InstallID string `json:"install_id"`
}

type loginReply struct {
	User     string `json:"user"`
	DeviceID string `json:"device_id"`
	Token    string `json:"token,omitempty"` // not to a browser: the cookie is its credential
}

// handleLogin checks a password and issues a device token, also set as an
// HttpOnly SameSite=Strict cookie for browsers (sessionCookie). A browser's
// login (fromBrowser) gets the cookie only: the token stays out of reach
// of the page's scripts.
//
// Before any hash: the failures of the login name from this client
// address, or from this known install (LoginBackoff, see backoffKey; an
// unknown name is treated exactly like a known one), may refuse it with 429
// RATE_LIMITED and Retry-After, and the hash waits for a slot of the
// PasswordGate (503 UNAVAILABLE when it waits too long).
func handleLogin(s sessions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b loginBody
		if err := decode(w, r, &b); err != nil {
			s.writeError(w, err, "login")
			return
		}
		req := parley.LoginRequest{Login: b.Login, Password: b.Password, DeviceID: b.DeviceID, InstallID: b.InstallID}
		if err := parley.ValidateLogin(req); err != nil {
			s.writeError(w, err, "login")
			return
		}
		// The canonical name is the login's part of the key: "Ana" and
		// "ana" are one name. An account's id and email are two names, each
		// with its own count (keying them together would tell who owns an
		// email).
		_, name, err := parley.ResolveLogin(b.Login)
		if err != nil {
			s.writeError(w, err, "login")
			return
		}
		key, reason := s.backoffKey(r, name, req)
		if ok, wait := s.backoff.Begin(key); !ok {
			if s.metrics != nil {
				s.metrics.RateLimited(bucketLoginFailures, "http")
				s.metrics.LoginRefused(reason)
			}
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			wire.WriteProblem(w, parley.CodeRateLimited, "too many failed logins for this account from here; retry after the time in Retry-After", "")
			return
		}
		result := ratelimit.Abandoned
		defer func() { s.backoff.End(key, result) }()

		release, err := s.hashes.acquire(r.Context(), r)
		if err != nil {
			if s.metrics != nil {
				s.metrics.LoginRefused("busy")
			}
			s.writeError(w, err, "login")
			return
		}
		ctx, cancel := s.ctx(r)
		sess, err := s.app.Login(ctx, req)
		cancel()
		release()
		switch parley.ErrorCode(err) {
		case "":
			result = ratelimit.Succeeded
		case parley.CodeUnauthenticated:
			result = ratelimit.Failed
		}
		if err != nil {
			if result == ratelimit.Failed {
				// Never the password: the name tried, where from, and why.
				s.log.Info("login failed", "login", name, "addr", parley.CallerFromContext(r.Context()).Addr.String(),
					"request_id", parley.RequestIDFromContext(r.Context()))
			}
			s.writeError(w, err, "login")
			return
		}
		middleware.NoteUser(r.Context(), sess.User)
		s.log.Info("login", "user", sess.User, "device", sess.DeviceID, "new_install", sess.Replaced,
			"addr", parley.CallerFromContext(r.Context()).Addr.String(), "request_id", parley.RequestIDFromContext(r.Context()))
		// A login that replaced the device's install revoked the user's
		// other tokens (app.Login): this chain forgets its cached lookups.
		if sess.Replaced {
			s.ident.ForgetUser(sess.User)
		}
		http.SetCookie(w, s.sessionCookie(r, sess.Token))
		reply := loginReply{User: sess.User, DeviceID: sess.DeviceID, Token: sess.Token}
		if fromBrowser(r) {
			reply.Token = ""
		}
		encode(w, http.StatusOK, reply)
	})
}

// installs is what the login backoff asks the store.
type installs interface {
	KnownInstall(ctx context.Context, login, installID string) (bool, error)
}

// backoffKey is the login backoff's key of a login attempt, and the
// refusal reason that goes with it. Failures count per (login name, client
// address; an IPv6 address by its /64), so a guesser's failures slow down
// only the guesser's address: the owner, elsewhere, is never delayed. A
// login carrying an install id that already has a device of the user
// counts on its own (login name, install) pair instead, so the owner's own
// app is not delayed even from the guesser's address (a shared NAT, the
// same /64). A store that cannot answer leaves the address key.
func (s sessions) backoffKey(r *http.Request, name string, req parley.LoginRequest) (key, reason string) {
	ctx, cancel := s.ctx(r)
	known, err := s.installs.KnownInstall(ctx, req.Login, req.InstallID)
	cancel()
	if err == nil && known {
		return name + "\x00install\x00" + req.InstallID, "backoff_install"
	}
	addr := middleware.AddrSubject(parley.CallerFromContext(r.Context()).Addr)
	return name + "\x00addr\x00" + addr, "backoff_address"
}

// sessionCookie is the session cookie for token: HttpOnly, SameSite=Strict,
// Path=/; named __Host-parley_session and Secure when the server is told it
// is reached over TLS (--secure-cookie) or the request came over TLS, else
// parley_session (a browser drops a Secure cookie set over plain HTTP).
func (s sessions) sessionCookie(r *http.Request, token string) *http.Cookie {
	secure := s.secureCookie || r.TLS != nil
	return &http.Cookie{
		Name: wire.SessionCookieName(secure), Value: token, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure,
	}
}

// fromBrowser reports whether a browser made r: every current browser
// sends Sec-Fetch-Mode (and Origin on a POST) with a fetch; the Go client
// and curl send neither.
func fromBrowser(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Mode") != "" || r.Header.Get("Origin") != ""
}

// bucketLoginFailures labels logins refused by the per-account backoff in
// parley_rate_limited_total.
const bucketLoginFailures = "login_account"

// handleLogout revokes the caller's token and clears the cookie.
func handleLogout(s sessions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := wire.SessionToken(r, s.secureCookie)
		if token == "" {
			wire.WriteProblem(w, parley.CodeUnauthenticated, "a bearer token or session cookie is required", "")
			return
		}
		ctx, cancel := s.ctx(r)
		defer cancel()
		var user string // the token's user, when the chain knew the token
		if c := parley.CallerFromContext(r.Context()); c.Known {
			user = c.Principal.User
		}
		if err := s.app.Logout(ctx, token, user); err != nil {
			s.writeError(w, err, "logout")
			return
		}
		s.ident.ForgetToken(token)
		s.log.Info("logout", "user", parley.CallerFromContext(r.Context()).Principal.User, "request_id", parley.RequestIDFromContext(r.Context()))
		gone := s.sessionCookie(r, "")
		gone.MaxAge = -1
		http.SetCookie(w, gone)
		w.WriteHeader(http.StatusNoContent)
	})
}

// handleMetrics serves /metrics on the public listener to loopback clients
// and to those the configuration's metrics.allow names; anyone else gets
// the 404 of a path that does not exist (the metrics tell who is online
// and how busy the server is). A request from loopback that a proxy
// relayed (X-Forwarded-For, Forwarded, X-Real-IP) is not the proxy's own:
// unless a trusted proxy resolved its client, it is refused, so a local
// reverse proxy left out of trusted_proxies does not publish the metrics.
func handleMetrics(c calls, metrics http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := parley.CallerFromContext(r.Context()).Addr
		relayed := r.Header.Get("X-Forwarded-For") != "" || r.Header.Get("Forwarded") != "" || r.Header.Get("X-Real-Ip") != ""
		if !c.config(r).MetricsAllowed(addr) || (relayed && addr.Unmap().IsLoopback()) {
			wire.WriteProblem(w, parley.CodeNotFound, "no such route", "")
			return
		}
		metrics.ServeHTTP(w, r)
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
func handleReadyz(c calls, ping func(context.Context) error, draining func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining != nil && draining() {
			wire.WriteProblem(w, parley.CodeUnavailable, "draining", "")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ping(ctx); err != nil {
			c.writeError(w, err, "readyz")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "ready\n")
	})
}

// handleNotFound answers API paths no route serves: 405 with Allow when the
// path has routes for other methods (the catch-all would otherwise hide
// them), else 404 NOT_FOUND; both as problem+json.
func handleNotFound(mux *http.ServeMux, catchAll ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" && !slices.Contains(catchAll, pattern) {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			wire.WriteProblem(w, parley.CodeNotFound, "no such route", "")
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusMethodNotAllowed)
		wire.WriteJSON(w, wire.Problem{
			Type: "about:blank", Title: http.StatusText(http.StatusMethodNotAllowed), Status: http.StatusMethodNotAllowed,
			Detail: r.Method + " is not served here; see Allow", Code: parley.CodeInvalidArgument,
		})
	})
}

// Directory paging: GET /api/users.
const (
	DefaultDirectoryPage = 20
	MaxDirectoryPage     = parley.MaxAdminPage
)

// directoryReply is a page of the user directory; next is present when
// there is more (pass it as cursor).
type directoryReply struct {
	Users []userEntry `json:"users"`
	Next  string      `json:"next,omitempty"`
}

// handleDirectory lists the active users the caller may find, by id or
// email prefix: GET /api/users?q=&limit=&cursor= (the directory policy in
// force decides whether everyone or only people who share a conversation
// with the caller).
func handleDirectory(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, err := queryLimit(r, DefaultDirectoryPage, MaxDirectoryPage)
		q := r.URL.Query()
		for _, name := range []string{"q", "cursor"} {
			if vs, ok := q[name]; err == nil && ok && len(vs) != 1 {
				err = parley.Errorf(parley.CodeInvalidArgument, "%s must be given once", name)
			}
		}
		dq := parley.DirectoryQuery{Prefix: q.Get("q"), After: q.Get("cursor"), Limit: limit}
		if err == nil {
			_, _, err = parley.CheckDirectoryQuery(dq)
		}
		if err != nil {
			c.writeError(w, err, "directory")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		page, err := c.app.Directory(ctx, caller(r), dq)
		if err != nil {
			c.writeError(w, err, "directory")
			return
		}
		out := directoryReply{Users: make([]userEntry, len(page.Items))}
		for i, u := range page.Items {
			out.Users[i] = userEntry{ID: u.ID, DisplayName: u.DisplayName}
		}
		if page.HasMore {
			out.Next = page.Next
		}
		encode(w, http.StatusOK, out)
	})
}
