// Package httpapi serves Parley's HTTP API (SPEC §4): login and logout,
// conversations and members, messages, sync, read, ack and recall, the
// operations API under /api/admin/, incoming webhooks, metrics, health and
// readiness, and the WebSocket gateway at /ws. Every route runs behind the
// middleware chain (identify → rate limit → authorize → API metrics →
// activity metrics) before its handler reads the body. Errors are RFC 9457
// problem details carrying the protocol code (wire.WriteProblem); every
// success body is the WebSocket reply frame without "t" and "rid".
package httpapi

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/wire"
)

// Deps are what the handlers need.
type Deps struct {
	Store   parley.Store
	Gateway http.Handler // GET /ws
	Log     *slog.Logger
	// Config returns the configuration in force (hot-reloaded); nil means
	// the documented defaults.
	Config func() *config.Config
	// Identifier resolves tokens for the chain (nil: a fresh one over
	// Store.Authenticate).
	Identifier *middleware.Identifier
	// Limiter returns the rate-limit store in force (nil: a local one).
	Limiter func() ratelimit.Store
	// Metrics records what /metrics serves (nil: nothing, and /metrics
	// answers 404).
	Metrics *metrics.Metrics
	// MetricsElsewhere keeps GET /metrics off this handler (404): the
	// admin listener (--admin-addr) serves it.
	MetricsElsewhere bool
	// Publish announces a committed change to the gateways (nil: none):
	// every write calls it after its commit.
	Publish func(parley.Notice)
	// Draining reports a graceful drain in progress: /readyz answers 503.
	Draining func() bool
	// Revoke ends the sockets that use a token, after a logout (nil: none).
	Revoke func(token string)
	// RevokeUser ends a user's sockets whose tokens stopped working and
	// tells every gateway to do the same, after a disable (nil: none).
	RevokeUser func(user string)
	// SecureCookie names the session cookie __Host-parley_session and
	// marks it Secure (serve behind a TLS-terminating proxy); a request
	// that came over TLS gets that cookie anyway.
	SecureCookie bool
	// Origins are the browser origins besides the server's own that may
	// make state-changing requests (--origins; the patterns the gateway
	// allows for /ws: "https://app.example.com", "app.example.com",
	// "*.example.com").
	Origins []string
	// ExportLink signs a download link for a done export job, valid until
	// exp (export.Keyring.Link); nil: GET /exports/{id} gives no url.
	ExportLink func(job, user string, exp time.Time) string
	// KickExports wakes the export workers after a job is created (nil:
	// they find it on their next poll).
	KickExports func()
	// Download serves GET /download/{id} (export.Download); nil: 404.
	Download http.Handler
	// Web serves the browser app (web.Site): GET /assets/ and the shell
	// for navigation requests (nil: no app; those paths answer 404).
	Web http.Handler
	Now func() time.Time

	// Login protections, built in (no configuration turns them off).
	// Hashes caps concurrent password hashes (nil: a gate of
	// DefaultPasswordHashes slots); a request that waits longer than
	// HashWait for a slot (0: the store timeout) is 503 UNAVAILABLE.
	Hashes   *PasswordGate
	HashWait time.Duration
	// LoginBackoff slows down failed logins per login name, from any
	// address (nil: ratelimit.NewBackoff's defaults: 5 free failures, then
	// 1s doubling up to 15 minutes).
	LoginBackoff *ratelimit.Backoff
}

