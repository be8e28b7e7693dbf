// Package httpapi serves Parley's HTTP API (docs/protocol.md): login and logout,
// the account (display name, password change, signed-in devices),
// conversations and members, direct conversations and the user directory,
// messages and replies, sync and threads, search, read, ack, recall, edits,
// reactions and versions, Web Push subscriptions and levels, the
// operations API under /api/admin/, incoming webhooks, metrics, health and
// readiness, and the WebSocket gateway at /ws. Every route runs behind the
// middleware chain (identify → rate limit → authorize → API metrics →
// activity metrics) before its handler reads the body. Errors are RFC 9457
// problem details carrying the protocol code (wire.WriteProblem); every
// success body is the WebSocket reply frame without "t" and "rid".
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/upload"
	"github.com/parleychat/parley/wire"
)

// Deps are what the handlers need.
type Deps struct {
	// App runs every use case the routes answer (required).
	App *app.Service
	// Store is what the handlers read besides the use cases: identity for
	// the chain, readiness, the operators' listings and the audit log.
	Store   Store
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
	// Draining reports a graceful drain in progress: /readyz answers 503.
	Draining func() bool
	// SecureCookie (the server is reached over TLS) also sends
	// Strict-Transport-Security on every response. It names the session
	// cookie __Host-parley_session and
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
	// Download serves GET /download/{id} (export.Download); nil: 404.
	Download http.Handler
	// Uploads serves the tus routes under /api/uploads (upload.Handler);
	// nil: 404.
	Uploads http.Handler
	// Web serves the browser app (web.Site): GET /assets/ and the shell
	// for navigation requests (nil: no app; those paths answer 404).
	Web http.Handler
	// Demo names the accounts --demo created (nil: none); GET /api/server
	// tells the sign-in page.
	Demo *DemoAccounts
	// RecallWindow is the store's recall window (parley.Options), which
	// GET /api/server tells clients (0: parley.DefaultRecallWindow, the
	// store's own default, as parley serve opens it).
	RecallWindow time.Duration
	Now          func() time.Time

	// Login protections, built in (no configuration turns them off).
	// Hashes caps concurrent password hashes (nil: a gate of
	// DefaultPasswordHashes slots); a request that waits longer than
	// HashWait for a slot (0: the store timeout) is 503 UNAVAILABLE.
	Hashes   *PasswordGate
	HashWait time.Duration
	// LoginBackoff slows down failed logins per (login name, client
	// address), or per (login name, install) for an install the user
	// already has (nil: ratelimit.NewBackoff's defaults: 5 free failures,
	// then 1s doubling up to 15 minutes).
	LoginBackoff *ratelimit.Backoff
}

// Store is what the HTTP API reads of parley.Store itself; the writes go
// through the application layer (Deps.App).
type Store interface {
	Authenticate(ctx context.Context, token string) (parley.Principal, error)
	KnownInstall(ctx context.Context, login, installID string) (bool, error)
	Ping(ctx context.Context) error
	AppendAudit(ctx context.Context, e parley.AuditEntry) (parley.AuditEntry, error)
	FinishAudit(ctx context.Context, id int64, outcome string) error
	Audit(ctx context.Context, q parley.AuditQuery) ([]parley.AuditEntry, error)
	AdminUsers(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminUser], error)
	AdminConvs(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminConv], error)
	AdminExports(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminExport], error)
	AdminHooks(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.Hook], error)
}

