package middleware

import (
	"context"
	"net/http"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/wire"
)

// AccessDenied is the fixed message of every 403: a refused caller does not
// learn which rule or mode refused it.
const AccessDenied = "Access denied"

// unavailableMsg answers a request whose caller or permission could not be
// established because something the check needs is down.
const unavailableMsg = "the server cannot check your credentials right now; retry with the same request key"

// authorize enforces p.Access, p.Feature and p.Check: 401 (with the reason
// code) when an identity is needed and refused or missing, 403 "Access
// denied" when the identity is not allowed, the feature's access mode is
// closed, or the check panics, and 503 UNAVAILABLE with Retry-After when
// the identity or the check could not be established for an outage.
func (c *Chain) authorize(p Policy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller := parley.CallerFromContext(r.Context())
		if p.Access != Public && !caller.Known {
			code := caller.Code
			switch code {
			case parley.CodeStaleInstall:
			case parley.CodeUnavailable:
				c.unavailable(w, p)
				return
			default:
				code = parley.CodeUnauthenticated
			}
			wire.WriteProblem(w, code, "a valid bearer token or session cookie is required", "")
			c.record(func(m Recorder) { m.Refused(p.Pattern, http.StatusUnauthorized) })
			return
		}
		switch c.decide(r.Context(), p, caller, c.config(r)) {
		case verdictDeny:
			wire.WriteProblem(w, parley.CodePermissionDenied, AccessDenied, "")
			c.record(func(m Recorder) { m.Refused(p.Pattern, http.StatusForbidden) })
			return
		case verdictOutage:
			c.unavailable(w, p)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unavailable answers 503 UNAVAILABLE with Retry-After: the request was not
// judged, and the client keeps it and retries.
func (c *Chain) unavailable(w http.ResponseWriter, p Policy) {
	wire.WriteProblem(w, parley.CodeUnavailable, unavailableMsg, "")
	c.record(func(m Recorder) { m.Refused(p.Pattern, http.StatusServiceUnavailable) })
}

type verdict int

const (
	verdictAllow verdict = iota
	verdictDeny
	verdictOutage
)

// decide runs the permission, access-mode and route checks. A panic in them
// denies (deny on doubt: a broken rule is a decision); a check that could
// not reach what it asks is an outage, which neither grants nor denies.
func (c *Chain) decide(ctx context.Context, p Policy, caller parley.Caller, cfg *config.Config) (v verdict) {
	defer func() {
		if x := recover(); x != nil {
			c.Log.Error("permission check failed; denying", "route", p.Pattern, "panic", x)
			v = verdictDeny
		}
	}()
	if p.Access == Permitted && !cfg.Permit(p.Rule, string(caller.Principal.Role)) {
		return verdictDeny
	}
	if p.Feature != "" && !cfg.Allowed(p.Feature, c.Now()) {
		return verdictDeny
	}
	if p.Check == nil {
		return verdictAllow
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StoreTimeout())
	defer cancel()
	err := p.Check(ctx, caller)
	switch {
	case err == nil:
		return verdictAllow
	case parley.ErrorCode(err).IsTerminal(): // a verdict, whatever its code
		return verdictDeny
	default:
		c.Log.Warn("permission check could not be made; answering UNAVAILABLE", "route", p.Pattern, "err", err)
		return verdictOutage
	}
}