// NewHandler returns the HTTP API. Every route is listed here with its
// policy: rate-limit bucket (config rate_limits key), who may call it, and
// which statuses count as a business action. Only statuses that always mean
// a new state are on that allow-list (201 of a first send, not the 200 of a
// replay; member changes and reads answer 200 for no-ops too, so they are
// left off).
func NewHandler(d Deps) http.Handler {
	d = d.withDefaults()
	chain := &middleware.Chain{
		Identifier: d.Identifier, Limiter: d.Limiter, Config: d.Config, Log: d.Log, Now: d.Now,
		SecureCookie: d.SecureCookie,
	}
	if d.Metrics != nil {
		chain.Metrics = d.Metrics
		d.Metrics.InitRateLimited(bucketLoginFailures, "http")
	}
	mux := http.NewServeMux()
	safety := newBrowserSafety(d.Origins)
	route := func(pattern string, p middleware.Policy, h http.Handler) {
		p.Pattern = pattern
		mux.Handle(pattern, chain.Wrap(p, safety.wrap(pattern, h)))
	}
	public := func(bucket string) middleware.Policy {
		return middleware.Policy{Bucket: bucket, Access: middleware.Public}
	}
	user := func(bucket string, activity ...int) middleware.Policy {
		return middleware.Policy{Bucket: bucket, Access: middleware.Identified, Activity: activity}
	}
	admin := middleware.Policy{Bucket: ratelimit.BucketAdmin, Access: middleware.Permitted, Rule: "admin"}

	// Sessions and the socket.
	route("POST /api/login", public(ratelimit.BucketLogin), handleLogin(d))
	route("POST /api/logout", public(""), handleLogout(d))
	route("GET /api/me", user(ratelimit.BucketRead), handleMe())
	route("GET /ws", public(ratelimit.BucketWSConnect), d.Gateway)

	// Conversations and members.
	route("GET /api/convs", user(ratelimit.BucketRead), handleConvs(d))
	route("POST /api/convs", user(ratelimit.BucketConvs, http.StatusCreated), handleCreateConv(d))
	route("POST /api/convs/{id}/members", user(ratelimit.BucketConvs), handleAddMember(d))
	route("DELETE /api/convs/{id}/members/{user}", user(ratelimit.BucketConvs), handleRemoveMember(d))

	// Messages and cursors.
	route("POST /api/convs/{id}/messages", user(ratelimit.BucketSend, http.StatusCreated), handleSend(d))
	route("GET /api/convs/{id}/events", user(ratelimit.BucketRead), handleEvents(d))
	route("GET /api/convs/{id}/events/{seq}", user(ratelimit.BucketRead), handleFetch(d))
	route("POST /api/convs/{id}/read", user(ratelimit.BucketRead), handleRead(d))
	route("POST /api/convs/{id}/ack", user(ratelimit.BucketRead), handleAck(d))
	route("POST /api/convs/{id}/recall", user(ratelimit.BucketSend, http.StatusCreated), handleRecall(d))

	// Operations (admin permission rule).
	route("GET /api/admin/users", admin, handleAdminUsers(d))
	route("POST /api/admin/users", admin, handleAdminCreateUser(d))
	route("POST /api/admin/users/{id}/disable", admin, handleAdminSetDisabled(d, true))
	route("POST /api/admin/users/{id}/enable", admin, handleAdminSetDisabled(d, false))
	route("GET /api/admin/convs", admin, handleAdminConvs(d))
	route("GET /api/admin/convs/{id}", admin, handleAdminConv(d))
	route("POST /api/admin/convs/{id}/rollback", admin, handleAdminRollback(d))
	route("PUT /api/admin/convs/{id}/retention", admin, handleAdminRetention(d))
	route("POST /api/admin/convs/{id}/purge", admin, handleAdminPurge(d))
	route("POST /api/admin/hooks", admin, handleAdminCreateHook(d))
	route("GET /api/admin/hooks", admin, handleAdminHooks(d))
	route("DELETE /api/admin/hooks/{id}", admin, handleAdminDeleteHook(d))
	route("GET /api/admin/config", admin, handleAdminConfig(d))
	route("GET /api/admin/audit", admin, handleAdminAudit(d))

	// Exports (SPEC §5): the access mode gates creating jobs; a download
	// link is its own credential (signed, short-lived, re-checked).
	route("POST /exports", middleware.Policy{Bucket: ratelimit.BucketExports, Access: middleware.Identified, Feature: "exports", Activity: []int{http.StatusAccepted}}, handleCreateExport(d))
	route("GET /exports/{id}", user(ratelimit.BucketRead), handleExport(d))
	if d.Download != nil {
		route("GET /download/{id}", public(ratelimit.BucketDownload), d.Download)
	}
	route("GET /api/admin/exports", admin, handleAdminExports(d))
	route("POST /api/admin/exports/{id}/revoke", admin, handleAdminRevokeExport(d))

	// Incoming webhooks: signed, not token-authenticated.
	route("POST /hooks/{id}", middleware.Policy{Bucket: ratelimit.BucketHooks, Access: middleware.Public, Feature: "webhooks", Activity: []int{http.StatusCreated}}, handleHook(d))

	// Operations endpoints.
	route("GET /healthz", public(""), handleHealthz())
	route("GET /readyz", public(""), handleReadyz(d))
	if d.Metrics != nil && !d.MetricsElsewhere {
		route("GET /metrics", public(""), d.Metrics.Handler())
	}
	// The browser app (SPEC §6 "SPA hosting"): hashed assets, and the
	// shell for a navigation to any path no route above owns. Everything
	// else nobody serves is 404 (405 with Allow) problem+json.
	if d.Web != nil {
		route("GET /assets/", public(""), d.Web)
	}
	catchAll := []string{"/api/", "/hooks/", "/exports/", "/download/", "/assets/", "/", "GET /exports"}
	notFound := handleNotFound(mux, catchAll...)
	for _, prefix := range catchAll[:4] {
		route(prefix, public(""), notFound)
	}
	if d.Web == nil {
		route("/assets/", public(""), notFound)
	}
	route("/", public(""), handleNavigation(d.Web, notFound))
	// /exports is a page of the app as well as the path jobs are created
	// at (POST): without its own GET route the mux would redirect a reload
	// of the page to /exports/, the API's 404.
	route("GET /exports", public(""), handleNavigation(d.Web, notFound))
	return nosniff(mux)
}

// NewStarting returns what a server answers while its store is not open yet
// (PostgreSQL unreachable at start; SPEC §9): /healthz 200, since the
// process is up, and every other path — /readyz, the API, login, the /ws
// upgrade — 503 UNAVAILABLE with Retry-After, so a client keeps its
// requests and retries them. The server swaps in NewHandler once the store
// is open.
func NewStarting() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", handleHealthz())
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteProblem(w, parley.CodeUnavailable, "the server is starting and cannot reach its store yet; retry after Retry-After", "")
	}))
	return mux
}

func (d Deps) withDefaults() Deps {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Config == nil {
		def := config.Default()
		d.Config = func() *config.Config { return def }
	}
	if d.Identifier == nil {
		d.Identifier = middleware.NewIdentifier(d.Store.Authenticate, middleware.IdentifierOptions{})
	}
	if d.Limiter == nil {
		local := ratelimit.NewMemory(ratelimit.MemoryOptions{})
		d.Limiter = func() ratelimit.Store { return local }
	}
	if d.Publish == nil {
		d.Publish = func(parley.Notice) {}
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Hashes == nil {
		d.Hashes = NewPasswordGate(0)
	}
	if d.LoginBackoff == nil {
		d.LoginBackoff = ratelimit.NewBackoff(ratelimit.BackoffOptions{})
	}
	return d
}

// hashWait is how long a request may wait for a password hash slot.
func (d Deps) hashWait(r *http.Request) time.Duration {
	if d.HashWait > 0 {
		return d.HashWait
	}
	return d.config(r).StoreTimeout()
}