// NewHandler returns the HTTP API. Every route is listed here with its
// policy: rate-limit bucket (config rate_limits key), who may call it, and
// which statuses count as a business action. Only statuses that always mean
// a new state are on that allow-list (201 of a first send, not the 200 of a
// replay; member changes and reads answer 200 for no-ops too, so they are
// left off). Each handler maker takes what its handler uses.
func NewHandler(d Deps) http.Handler {
	d = d.withDefaults()
	rt := newRouter(d)
	c := calls{app: d.App, current: d.Config}
	o := ops{calls: c, store: d.Store, log: d.Log}
	hashes := hashGate{gate: d.Hashes, wait: d.HashWait, calls: c}
	s := sessions{calls: c, hashes: hashes, backoff: d.LoginBackoff, installs: d.Store, ident: d.Identifier, metrics: d.Metrics,
		secureCookie: d.SecureCookie, log: d.Log}
	x := exportLinks{link: d.ExportLink, now: d.Now}

	// Sessions and the socket.
	rt.route("GET /api/server", public(""), handleServer(d.Demo, d.RecallWindow, d.Config))
	rt.route("POST /api/login", public(ratelimit.BucketLogin), handleLogin(s))
	rt.route("POST /api/logout", public(""), handleLogout(s))
	rt.route("GET /api/me", user(ratelimit.BucketRead), handleMe(c))
	rt.routeAccount(c, s)
	rt.route("GET /ws", public(ratelimit.BucketWSConnect), d.Gateway)

	// Conversations and members.
	rt.route("GET /api/convs", user(ratelimit.BucketRead), handleConvs(c))
	rt.route("POST /api/convs", user(ratelimit.BucketConvs, http.StatusCreated), handleCreateConv(c))
	rt.route("POST /api/convs/{id}/members", user(ratelimit.BucketConvs), handleAddMember(c))
	rt.route("DELETE /api/convs/{id}/members/{user}", user(ratelimit.BucketConvs), handleRemoveMember(c))
	rt.route("POST /api/dms", user(ratelimit.BucketDMs, http.StatusCreated), handleOpenDirect(c))
	rt.route("GET /api/users", user(ratelimit.BucketUsers), handleDirectory(c))
	rt.route("GET /api/presence", user(ratelimit.BucketRead), handlePresence(c))

	// Messages and cursors.
	rt.route("POST /api/convs/{id}/messages", user(ratelimit.BucketSend, http.StatusCreated), handleSend(c))
	rt.route("GET /api/convs/{id}/events", user(ratelimit.BucketRead), handleEvents(c))
	rt.route("GET /api/convs/{id}/events/{seq}", user(ratelimit.BucketRead), handleFetch(c))
	rt.route("POST /api/convs/{id}/read", user(ratelimit.BucketRead), handleRead(c))
	rt.route("POST /api/convs/{id}/ack", user(ratelimit.BucketRead), handleAck(c))
	rt.route("POST /api/convs/{id}/recall", user(ratelimit.BucketSend, http.StatusCreated), handleRecall(c))
	rt.route("GET /api/search", user(ratelimit.BucketSearch), handleSearch(c))
	rt.routeFiles(c)

	rt.routeDerived(c)
	rt.routeUploads(d.Uploads)
	rt.routePush(c)

	rt.routeAdmin(o, hashes, d.Identifier)

	// Exports: the access mode gates creating jobs; a download link is its
	// own credential (signed, short-lived, re-checked).
	rt.route("POST /exports", middleware.Policy{Bucket: ratelimit.BucketExports, Access: middleware.Identified, Feature: "exports", Activity: []int{http.StatusAccepted}}, handleCreateExport(c, x))
	rt.route("GET /exports/{id}", user(ratelimit.BucketRead), handleExport(c, x))
	if d.Download != nil {
		rt.route("GET /download/{id}", public(ratelimit.BucketDownload), d.Download)
	}
	rt.route("GET /api/admin/exports", admin, handleAdminExports(o))
	rt.route("POST /api/admin/exports/{id}/revoke", admin, handleAdminRevokeExport(o))

	// Incoming webhooks: signed, not token-authenticated.
	rt.route("POST /hooks/{id}", middleware.Policy{Bucket: ratelimit.BucketHooks, Access: middleware.Public, Feature: "webhooks", Activity: []int{http.StatusCreated}}, handleHook(c, d.Now))

	// Operations endpoints.
	rt.route("GET /healthz", public(""), handleHealthz())
	rt.route("GET /readyz", public(""), handleReadyz(c, d.Store.Ping, d.Draining))
	if d.Metrics != nil && !d.MetricsElsewhere {
		rt.route("GET /metrics", public(""), handleMetrics(c, d.Metrics.Handler()))
	}
	rt.routeApp(d.Web)
	if d.SecureCookie {
		return hsts(nosniff(rt.mux))
	}
	return nosniff(rt.mux)
}

