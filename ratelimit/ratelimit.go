// Package ratelimit counts requests per key in a sliding window and says
// whether one more may pass. It knows nothing of
// HTTP: middleware uses it for requests and the gateway for `send` frames.
//
// # Sliding window log
//
// Both stores keep a log: the timestamp of every counted request of a key,
// at most limit of them. A request is allowed when fewer than limit
// timestamps are younger than the window, and then its own timestamp is
// added; a denied request adds nothing, so a client that keeps hammering is
// let in again as soon as its oldest counted request leaves the window. The
// answer is exact (no fixed-window burst at the boundary, no estimate as in
// a sliding window counter), at the price of limit timestamps per key.
// A request made at t counts while now < t+window.
//
// # Keys
//
// A key is one subject of one limit, built by the caller, which alone knows
// both: "send:u_42" for a user, "login:ip:203.0.113.7" for an anonymous
// client (the address being the last hop added by a trusted proxy, never a
// spoofable first hop). Putting the bucket first keeps the limits of two
// routes apart, and the "ip:" marker keeps an address from ever colliding
// with a user id. The limit and window travel with every call rather than
// being fixed per store, so a hot-reloaded configuration applies at once.
//
// # Bounded memory
//
// A full Memory makes room for a new key by evicting its least recently
// used one (Memory.Evictions): every request is counted, and a flood of
// distinct subjects costs only the count of the keys idle the longest.
//
// # Failing open
//
// A limiter protects the service; it must never become the reason the
// service refuses everyone. So every doubt falls to allowing:
//   - a limit or window <= 0 (missing or malformed configuration) turns
//     limiting off;
//   - a Redis error or timeout is returned to the caller together with an
//     allowing Decision: callers should log it, count it, and let the request
//     pass.
package ratelimit

import (
	"context"
	"time"
)

// Decision is the outcome of one Allow.
type Decision struct {
	Allowed bool
	// Limit is the limit applied; 0 when limiting is off.
	Limit int
	// Remaining is how many more requests the window admits after this one.
	Remaining int
	// RetryAfter is zero when Allowed. Otherwise it is how long until the
	// oldest counted request leaves the window, rounded up to a millisecond
	// (so it is > 0 and a retry after it is admitted, barring other
	// requests).
	RetryAfter time.Duration
	// Reset is how long until every counted request has left the window,
	// rounded up to a millisecond; zero when nothing is counted.
	Reset time.Duration
}

// Store counts requests per key in a sliding window log (see the package
// comment) and decides whether one more may pass.
//
// Allow counts the request if and only if it is allowed; the check and the
// count are one atomic step per key, so n concurrent callers of a key with
// limit L get exactly min(n, L) allowed decisions in one window.
//
// A limit <= 0 or a window <= 0 means limiting is off: Allow returns
// Allowed without touching storage (a missing or non-positive limit
// disables limiting, it never blocks everything).
//
// An error means the store could not decide (Redis unreachable, timeout,
// ctx done). The Decision returned with it allows the request; callers
// should log the error and let the request pass.
type Store interface {
	Allow(ctx context.Context, key string, limit int, window time.Duration) (Decision, error)
}

// off reports whether limit and window turn limiting off.
func off(limit int, window time.Duration) bool { return limit <= 0 || window <= 0 }

// allowOpen is the Decision for a request the store could not count (a full
// Memory, a store error): it reads as the first request of a window.
func allowOpen(limit int) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: limit - 1}
}

// ceilMs rounds d up to a whole millisecond; clients get retry_after_ms,
// and rounding down would send them back a moment too early.
func ceilMs(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}
