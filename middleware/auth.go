package middleware

import (
	"net/http"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/wire"
)

// AccessDenied is the fixed message of every 403: a refused caller does not
// learn which rule or mode refused it.
const AccessDenied = "Access denied"

// authorize enforces p.Access and p.Feature: 401 (with the reason code)
// when an identity is needed and missing, 403 "Access denied" when the
// identity is not allowed, the feature's access mode is closed, or the
// check itself fails.
func (c *Chain) authorize(p Policy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller := CallerFrom(r.Context())
		if p.Access != Public && !caller.Known {
			code := caller.Code
			if code != parley.CodeStaleInstall {
				code = parley.CodeUnauthenticated
			}
			wire.WriteProblem(w, code, "a valid bearer token or session cookie is required", "")
			c.record(func(m Recorder) { m.Refused(p.Pattern, http.StatusUnauthorized) })
			return
		}
		if !c.allowed(p, caller, c.config(r)) {
			wire.WriteProblem(w, parley.CodePermissionDenied, AccessDenied, "")
			c.record(func(m Recorder) { m.Refused(p.Pattern, http.StatusForbidden) })
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowed runs the permission and access-mode checks; a panic in them
// denies.
func (c *Chain) allowed(p Policy, caller Caller, cfg *config.Config) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			c.Log.Error("permission check failed; denying", "route", p.Pattern, "panic", v)
			ok = false
		}
	}()
	if p.Access == Permitted && !cfg.Permit(p.Rule, string(caller.Principal.Role)) {
		return false
	}
	if p.Feature != "" && !cfg.Allowed(p.Feature, c.Now()) {
		return false
	}
	return true
}