// routeAdmin mounts the operations API (the admin permission rule).
func (rt router) routeAdmin(o ops, hashes hashGate, ident *middleware.Identifier) {
	rt.route("GET /api/admin/users", admin, handleAdminUsers(o))
	rt.route("POST /api/admin/users", admin, handleAdminCreateUser(o, hashes))
	rt.route("POST /api/admin/users/{id}/disable", admin, handleAdminSetDisabled(o, ident, true))
	rt.route("POST /api/admin/users/{id}/enable", admin, handleAdminSetDisabled(o, ident, false))
	rt.route("GET /api/admin/convs", admin, handleAdminConvs(o))
	rt.route("GET /api/admin/convs/{id}", admin, handleAdminConv(o))
	rt.route("POST /api/admin/convs/{id}/rollback", admin, handleAdminRollback(o))
	rt.route("PUT /api/admin/convs/{id}/retention", admin, handleAdminRetention(o))
	rt.route("POST /api/admin/convs/{id}/purge", admin, handleAdminPurge(o))
	rt.route("POST /api/admin/hooks", admin, handleAdminCreateHook(o))
	rt.route("GET /api/admin/hooks", admin, handleAdminHooks(o))
	rt.route("DELETE /api/admin/hooks/{id}", admin, handleAdminDeleteHook(o))
	rt.route("GET /api/admin/config", admin, handleAdminConfig(o))
	rt.route("GET /api/admin/audit", admin, handleAdminAudit(o))
}

// routeDerived mounts the routes of edits, reactions and versions.
func (rt router) routeDerived(c calls) {
	rt.route("PATCH /api/convs/{id}/messages/{seq}", user(ratelimit.BucketEdit, http.StatusCreated), handleEdit(c))
	rt.route("PUT /api/convs/{id}/messages/{seq}/reactions/{emoji}", user(ratelimit.BucketReact, http.StatusCreated), handleReact(c, true))
	rt.route("DELETE /api/convs/{id}/messages/{seq}/reactions/{emoji}", user(ratelimit.BucketReact, http.StatusCreated), handleReact(c, false))
	rt.route("GET /api/convs/{id}/messages/{seq}/versions", user(ratelimit.BucketRead), handleVersions(c))
}

// routeFiles mounts the downloads: the owner, or a reader whose periods
// hold a message that attaches the file (app.Service.OpenFile).
func (rt router) routeFiles(c calls) {
	rt.route("GET /api/files/{id}", user(ratelimit.BucketFiles), handleFile(c))
	rt.route("GET /api/files/{id}/thumb", user(ratelimit.BucketFiles), handleThumb(c))
}

// routeUploads mounts the tus routes (nil: none). Their bodies are bytes
// (application/offset+octet-stream, which tusd checks), so the browser
// guard checks the origin only.
func (rt router) routeUploads(h http.Handler) {
	if h == nil {
		return
	}
	rt.mux.Handle("OPTIONS "+upload.BasePath, rt.chain.Wrap(withPattern(public(""), "OPTIONS "+upload.BasePath), h))
	for _, m := range []string{"POST " + upload.BasePath, "HEAD " + upload.BasePath + "/{id}", "PATCH " + upload.BasePath + "/{id}", "DELETE " + upload.BasePath + "/{id}"} {
		p := user(ratelimit.BucketUpload)
		if strings.HasPrefix(m, "POST ") {
			p = user(ratelimit.BucketUpload, http.StatusCreated)
		}
		rt.mux.Handle(m, rt.chain.Wrap(withPattern(p, m), rt.safety.wrapOrigin(m, h)))
	}
}

