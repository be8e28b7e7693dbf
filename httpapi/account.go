package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/wire"
)

// Accounts a person manages: GET and PATCH /api/me, GET /api/users/{id},
// POST /api/me/password, GET /api/me/sessions and
// DELETE /api/me/sessions/{device_id}.

// meReply is GET /api/me: who the request's token or cookie signs in.
// name is what a client shows: the display name, or the id when none is
// set; display_name is present only when one is.
type meReply struct {
	User   meUser `json:"user"`
	Device string `json:"device"`
	// Files is the caller's file usage and limits, in GET /api/me only,
	// and only when the server stores files.
	Files *filesReply `json:"files,omitempty"`
}

// filesReply is what a user's files take (files, bytes: uploading and
// ready files) against the limits in force.
type filesReply struct {
	Files       int64 `json:"files"`
	Bytes       int64 `json:"bytes"`
	Quota       int64 `json:"quota"`
	MaxFileSize int64 `json:"max_file_size,omitempty"`
}

type meUser struct {
	ID          string `json:"id"`
	Login       string `json:"login"`
	Name        string `json:"name"`
	DisplayName string `json:"display_name,omitempty"`
	Role        string `json:"role"`
}

func newMeReply(p parley.Principal, u parley.User) meReply {
	return meReply{
		User:   meUser{ID: p.User, Login: p.User, Name: cmpOr(u.DisplayName, p.User), DisplayName: u.DisplayName, Role: string(p.Role)},
		Device: p.DeviceID,
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// handleMe answers the signed-in user and device, so a browser, which
// cannot read its HttpOnly session cookie, learns who it is (401 when the
// cookie is missing or no longer valid).
func handleMe(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := c.ctx(r)
		defer cancel()
		p := caller(r)
		u, err := c.app.Me(ctx, p)
		if err != nil {
			c.writeError(w, err, "me")
			return
		}
		files, ok, err := c.app.MyFiles(ctx, p)
		if err != nil {
			c.writeError(w, err, "me")
			return
		}
		reply := newMeReply(p, u)
		if ok {
			reply.Files = &filesReply{Files: files.Usage.Files, Bytes: files.Usage.Bytes, Quota: files.Quota, MaxFileSize: files.MaxFileSize}
		}
		encode(w, http.StatusOK, reply)
	})
}

type patchMeBody struct {
	DisplayName *string `json:"display_name"`
}

// handlePatchMe sets the caller's display name (an empty string clears it)
// and answers the me object.
func handlePatchMe(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b patchMeBody
		err := decode(w, r, &b)
		if err == nil && b.DisplayName == nil {
			err = parley.Errorf(parley.CodeInvalidArgument, "display_name is required")
		}
		if err == nil {
			_, err = parley.CheckDisplayName(*b.DisplayName)
		}
		if err != nil {
			c.writeError(w, err, "set display name")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		p := caller(r)
		u, err := c.app.SetDisplayName(ctx, p, *b.DisplayName)
		if err != nil {
			c.writeError(w, err, "set display name")
			return
		}
		encode(w, http.StatusOK, newMeReply(p, u))
	})
}

// userEntry is GET /api/users/{id}, and one entry of GET /api/users.
type userEntry struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name,omitempty"`
}

// handleUser answers one user the caller may list under the directory
// policy; 404 NOT_FOUND for one they may not, as for one that does not
// exist.
func handleUser(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := c.ctx(r)
		defer cancel()
		e, err := c.app.UserEntry(ctx, caller(r), r.PathValue("id"))
		if err != nil {
			c.writeError(w, err, "user")
			return
		}
		encode(w, http.StatusOK, userEntry{ID: e.ID, DisplayName: e.DisplayName})
	})
}

type passwordBody struct {
	Current string `json:"current"`
	New     string `json:"new"`
}

