package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/config"
)

// Options configure a Hub. Zero values take the defaults named.
type Options struct {
	// Store is what the hub reads itself: tokens, and the events and
	// audiences it pushes.
	Store Store
	Bus   parley.Bus
	Log   *slog.Logger
	// App runs the requests' use cases. Nil: a Service over Store (which
	// must then implement app.Store, as every parley.Store does) that
	// publishes through this hub and counts sends to Metrics.
	App *app.Service
	// Config returns the policy in force (the edit window, the @all limit)
	// for the Service made when App is nil; nil: the documented defaults.
	Config func() *config.Config

	// HintMembers: conversations with more members than this get a hint
	// instead of the event (default 1000).
	HintMembers int
	// SendBudget bounds the bytes queued for one socket (default
	// DefaultSendBudget), each frame counted as its encoded length plus
	// FrameOverhead. Replies over it pause reading the socket's requests
	// until the queue is back under it; pushes over it close the socket.
	// HighWater is the queued bytes above which events become hints
	// (default SendBudget/2).
	SendBudget int
	HighWater  int
	// MaxUserSockets caps one user's open sockets on this gateway (default
	// DefaultMaxUserSockets); more upgrades get 429 RATE_LIMITED with
	// Retry-After.
	MaxUserSockets int
	// PingEvery is the keepalive interval (default 30s); a ping not
	// answered within PongTimeout (default PingEvery) closes the socket.
	PingEvery   time.Duration
	PongTimeout time.Duration
	// WriteTimeout bounds every socket write (default 10s).
	WriteTimeout time.Duration
	// RequestTimeout bounds every store call a frame makes (default 10s).
	// Timeout, when set, is asked instead at each call, so a hot-reloaded
	// configuration (timeouts.store) applies to sockets too.
	RequestTimeout time.Duration
	Timeout        func() time.Duration
	// Backstop is how often the heads of watched conversations are polled
	// (default 5s).
	Backstop time.Duration
	// ResyncWindow: after a bus loss the hub polls the store and pushes
	// what it missed; only when that poll fails does every subscribed
	// socket get resync, each at a random moment within this window
	// (default 10s), so the clients of a gateway do not all sync at once.
	ResyncWindow time.Duration
	// Jitter picks one socket's resync delay in [0, window) (nil:
	// uniformly at random).
	Jitter func(window time.Duration) time.Duration
	// Reauth is how often every socket's token is checked again (default
	// 1m): a token logged out on another gateway, or an account disabled,
	// ends its sockets within it. A logout through this gateway's own HTTP
	// API ends them at once (RevokeToken).
	Reauth time.Duration
	// OriginPatterns lists the browser origins allowed besides the
	// server's own host (see websocket.AcceptOptions); a request without
	// an Origin header (a non-browser client) is always allowed.
	OriginPatterns []string
	// SecureCookie: the upgrade's session cookie is
	// wire.SecureSessionCookie, as login sets it with --secure-cookie
	// (wire.SessionToken).
	SecureCookie bool
	// Workers is the number of fan-out goroutines (default 8). A
	// conversation is always handled by the same one, in seq order.
	Workers int
	// Linger bounds how long a fan-out holds a wave of pushes
	// while a send to one of its conversations is being committed over
	// this hub's sockets (default DefaultLinger; negative: never). The
	// committing send's event then leaves in the same write to each
	// socket instead of a write of its own. A send with none other in
	// flight is never held: its own commit is over before its push.
	Linger time.Duration
	// Limit decides whether user may make one more request counted in the
	// rate-limit bucket now (nil: no limit). Every request frame asks it
	// with the bucket of its HTTP twin (FrameBuckets); a refused frame is
	// answered RATE_LIMITED with retry_after_ms and has no effect.
	Limit func(ctx context.Context, bucket, user string) (ok bool, retryAfter time.Duration)
	// OnAccount is called for every account notice (a user disabled or
	// logged out anywhere), e.g. to forget cached token lookups.
	OnAccount func(user string)
	// Metrics receives sends by outcome, rate-limited frames and bus
	// gaps (nil: none).
	Metrics Metrics
	// PresenceTTL is how long this hub's presence leases last unless
	// renewed (default parley.DefaultPresenceTTL); it renews them every
	// third of it, and sweeps expired ones every third of it too (at most
	// every 5s): a gateway that dies leaves its users online for at most
	// about 4/3 of the TTL. GatewayID names its leases (default: random).
	PresenceTTL time.Duration
	GatewayID   string
}