func withPattern(p middleware.Policy, pattern string) middleware.Policy {
	p.Pattern = pattern
	return p
}

// routeAccount mounts the routes of the account a person manages.
func (rt router) routeAccount(c calls, s sessions) {
	rt.route("PATCH /api/me", user(ratelimit.BucketUsers), handlePatchMe(c))
	rt.route("POST /api/me/password", user(ratelimit.BucketLogin), handleChangePassword(s))
	rt.route("GET /api/me/sessions", user(ratelimit.BucketRead), handleSessions(c))
	rt.route("DELETE /api/me/sessions/{device}", user(ratelimit.BucketUsers), handleRevokeSession(s))
	rt.route("GET /api/users/{id}", user(ratelimit.BucketUsers), handleUser(c))
}

// router mounts each route behind the middleware chain and the browser
// guard.
type router struct {
	mux    *http.ServeMux
	chain  *middleware.Chain
	safety *browserSafety
}

func newRouter(d Deps) router {
	chain := &middleware.Chain{
		Identifier: d.Identifier, Limiter: d.Limiter, Config: d.Config, Log: d.Log, Now: d.Now,
		SecureCookie: d.SecureCookie,
	}
	if d.Metrics != nil {
		chain.Metrics = d.Metrics
		d.Metrics.InitRateLimited(bucketLoginFailures, "http")
	}
	return router{mux: http.NewServeMux(), chain: chain, safety: newBrowserSafety(d.Origins)}
}

func (rt router) route(pattern string, p middleware.Policy, h http.Handler) {
	p.Pattern = pattern
	rt.mux.Handle(pattern, rt.chain.Wrap(p, rt.safety.wrap(pattern, h)))
}

// The policies of the route table.
func public(bucket string) middleware.Policy {
	return middleware.Policy{Bucket: bucket, Access: middleware.Public}
}

func user(bucket string, activity ...int) middleware.Policy {
	return middleware.Policy{Bucket: bucket, Access: middleware.Identified, Activity: activity}
}

var admin = middleware.Policy{Bucket: ratelimit.BucketAdmin, Access: middleware.Permitted, Rule: "admin"}

// routeApp mounts the browser app (web nil: none): hashed assets, the
// service worker at /sw.js, and the shell for a navigation to any path no
// route owns. Everything else nobody
// serves is 404 (405 with Allow) problem+json.
func (rt router) routeApp(web http.Handler) {
	if web != nil {
		rt.route("GET /assets/", public(""), web)
		rt.route("GET /sw.js", public(""), web)
	}
	catchAll := []string{"/api/", "/hooks/", "/exports/", "/download/", "/assets/", "/", "GET /exports"}
	notFound := handleNotFound(rt.mux, catchAll...)
	for _, prefix := range catchAll[:4] {
		rt.route(prefix, public(""), notFound)
	}
	if web == nil {
		rt.route("/assets/", public(""), notFound)
	}
	rt.route("/", public(""), handleNavigation(web, notFound))
	// /exports is a page of the app as well as the path jobs are created
	// at (POST): without its own GET route the mux would redirect a reload
	// of the page to /exports/, the API's 404.
	rt.route("GET /exports", public(""), handleNavigation(web, notFound))
}

// NewStarting returns what a server answers while its store is not open yet
// (PostgreSQL unreachable at start): /healthz 200, since the
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
	if d.App == nil {
		panic("httpapi: Deps.App is required")
	}
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
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.RecallWindow <= 0 {
		d.RecallWindow = parley.DefaultRecallWindow
	}
	if d.Hashes == nil {
		d.Hashes = NewPasswordGate(0)
	}
	if d.LoginBackoff == nil {
		d.LoginBackoff = ratelimit.NewBackoff(ratelimit.BackoffOptions{})
	}
	return d
}
