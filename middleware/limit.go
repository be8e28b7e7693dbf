package middleware

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/wire"
)

// Limit checks one request against bucket's configured limit for subject.
// A limit that is off (missing, ≤ 0) allows without touching the store; a
// store that fails allows too (fail open: the limiter protects capacity,
// and a broken Redis must not refuse every user), and the error is
// returned for logging. The gateway calls it for send frames.
func Limit(ctx context.Context, store ratelimit.Store, cfg *config.Config, bucket, subject string) (ratelimit.Decision, error) {
	l := cfg.RateLimit(bucket)
	if l.Limit <= 0 || l.Window <= 0 || store == nil {
		return ratelimit.Decision{Allowed: true}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.RedisTimeout())
	defer cancel()
	d, err := store.Allow(ctx, bucket+":"+subject, l.Limit, l.Window)
	if err != nil {
		return ratelimit.Decision{Allowed: true}, err
	}
	return d, nil
}

// rateLimit answers 429 RATE_LIMITED with Retry-After when the caller's
// bucket is exhausted, and sets RateLimit-Policy and RateLimit (IETF
// draft-ietf-httpapi-ratelimit-headers) on every limited route.
func (c *Chain) rateLimit(p Policy, next http.Handler) http.Handler {
	if p.Bucket == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := c.config(r)
		caller := parley.CallerFromContext(r.Context())
		var store ratelimit.Store
		if c.Limiter != nil {
			store = c.Limiter()
		}
		d, err := Limit(r.Context(), store, cfg, p.Bucket, Subject(caller))
		if err != nil {
			c.Log.Warn("rate limit store failed; allowing", "bucket", p.Bucket, "err", err)
		}
		if l := cfg.RateLimit(p.Bucket); l.Limit > 0 && l.Window > 0 && store != nil && err == nil {
			h := w.Header()
			h.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=%d", p.Bucket, l.Limit, ceilSeconds(l.Window)))
			h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", p.Bucket, d.Remaining, ceilSeconds(d.Reset)))
		}
		if d.Allowed {
			next.ServeHTTP(w, r)
			return
		}
		c.record(func(m Recorder) { m.RateLimited(p.Bucket, "http") })
		w.Header().Set("Retry-After", strconv.Itoa(max(1, ceilSeconds(d.RetryAfter))))
		wire.WriteProblem(w, parley.CodeRateLimited, "too many requests; retry after the time in Retry-After", "")
	})
}

func ceilSeconds(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}
