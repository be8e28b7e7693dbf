package wire

import (
	"net/http"
	"strconv"

	"github.com/parleychat/parley"
)

// SessionCookie is the cookie login sets for browsers when the server is
// not told it is reached over TLS; the gateway and the HTTP API accept it
// where they accept a bearer token.
const SessionCookie = "parley_session"

// SecureSessionCookie is the session cookie's name over TLS (or with
// --secure-cookie): the __Host- prefix makes the browser accept it only
// Secure, for this host alone (no Domain) and Path=/, so a sibling
// subdomain cannot plant one.
const SecureSessionCookie = "__Host-" + SessionCookie

// SessionCookieName is the session cookie in use: SecureSessionCookie when
// secure, else SessionCookie.
func SessionCookieName(secure bool) string {
	if secure {
		return SecureSessionCookie
	}
	return SessionCookie
}

// Problem is an HTTP error body: RFC 9457 problem details with the protocol
// code as an extension member, so HTTP clients read the same code a frame
// carries.
type Problem struct {
	Type      string      `json:"type"`
	Title     string      `json:"title"`
	Status    int         `json:"status"`
	Detail    string      `json:"detail,omitempty"`
	Code      parley.Code `json:"code"`
	RequestID string      `json:"request_id,omitempty"`
}

// RetryAfter is the Retry-After an UNAVAILABLE answer carries, in seconds.
const RetryAfter = 1

// httpStatus is the one table of the HTTP status of each protocol code
// (docs/protocol.md#error-codes); parley.Codes holds the rest of each row.
var httpStatus = map[parley.Code]int{
	parley.CodeInvalidArgument:     http.StatusBadRequest,
	parley.CodeUnauthenticated:     http.StatusUnauthorized,
	parley.CodeNotMember:           http.StatusNotFound,
	parley.CodeIdempotencyMismatch: http.StatusUnprocessableEntity,
	parley.CodeOriginalExpired:     http.StatusGone,
	parley.CodeNotSender:           http.StatusForbidden,
	parley.CodeAlreadyRecalled:     http.StatusConflict,
	parley.CodeRecallWindowExpired: http.StatusConflict,
	parley.CodeEditWindowExpired:   http.StatusConflict,
	parley.CodeNotFound:            http.StatusNotFound,
	parley.CodeCursorAhead:         http.StatusConflict,
	parley.CodeEpochChanged:        http.StatusConflict,
	parley.CodeStaleInstall:        http.StatusUnauthorized,
	parley.CodePermissionDenied:    http.StatusForbidden,
	parley.CodeAlreadyExists:       http.StatusConflict,
	parley.CodeUnavailable:         http.StatusServiceUnavailable,
	parley.CodeRateLimited:         http.StatusTooManyRequests,
	parley.CodeTooLarge:            http.StatusRequestEntityTooLarge,
}

// HTTPStatus returns the HTTP status of code. A code nobody knows is read
// as UNAVAILABLE (503), as parley.Code.Info reads it.
func HTTPStatus(code parley.Code) int {
	if s, ok := httpStatus[code]; ok {
		return s
	}
	return httpStatus[parley.CodeUnavailable]
}

// WriteProblem writes an error as application/problem+json with the status
// of HTTPStatus: 401 with WWW-Authenticate, 503 and 429 with Retry-After.
func WriteProblem(w http.ResponseWriter, code parley.Code, detail, requestID string) {
	info := code.Info()
	status := HTTPStatus(info.Code)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	switch status {
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="parley"`)
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		if h.Get("Retry-After") == "" {
			h.Set("Retry-After", strconv.Itoa(RetryAfter))
		}
	}
	w.WriteHeader(status)
	WriteJSON(w, Problem{
		Type:      "about:blank",
		Title:     http.StatusText(status),
		Status:    status,
		Detail:    detail,
		Code:      info.Code,
		RequestID: requestID,
	})
}

// BearerToken returns the token of an HTTP request to a server that
// serves plain HTTP without --secure-cookie: SessionToken(r, false).
func BearerToken(r *http.Request) string { return SessionToken(r, false) }

// SessionToken returns the token of an HTTP request: the Authorization
// bearer token, else the value of the session cookie in use, else "". The
// cookie in use is SecureSessionCookie when secureCookie is set or the
// request came over TLS, else SessionCookie; a cookie of the other name is
// ignored (over TLS a plain-named cookie may have been planted by a sibling
// subdomain).
func SessionToken(r *http.Request, secureCookie bool) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if len(a) > 7 && (a[:7] == "Bearer " || a[:7] == "bearer ") {
			return a[7:]
		}
		return ""
	}
	if c, err := r.Cookie(SessionCookieName(secureCookie || r.TLS != nil)); err == nil {
		return c.Value
	}
	return ""
}
