// Package middleware is Parley's cross-cutting HTTP layer. Every
// route runs the same chain, in this order, before any handler reads or
// binds the request body:
//
//  1. identify: the caller's token (bearer or cookie) is looked up through a
//     short cache; no token, or one the store refuses, leaves the caller
//     anonymous; a lookup the store or cache could not answer leaves the
//     identity unknown (UNAVAILABLE), never anonymous.
//  2. rate limit: per route bucket and subject (user id, else "ip:" and the
//     address the trusted proxy saw); a rejected request stops here and is
//     counted only by parley_rate_limited_total.
//  3. authenticate/authorize: 401 when the route needs an identity and there
//     is none; 403 "Access denied" when the identity lacks the permission
//     rule or the feature's access mode is closed; a check that panics
//     denies. An outage is 503 UNAVAILABLE with Retry-After, never 401 or
//     403: the identity could not be looked up, or the route's own check
//     (Policy.Check) could not reach the store. Both are terminal codes, and
//     a client that obeys them drops a request nobody judged.
//  4. API metrics: route template, method, status and latency.
//  5. activity metrics: only routes on the explicit allow-list, and only the
//     statuses they name (a replayed send answering 200 is not an action).
//
// Metric code never writes a response, never reads a body and never fails a
// request: it runs under recover, after the handler has answered.
//
// A trade-off of the order (docs/configuration.md#rate-limits): a
// rate-limited retry of a request that already committed gets 429, not its
// replay. The client keeps it and retries with the same key later.
package middleware

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/ratelimit"
)

// Access says who may call a route.
type Access int

const (
	// Public routes run for anonymous callers too (login, health, hooks,
	// which check their own signature, and /ws, which authenticates on
	// upgrade).
	Public Access = iota
	// Identified routes need a caller with a valid token.
	Identified
	// Permitted routes need a caller whose role the policy's permission
	// rule allows (config permissions; a missing rule denies).
	Permitted
)

// Policy is what the chain needs to know about one route; routes.go gives
// every route one.
type Policy struct {
	Pattern  string // the route template, e.g. "POST /api/convs/{id}/messages": the metric label
	Bucket   string // rate-limit bucket (config rate_limits key); "" = never limited
	Access   Access
	Rule     string // permission rule, for Permitted
	Feature  string // access-mode gated feature (config access key): "exports", "webhooks"
	Activity []int  // statuses counted as a business action (the activity allow-list); none = not counted
	// Check is a route's own permission check beyond Rule and Feature, run
	// after them, under timeouts.store (nil: none). An error with a
	// terminal code (PERMISSION_DENIED, NOT_FOUND, …), like a panic, is a
	// decision: 403 "Access denied". Any other error — no code, UNAVAILABLE,
	// a timeout — is an outage (what it asked could not answer): 503
	// UNAVAILABLE with Retry-After, never a grant.
	Check func(ctx context.Context, c parley.Caller) error
}

// Recorder is the metrics the chain emits; *metrics.Metrics implements it.
// Implementations must be safe for concurrent use; the chain recovers their
// panics anyway.
type Recorder interface {
	Request(route, method string, status int, d time.Duration)
	Activity(route string)
	RateLimited(bucket, transport string)
	Refused(route string, status int)
}

// Chain holds the shared parts of every route's middleware.
type Chain struct {
	Identifier *Identifier
	// Limiter returns the rate-limit store to use now (local, or the
	// shared one when the configuration enables it).
	Limiter func() ratelimit.Store
	Config  func() *config.Config
	Metrics Recorder // nil: none
	Log     *slog.Logger
	Now     func() time.Time // default time.Now
	// SecureCookie: the session cookie is wire.SecureSessionCookie on every
	// request, not only on those that came over TLS (wire.SessionToken).
	SecureCookie bool
}

// Wrap returns h behind the chain, configured by p.
func (c *Chain) Wrap(p Policy, h http.Handler) http.Handler {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.initRoute(p)
	h = c.activity(p, h)
	h = c.apiMetrics(p, h)
	h = c.authorize(p, h)
	h = c.rateLimit(p, h)
	h = c.identify(h)
	return c.access(p, h)
}

// Subject is the rate-limit subject of c: the user id, else "ip:" and
// the address — for IPv6 its /64 ("ip:2001:db8:1:2::/64"): one host
// commonly holds a whole /64 and could otherwise take a fresh budget per
// address. IPv4 addresses (IPv4-mapped IPv6 included) stay whole.
func Subject(c parley.Caller) string {
	if c.Known {
		return c.Principal.User
	}
	return "ip:" + AddrSubject(c.Addr)
}

// AddrSubject is the rate-limit key of a client address: an IPv4 address
// as it is, an IPv6 address as its /64 prefix, an invalid one as
// "invalid IP".
func AddrSubject(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		return netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
	}
	return a.String()
}

type configKey struct{}

// ConfigFrom returns the configuration the identify step read for this
// request (nil outside the chain), so one request is judged, bounded and
// answered by one configuration however the file changes meanwhile.
func ConfigFrom(ctx context.Context) *config.Config {
	cfg, _ := ctx.Value(configKey{}).(*config.Config)
	return cfg
}

func (c *Chain) config(r *http.Request) *config.Config {
	if cfg := ConfigFrom(r.Context()); cfg != nil {
		return cfg
	}
	return c.Config()
}