// handleChangePassword changes the caller's password: 204, and every other
// token of the user is revoked (their sockets closed at once); the
// caller's token stays. A wrong current password is 400 INVALID_ARGUMENT
// (a 401 would make the client log out) and counts as a failed login of
// the account from that address in the login backoff, which may then
// refuse with 429.
func handleChangePassword(s sessions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b passwordBody
		err := decode(w, r, &b)
		if err == nil {
			err = parley.CheckChangePassword(b.Current, b.New)
		}
		token := wire.SessionToken(r, s.secureCookie)
		if err != nil || token == "" {
			s.writeError(w, cmpErr(err, parley.ErrBadToken), "change password")
			return
		}
		p := caller(r)
		// The login backoff's (name, address) pair: a wrong current password
		// from one address slows that address only.
		key := p.User + "\x00addr\x00" + middleware.AddrSubject(parley.CallerFromContext(r.Context()).Addr)
		if ok, wait := s.backoff.Begin(key); !ok {
			s.refuseBackoff(w, wait)
			return
		}
		result := ratelimit.Abandoned
		defer func() { s.backoff.End(key, result) }()
		release, err := s.hashes.acquire(r.Context(), r)
		if err != nil {
			s.writeError(w, err, "change password")
			return
		}
		defer release()
		ctx, cancel := s.ctx(r)
		defer cancel()
		err = s.app.ChangePassword(ctx, p, token, b.Current, b.New)
		switch {
		case errors.Is(err, parley.ErrWrongPassword):
			result = ratelimit.Failed
			s.log.Info("password change refused: wrong current password", "user", p.User,
				"addr", parley.CallerFromContext(r.Context()).Addr.String(), "request_id", parley.RequestIDFromContext(r.Context()))
		case err == nil:
			result = ratelimit.Succeeded
		}
		if err != nil {
			s.writeError(w, err, "change password")
			return
		}
		s.ident.ForgetUser(p.User)
		s.log.Info("password changed; other devices signed out", "user", p.User, "device", p.DeviceID,
			"request_id", parley.RequestIDFromContext(r.Context()))
		w.WriteHeader(http.StatusNoContent)
	})
}

func cmpErr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// refuseBackoff answers a request the login backoff refused: 429 with
// Retry-After.
func (s sessions) refuseBackoff(w http.ResponseWriter, wait time.Duration) {
	if s.metrics != nil {
		s.metrics.RateLimited(bucketLoginFailures, "http")
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	wire.WriteProblem(w, parley.CodeRateLimited, "too many failed password checks for this account; retry after the time in Retry-After", "")
}

type sessionsReply struct {
	Sessions []sessionEntry `json:"sessions"`
}

type sessionEntry struct {
	DeviceID  string `json:"device_id"`
	CreatedAt string `json:"created_at"`
	LastSeen  string `json:"last_seen"`
	Current   bool   `json:"current"`
}

// handleSessions lists the caller's signed-in devices.
func handleSessions(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := c.ctx(r)
		defer cancel()
		list, err := c.app.Sessions(ctx, caller(r))
		if err != nil {
			c.writeError(w, err, "sessions")
			return
		}
		out := sessionsReply{Sessions: make([]sessionEntry, len(list))}
		for i, s := range list {
			out.Sessions[i] = sessionEntry{DeviceID: s.DeviceID, CreatedAt: s.CreatedAt.UTC().Format(wire.TimeFormat), LastSeen: s.LastSeen.UTC().Format(wire.TimeFormat), Current: s.Current}
		}
		encode(w, http.StatusOK, out)
	})
}

// handleRevokeSession signs one of the caller's devices out (its sockets
// close at once): 204; 404 NOT_FOUND when the device has no session.
func handleRevokeSession(s sessions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := s.ctx(r)
		defer cancel()
		p := caller(r)
		if err := s.app.RevokeDevice(ctx, p, r.PathValue("device")); err != nil {
			s.writeError(w, err, "revoke session")
			return
		}
		s.ident.ForgetUser(p.User)
		s.log.Info("device signed out", "user", p.User, "device", r.PathValue("device"), "by", p.DeviceID,
			"request_id", parley.RequestIDFromContext(r.Context()))
		w.WriteHeader(http.StatusNoContent)
	})
}
