package ratelimit

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures NewRedis.
type RedisOptions struct {
	// Prefix is put before every key; "" means "parley:rl:".
	Prefix string
	// Timeout bounds each Allow whose context has no deadline of its own
	// (every call out of the process has one); <= 0 means 200ms.
	// A caller's deadline (the configuration's timeouts.redis, which can
	// change on reload) wins.
	Timeout time.Duration
}

// Redis is a Store shared by every instance that uses the same Redis and
// prefix, which makes its limits cluster-wide. Each key is a sorted set of
// request timestamps taken from the Redis clock (TIME inside the script),
// so instances with skewed clocks still share one window; it expires with
// its last request.
//
// Allow is one script run (EVALSHA, EVAL on a cold cache), bounded by the
// context's deadline, else RedisOptions.Timeout. A Redis error or timeout
// is returned wrapped, with a Decision that allows: callers should log it
// and let the request pass.
type Redis struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	// id and seq name each counted request uniquely, across instances.
	id  string
	seq atomic.Uint64
}

var _ Store = (*Redis)(nil)

// NewRedis returns a store on client; it does not contact Redis.
//
// The client must be made with ContextTimeoutEnabled set: go-redis ignores
// context deadlines otherwise, and a call to a silent Redis would then last
// the client's ReadTimeout (3s by default) instead of opts.Timeout.
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	r := &Redis{client: client, prefix: opts.Prefix, timeout: opts.Timeout, id: rand.Text()[:12] + ":"}
	if r.prefix == "" {
		r.prefix = "parley:rl:"
	}
	if r.timeout <= 0 {
		r.timeout = 200 * time.Millisecond
	}
	return r
}

// allowScript is the whole decision for one key, atomic in Redis.
// KEYS[1] the key; ARGV limit, window (µs), a unique member.
// Returns {allowed (0|1), counted, retry after (µs), reset (µs)}.
var allowScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local n = redis.call('ZCARD', key)
if n > limit then
  -- the limit was lowered: keep the newest limit, the decision is the same
  redis.call('ZREMRANGEBYRANK', key, 0, n - limit - 1)
  n = limit
end
local allowed = 0
local retry = 0
if n < limit then
  redis.call('ZADD', key, now, ARGV[3])
  n = n + 1
  allowed = 1
else
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  retry = tonumber(oldest[2]) + window - now
end
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local reset = tonumber(newest[2]) + window - now
redis.call('PEXPIRE', key, math.max(1, math.ceil(reset / 1000)))
return {allowed, n, retry, reset}
`)

// Allow implements Store.
func (r *Redis) Allow(ctx context.Context, key string, limit int, window time.Duration) (Decision, error) {
	if off(limit, window) {
		return Decision{Allowed: true}, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	us := int64((window + time.Microsecond - 1) / time.Microsecond)
	member := r.id + strconv.FormatUint(r.seq.Add(1), 36)
	v, err := allowScript.Run(ctx, r.client, []string{r.prefix + key}, limit, us, member).Int64Slice()
	if err == nil && len(v) != 4 {
		err = fmt.Errorf("script returned %d values, want 4", len(v))
	}
	if err != nil {
		return allowOpen(limit), fmt.Errorf("ratelimit: redis allow %q (the request should be let through): %w", r.prefix+key, err)
	}
	d := Decision{
		Allowed:   v[0] == 1,
		Limit:     limit,
		Remaining: max(0, limit-int(v[1])),
		Reset:     ceilMs(time.Duration(v[3]) * time.Microsecond),
	}
	if !d.Allowed {
		d.RetryAfter = max(time.Millisecond, ceilMs(time.Duration(v[2])*time.Microsecond))
	}
	return d, nil
}
