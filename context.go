package parley

import (
	"context"
	"net/netip"
	"time"
)

// Caller is who is asking, as the HTTP chain resolved it from the request's
// token (middleware's identify step). The handlers and the gateway read it
// from the request's context (CallerFromContext) instead of looking the
// token up again.
type Caller struct {
	Principal Principal
	// Known is true when the token resolved to a principal.
	Known bool
	// Code says why the caller is not Known: UNAUTHENTICATED (no token or a
	// refused one), STALE_INSTALL, or UNAVAILABLE (the store or cache could
	// not answer: who the caller is, is unknown).
	Code  Code
	Token string
	// Looked is when the principal was read from the store (a cached
	// answer's original lookup): a revocation after it may be unseen.
	Looked time.Time
	// Addr is the client address: the peer, or the hop the trusted proxy
	// appended to X-Forwarded-For.
	Addr netip.Addr
}

type callerKey struct{}

// NewContextWithCaller returns ctx carrying c.
func NewContextWithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFromContext returns the caller ctx carries: the zero Caller, with
// Code UNAUTHENTICATED, when it carries none (a request that did not pass
// the HTTP chain).
func CallerFromContext(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return Caller{Code: CodeUnauthenticated}
}

type requestIDKey struct{}

// NewContextWithRequestID returns ctx carrying id, the id of the request
// that every log line about it names.
func NewContextWithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFromContext returns the request id ctx carries ("" when none).
func RequestIDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