// Defaults of the per-socket bounds.
const (
	// DefaultSendBudget is 1 MiB: one full sync page of long messages
	// (200 events of 4,000 characters, about 850 KB of JSON) fits, so a
	// client that reads normally never waits on it, while a socket that
	// does not read holds about a megabyte instead of hundreds.
	DefaultSendBudget = 1 << 20
	// DefaultMaxUserSockets is 16: a user's phone, laptop and a dozen
	// tabs, not a thousand sockets from one stolen token.
	DefaultMaxUserSockets = 16
	// FrameOverhead is what a queued frame costs besides its bytes.
	FrameOverhead = 64
	// DefaultLinger is 5 ms, the most a push waits for it: long enough
	// for the sends in flight beside it to commit on a loaded 2-core
	// machine (1 ms held too little, 10 ms was no better; see
	// docs/benchmarks.md, issue 15, --push-linger).
	DefaultLinger = 5 * time.Millisecond
	// socketsRetryAfter is the Retry-After of an upgrade refused by the
	// per-user cap: time for a closed tab's socket to go.
	socketsRetryAfter = 5 * time.Second
)

// Store is what the hub reads of parley.Store: tokens for the upgrade and
// the re-checks, and the feed its pushes come from.
type Store interface {
	Authenticate(ctx context.Context, token string) (parley.Principal, error)
	// ConvMembers: who holds an open period in a conversation, for
	// typing (typing.go).
	ConvMembers(ctx context.Context, conv string) ([]string, error)
	// Presence leases and their audience (presence.go).
	PutPresence(ctx context.Context, gateway string, leases []parley.PresenceLease, ttl time.Duration) ([]parley.Presence, error)
	SweepPresence(ctx context.Context, limit int) ([]parley.Presence, error)
	Sharing(ctx context.Context, user string, others []string) ([]string, error)
	parley.Feeder
}

// Metrics is what the hub reports; *metrics.Metrics implements it.
type Metrics interface {
	Send(transport, outcome string)
	Search(transport, outcome string)
	RateLimited(bucket, transport string)
	BusGap()
}

func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.HintMembers <= 0 {
		o.HintMembers = 1000
	}
	if o.SendBudget <= 0 {
		o.SendBudget = DefaultSendBudget
	}
	if o.HighWater <= 0 || o.HighWater > o.SendBudget {
		o.HighWater = o.SendBudget / 2
	}
	if o.MaxUserSockets <= 0 {
		o.MaxUserSockets = DefaultMaxUserSockets
	}
	if o.PingEvery <= 0 {
		o.PingEvery = 30 * time.Second
	}
	if o.PongTimeout <= 0 {
		o.PongTimeout = o.PingEvery
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.Backstop <= 0 {
		o.Backstop = 5 * time.Second
	}
	if o.ResyncWindow <= 0 {
		o.ResyncWindow = DefaultResyncWindow
	}
	if o.Jitter == nil {
		o.Jitter = uniformJitter
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	if o.Reauth <= 0 {
		o.Reauth = time.Minute
	}
	if o.PresenceTTL < 30*time.Millisecond {
		o.PresenceTTL = parley.DefaultPresenceTTL
	}
	if parley.CheckGatewayID(o.GatewayID) != nil {
		o.GatewayID = parley.NewID()
	}
	return o
}

// timeout is the deadline of one store call.
func (h *Hub) timeout() time.Duration {
	if h.o.Timeout != nil {
		if d := h.o.Timeout(); d > 0 {
			return d
		}
	}
	return h.o.RequestTimeout
}
