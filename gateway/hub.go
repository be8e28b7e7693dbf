// Package gateway serves Parley's realtime protocol (SPEC §3) over
// WebSocket: it authenticates the upgrade, answers the eight request types,
// and pushes committed events to the sockets that may see them.
//
// Delivery model. A send's reply is written only after its commit, and the
// (conv, seq) of every committed event is published on the Bus after the
// commit. A gateway declares what it hears (the conversations its sockets
// watch, the users it has sockets of: interest.go), hears at least that,
// and reads the event and the membership periods around it from the Store
// (Feeder.Feed), so a push is decided by the same visibility rules as a
// sync. Notices are hints: a seq
// gap is filled by reading the store, a slow poll of the heads of watched
// conversations backs up a publisher that died between commit and publish,
// and a bus that lost notices makes the gateway poll the store for what it
// missed (heads of watched conversations, open periods of its users) and
// push that; only when that poll fails do sockets get resync, spread over
// a window. Pushes are
// an optimisation on top of sync, never the only way an event arrives: a
// client that sees a gap syncs.
//
// Slow clients. Every socket has a send queue bounded in bytes (SendBudget)
// and written by one goroutine with a write deadline; nobody else ever
// waits for it. Replies are never dropped: while a socket's queue is over
// its budget the gateway stops reading that socket's requests until the
// queue drains (backpressure), so a client that sends without reading holds
// at most the budget plus one reply. Pushes degrade instead: above the
// high-water mark events become hints (one per conversation until it is
// written), and a push that does not fit in the budget even as a hint
// closes the socket with 1008 (the client resyncs when it reconnects).
// A user holds at most MaxUserSockets sockets per gateway; more upgrades
// are refused with 429 RATE_LIMITED and Retry-After.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/ratelimit"
	"github.com/parleychat/parley/wire"
)

// Options configure a Hub. Zero values take the defaults named.
type Options struct {
	Store parley.Store
	Bus   parley.Bus
	Log   *slog.Logger

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
	// Linger bounds how long a fan-out worker holds a wave of pushes
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

// FrameBuckets maps every request frame to the rate-limit bucket of its
// HTTP twin (httpapi/routes.go): send and recall count with HTTP sends and
// recalls, the reads with the read routes. sub has no twin: it reads the
// store like GET /api/convs, so it counts in read too.
var FrameBuckets = map[string]string{
	wire.TSend:   ratelimit.BucketSend,
	wire.TRecall: ratelimit.BucketSend,
	wire.TSync:   ratelimit.BucketRead,
	wire.TConvs:  ratelimit.BucketRead,
	wire.TFetch:  ratelimit.BucketRead,
	wire.TAck:    ratelimit.BucketRead,
	wire.TRead:   ratelimit.BucketRead,
	wire.TSub:    ratelimit.BucketRead,
}

// Metrics is what the hub reports; *metrics.Metrics implements it.
type Metrics interface {
	Send(transport, outcome string)
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
	return o
}

// Hub is one gateway: its sockets, its subscriptions and its fan-out.
type Hub struct {
	o     Options
	store parley.Store
	bus   parley.Bus
	log   *slog.Logger

	mu    sync.RWMutex
	conns map[*conn]struct{} // every open socket
	// byUser indexes conns by user, so an account notice (a logout, a
	// disable, a login that replaced an install, from any gateway) costs
	// that user's sockets, not every socket.
	byUser map[string]map[*conn]struct{}
	// revoked: when a token ("t:"+token) or a user ("u:"+user) was last
	// revoked, kept for revokeWindow. A socket still being upgraded at
	// that moment is in no snapshot yet; when it registers it is checked
	// again if a revocation came after its token was looked up.
	revoked map[string]time.Time
	subs    map[string]map[*conn]struct{} // subscribed sockets by user
	sockets map[string]int                // open (and upgrading) sockets by user
	watch   map[string]int                // conv → subscribed sockets watching it
	// subGen changes whenever a socket subscribes or stops being
	// subscribed (under mu), so the fan-out's kept audiences know when
	// their sockets are stale.
	subGen atomic.Uint64

	// drainMu: request handlers hold it shared; Drain takes it exclusively,
	// so when Drain has it no accepted request is still running.
	drainMu  sync.RWMutex
	draining atomic.Bool

	reqs *reqPool // the goroutines that answer requests

	workers []*worker
	lost    chan struct{} // the bus lost notices: recover
	wg      sync.WaitGroup
	runCtx  atomic.Pointer[context.Context]

	stats Stats
}

// Stats are counters a test or the metrics layer can read.
type Stats struct {
	Conns  atomic.Int64 // open sockets
	Pushed atomic.Int64 // event frames queued to sockets
	Hinted atomic.Int64 // hint frames queued
	Kicked atomic.Int64 // sockets closed because a push did not fit in their budget
	// QueuedBytes is what the queues of all sockets hold now, and
	// PeakQueuedBytes the most one socket's queue ever held (both counted
	// as SendBudget counts them).
	QueuedBytes     atomic.Int64
	PeakQueuedBytes atomic.Int64
	Backpressured   atomic.Int64 // times a socket's reading paused for its queue to drain
	Refused         atomic.Int64 // upgrades refused by the per-user socket cap
	Resyncs         atomic.Int64 // resync frames sent after a bus loss the store poll could not cover
	Recovered       atomic.Int64 // bus losses covered by polling the store (no resync)
	Backstops       atomic.Int64 // conversations the backstop found behind
	Carried         atomic.Int64 // events pushed from the notice that carried them, without a store read
	MemberReads     atomic.Int64 // fan-out reads of the membership periods (Feed): no audience kept for the conversation
	RosterLost      atomic.Int64 // kept audiences dropped because the events read could not be followed (a gap, a purge, a new epoch)
	Revoked         atomic.Int64 // sockets closed because their token stopped working
	// Waves of socket writers the fan-out released, those of them that
	// waited for sends being committed (Linger), and the batches the
	// sockets' writers wrote (one write system call each, more for a
	// batch over 64 KiB): Pushed over SocketWrites is the frames per write.
	Waves        atomic.Int64
	Lingered     atomic.Int64
	SocketWrites atomic.Int64
	// Bus notices this gateway handed to the bus, and those the bus
	// delivered to it (its own echoes included, on a bus that sends them
	// back). Losses are BusGap.
	NoticesSent     atomic.Int64
	NoticesReceived atomic.Int64
}

// New returns a Hub. Call Run to start its fan-out, and serve it as the
// handler of GET /ws.
func New(o Options) *Hub {
	o = o.withDefaults()
	h := &Hub{
		o: o, store: o.Store, bus: o.Bus, log: o.Log,
		conns:   map[*conn]struct{}{},
		byUser:  map[string]map[*conn]struct{}{},
		revoked: map[string]time.Time{},
		subs:    map[string]map[*conn]struct{}{},
		sockets: map[string]int{},
		watch:   map[string]int{},
		lost:    make(chan struct{}, 1),
		reqs:    newReqPool(DefaultRequestLinger),
	}
	h.workers = make([]*worker, o.Workers)
	for i := range h.workers {
		h.workers[i] = newWorker(h)
	}
	return h
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

// Stats returns the hub's counters.
func (h *Hub) Stats() *Stats { return &h.stats }

// Run runs the bus subscription, the fan-out workers and the backstop
// until ctx ends; it returns when they have all stopped.
func (h *Hub) Run(ctx context.Context) error {
	h.runCtx.Store(&ctx)
	var wg sync.WaitGroup
	for _, w := range h.workers {
		wg.Go(func() { w.run(ctx) })
	}
	wg.Go(func() { every(ctx, h.o.Backstop, nil, func() { h.backstop(ctx) }) })
	wg.Go(func() { h.recoverLoop(ctx) })
	wg.Go(func() { every(ctx, h.o.PingEvery, nil, h.keepalive) })
	wg.Go(func() { every(ctx, h.o.Reauth, nil, func() { h.reauth(ctx) }) })
	var err error
	if h.bus != nil {
		err = h.bus.Run(ctx, busHandler{h})
	} else {
		<-ctx.Done()
		err = ctx.Err()
	}
	wg.Wait()
	// The sockets end with ctx; their requests see it and end too.
	h.reqs.close()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// ctx is the hub's run context (Background before Run).
func (h *Hub) ctx() context.Context {
	if p := h.runCtx.Load(); p != nil {
		return *p
	}
	return context.Background()
}

// Draining reports whether Drain was called (/readyz answers 503).
func (h *Hub) Draining() bool { return h.draining.Load() }

// Drain starts a graceful drain: new request frames get UNAVAILABLE and new
// upgrades 503, every socket gets goaway, and Drain returns once every
// request already accepted has finished and been answered.
func (h *Hub) Drain() {
	// Taking drainMu waits for every request already accepted; frames read
	// from now on block on it and then see the flag.
	h.drainMu.Lock()
	h.draining.Store(true)
	h.drainMu.Unlock()
	goaway := &frame{b: wire.MarshalFrame(wire.Goaway())}
	for _, c := range h.snapshot() {
		c.control(goaway)
	}
}

// Shutdown closes every socket, after its queued frames are written, and
// waits for them until ctx ends. Call it after Drain.
func (h *Hub) Shutdown(ctx context.Context) error {
	for _, c := range h.snapshot() {
		c.closeAfterFlush(websocket.StatusGoingAway, "server shutting down")
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		h.reqs.close() // no socket is left to make a request
		return nil
	case <-ctx.Done():
		for _, c := range h.snapshot() {
			c.ws.CloseNow()
		}
		return ctx.Err()
	}
}

func (h *Hub) snapshot() []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	cs := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		cs = append(cs, c)
	}
	return cs
}

// ServeHTTP upgrades GET /ws. The token comes as a bearer token or the
// session cookie; without a valid one the upgrade is refused with 401 and
// a problem body whose code is UNAUTHENTICATED or STALE_INSTALL.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Counted from the start: http.Server.Shutdown stops tracking a request
	// once it is hijacked, and Shutdown below must not miss it.
	h.wg.Add(1)
	defer h.wg.Done()
	if h.draining.Load() {
		w.Header().Set("Retry-After", "1")
		wire.WriteProblem(w, parley.CodeUnavailable, "server is draining; reconnect to another gateway", "")
		return
	}
	token := wire.SessionToken(r, h.o.SecureCookie)
	if token == "" {
		wire.WriteProblem(w, parley.CodeUnauthenticated, "a bearer token or session cookie is required", "")
		return
	}
	// Behind the HTTP chain the token was just resolved (through its cache);
	// a reconnect storm then costs one lookup per socket, not two.
	caller := parley.CallerFromContext(r.Context())
	p, looked := caller.Principal, caller.Looked
	var err error
	switch {
	case caller.Token == token && caller.Code == parley.CodeUnavailable:
		// The chain could not look the token up (the store is down): 503,
		// never 401, which would make the client drop its session.
		err = parley.Errorf(parley.CodeUnavailable, "the server cannot check your token right now; reconnect after Retry-After")
	case !caller.Known || caller.Token != token:
		looked = time.Now()
		ctx, cancel := context.WithTimeout(r.Context(), h.timeout())
		p, err = h.store.Authenticate(ctx, token)
		cancel()
	}
	if err != nil {
		code, msg, rid := h.errorOf(err, "authenticate")
		wire.WriteProblem(w, code, msg, rid)
		return
	}
	if !h.reserve(p.User) {
		h.stats.Refused.Add(1)
		w.Header().Set("Retry-After", strconv.Itoa(int(socketsRetryAfter.Seconds())))
		wire.WriteProblem(w, parley.CodeRateLimited, fmt.Sprintf("too many open sockets for this user (at most %d); close one, or retry after Retry-After", h.o.MaxUserSockets), "")
		return
	}
	hw := &hijackWriter{ResponseWriter: w, timeout: h.o.WriteTimeout}
	ws, err := websocket.Accept(hw, r, &websocket.AcceptOptions{
		OriginPatterns:  h.o.OriginPatterns,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		h.release(p.User)
		return // Accept has answered (403 for a foreign origin)
	}
	ws.SetReadLimit(parley.MaxFrameBytes)
	c := newConn(h.ctx(), h, ws, p, token)
	c.raw = hw.raw
	h.mu.Lock()
	h.conns[c] = struct{}{}
	mine := h.byUser[p.User]
	if mine == nil {
		mine = map[*conn]struct{}{}
		h.byUser[p.User] = mine
		h.declareLocked(parley.Interest{Serve: []string{p.User}})
	}
	mine[c] = struct{}{}
	late := h.revokedSinceLocked(looked, "t:"+token, "u:"+p.User)
	h.mu.Unlock()
	h.stats.Conns.Add(1)
	if late { // revoked while this socket was being upgraded: ask again
		ctx := h.ctx()
		h.wg.Go(func() { h.recheck(ctx, []*conn{c}) })
	}
	// The socket runs on its reader's goroutine and the handler returns:
	// net/http's goroutine, its stack and its buffers for the request are
	// not kept for the socket's life (an idle socket is one goroutine).
	method, rid := r.Method, parley.RequestIDFromContext(r.Context())
	h.wg.Add(1) // before this handler's Done: Shutdown still waits for the socket
	go func() {
		defer h.wg.Done()
		c.serve()
		h.remove(c)
		h.logLifetime(method, rid, c)
	}()
}

// logLifetime writes a socket's access line when it ends, at info: who,
// how long, and its close code and reason (the HTTP access line leaves
// the 101 of an upgrade to this one).
func (h *Hub) logLifetime(method, requestID string, c *conn) {
	code, reason, by := c.end()
	h.log.LogAttrs(context.Background(), slog.LevelInfo, "ws connection",
		slog.String("method", method),
		slog.String("route", "GET /ws"),
		slog.Int("status", http.StatusSwitchingProtocols),
		slog.Int("close_code", int(code)),
		slog.String("close_reason", reason),
		slog.String("closed_by", by),
		slog.Float64("duration_ms", float64(time.Since(c.started))/float64(time.Millisecond)),
		slog.String("user", c.p.User),
		slog.String("device", c.p.DeviceID),
		slog.String("request_id", requestID),
	)
}

// reserve takes one of user's socket slots; false when they hold them all.
func (h *Hub) reserve(user string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sockets[user] >= h.o.MaxUserSockets {
		return false
	}
	h.sockets[user]++
	return true
}

// release gives back a slot of user's.
func (h *Hub) release(user string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releaseLocked(user)
}

func (h *Hub) releaseLocked(user string) {
	if h.sockets[user] <= 1 {
		delete(h.sockets, user)
	} else {
		h.sockets[user]--
	}
}

// remove forgets a closed socket.
func (h *Hub) remove(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releaseLocked(c.p.User)
	delete(h.conns, c)
	if mine := h.byUser[c.p.User]; mine != nil {
		delete(mine, c)
		if len(mine) == 0 {
			delete(h.byUser, c.p.User)
			h.declareLocked(parley.Interest{Unserve: []string{c.p.User}})
		}
	}
	h.unsubscribeLocked(c)
	h.stats.Conns.Add(-1)
}

// unsubscribeLocked stops pushes to c and forgets what it watched.
func (h *Hub) unsubscribeLocked(c *conn) {
	if set := h.subs[c.p.User]; set != nil {
		if _, ok := set[c]; ok {
			h.subGen.Add(1)
			delete(set, c)
			if len(set) == 0 {
				delete(h.subs, c.p.User)
			}
			for conv := range c.watched {
				h.unwatchLocked(conv)
			}
		}
	}
	c.watched = map[string]struct{}{}
	c.subscribed = false
}

func (h *Hub) unwatchLocked(conv string) {
	if h.watch[conv] <= 1 {
		delete(h.watch, conv)
		h.declareLocked(parley.Interest{Unwatch: []string{conv}})
	} else {
		h.watch[conv]--
	}
}

// subscribe registers c for pushes of the conversations its user is in now
// (and, through the fan-out, those they join later).
func (h *Hub) subscribe(ctx context.Context, c *conn) error {
	heads, err := h.store.Joined(ctx, c.p.User)
	if err != nil {
		return err
	}
	for _, hd := range heads {
		h.worker(hd.Conv).baseline(hd)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.revoked.Load() {
		return parley.ErrBadToken
	}
	if c.subscribed {
		return nil
	}
	c.subscribed = true
	set := h.subs[c.p.User]
	if set == nil {
		set = map[*conn]struct{}{}
		h.subs[c.p.User] = set
	}
	set[c] = struct{}{}
	var fresh []string
	h.subGen.Add(1)
	for _, hd := range heads {
		c.watched[hd.Conv] = struct{}{}
		if h.watchLocked(hd.Conv) {
			fresh = append(fresh, hd.Conv)
		}
	}
	h.declareLocked(parley.Interest{Watch: fresh})
	return nil
}

// subscribers returns the subscribed sockets of users, under one read
// lock. Watching conv is recorded on each: a user who joined after
// subscribing starts to be watched with their join event.
func (h *Hub) subscribers(conv string, users ...string) []*conn {
	var cs []*conn
	fresh := false
	h.mu.RLock()
	for _, u := range users {
		for c := range h.subs[u] {
			cs = append(cs, c)
			if _, ok := c.watched[conv]; !ok {
				fresh = true
			}
		}
	}
	h.mu.RUnlock()
	if fresh {
		h.mu.Lock()
		for _, c := range cs {
			if _, ok := c.watched[conv]; !ok && c.subscribed {
				if _, still := h.conns[c]; still {
					c.watched[conv] = struct{}{}
					if h.watchLocked(conv) {
						h.declareLocked(parley.Interest{Watch: []string{conv}})
					}
				}
			}
		}
		h.mu.Unlock()
	}
	return cs
}

// watched returns the conversations some subscribed socket watches.
func (h *Hub) watched() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	convs := make([]string, 0, len(h.watch))
	for conv := range h.watch {
		convs = append(convs, conv)
	}
	return convs
}

// anySubscribed reports whether one of users has a subscribed socket here.
func (h *Hub) anySubscribed(users []string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, u := range users {
		if len(h.subs[u]) > 0 {
			return true
		}
	}
	return false
}

func (h *Hub) isWatched(conv string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.watch[conv] > 0
}

// errorOf turns an error into what a client sees. An error without a
// protocol code is internal: logged with a request id, shown as UNAVAILABLE
// with a generic message and that id.
func (h *Hub) errorOf(err error, op string) (code parley.Code, msg, requestID string) {
	code = parley.ErrorCode(err)
	var pe *parley.Error
	if errors.As(err, &pe) {
		return code, pe.Msg, ""
	}
	if errors.Is(err, context.Canceled) {
		// The socket or the server ended mid-request: nobody is left to
		// judge, and nothing went wrong inside (the lifetime line says
		// how the socket closed).
		return parley.CodeUnavailable, parley.InternalMessage, ""
	}
	requestID = parley.NewID()
	h.log.Error("internal error", "op", op, "request_id", requestID, "err", err)
	return parley.CodeUnavailable, parley.InternalMessage, requestID
}

// busHandler adapts the hub to parley.BusHandler.
type busHandler struct{ h *Hub }

func (b busHandler) Notify(ns []parley.Notice) {
	b.h.stats.NoticesReceived.Add(int64(len(ns)))
	b.h.Notify(ns)
}
func (b busHandler) Lost() { b.h.Lost() }

// Notify takes notices from the bus (or directly, on a single node) and
// hands each to its conversation's worker. It never blocks.
func (h *Hub) Notify(ns []parley.Notice) {
	for _, n := range ns {
		if n.Account() {
			h.account(n.User)
			continue
		}
		h.worker(n.Conv).notice(n)
	}
}

// account handles an account notice: cached lookups of the user's tokens
// are dropped, and the user's sockets are checked again now, off the
// bus goroutine.
func (h *Hub) account(user string) {
	if h.o.OnAccount != nil {
		h.o.OnAccount(user)
	}
	h.noteRevoked("u:" + user)
	mine := h.socketsOf(user)
	if len(mine) == 0 {
		return
	}
	ctx := h.ctx()
	h.wg.Go(func() { h.recheck(ctx, mine) })
}

// socketsOf returns user's open sockets here.
func (h *Hub) socketsOf(user string) []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	cs := make([]*conn, 0, len(h.byUser[user]))
	for c := range h.byUser[user] {
		cs = append(cs, c)
	}
	return cs
}

// revokeWindow is how long a revocation is remembered for sockets that
// were mid-upgrade when it happened: far longer than an upgrade takes, the
// age of a cached token lookup included.
const revokeWindow = time.Minute

// noteRevoked records a revocation (and forgets ones past the window)
// under the lock that registers sockets, so a socket is either in the
// revoker's snapshot or sees the record when it registers.
func (h *Hub) noteRevoked(key string) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, at := range h.revoked {
		if now.Sub(at) > revokeWindow {
			delete(h.revoked, k)
		}
	}
	h.revoked[key] = now
}

// revokedSinceLocked reports whether any of keys was revoked at or after
// since: a socket whose token was looked up before that may hold a
// principal that no longer stands.
func (h *Hub) revokedSinceLocked(since time.Time, keys ...string) bool {
	for _, k := range keys {
		if at, ok := h.revoked[k]; ok && !at.Before(since) {
			return true
		}
	}
	return false
}

// RevokeUser ends the sockets of user whose tokens no longer authenticate,
// on every gateway at once: the HTTP API calls it after disabling an
// account.
func (h *Hub) RevokeUser(user string) {
	h.Publish(parley.AccountNotice(user))
}

// Lost says the bus may have lost notices. It never blocks: the recovery
// (recoverLoop) runs on its own goroutine, and losses reported while one
// runs are covered by one more.
func (h *Hub) Lost() {
	h.metric(func(m Metrics) { m.BusGap() })
	select {
	case h.lost <- struct{}{}:
	default:
	}
}

// every runs fn each d, and at once when poke fires (a nil poke never
// does), until ctx ends.
func every(ctx context.Context, d time.Duration, poke <-chan struct{}, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-poke:
		}
		fn()
	}
}

// keepalive pings every socket, each ping on a short-lived goroutine of
// its own.
func (h *Hub) keepalive() {
	for _, c := range h.snapshot() {
		go c.ping()
	}
}

// reauth checks every socket's token again, one token at a time and each
// token once however many sockets share it, so the cost is spread and
// bounded: a socket whose token was logged out, whose install was replaced,
// or whose account was disabled is ended.
func (h *Hub) reauth(ctx context.Context) {
	h.recheck(ctx, h.snapshot())
}

// recheck checks the tokens of conns, each token once, and revokes the
// sockets whose token was refused.
func (h *Hub) recheck(ctx context.Context, conns []*conn) {
	verdict := map[string]error{}
	for _, c := range conns {
		err, seen := verdict[c.token]
		if !seen {
			actx, cancel := context.WithTimeout(ctx, h.timeout())
			_, err = h.store.Authenticate(actx, c.token)
			cancel()
			verdict[c.token] = err
		}
		switch code := parley.ErrorCode(err); code {
		case "":
		case parley.CodeUnauthenticated, parley.CodeStaleInstall:
			c.revoke(code, parley.ErrorMessage(err))
		default: // the store is unwell: keep the socket, try next round
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// RevokeToken ends this gateway's sockets that use token, at once: the HTTP
// API calls it after a logout. Other gateways notice within Reauth.
func (h *Hub) RevokeToken(token string) {
	h.noteRevoked("t:" + token)
	for _, c := range h.snapshot() {
		if c.token == token {
			c.revoke(parley.CodeUnauthenticated, parley.ErrBadToken.Msg)
		}
	}
}

// backstop polls the heads of watched conversations and hands the ones
// ahead of what was pushed to their workers.
func (h *Hub) backstop(ctx context.Context) {
	if err := h.pollHeads(ctx); err != nil && ctx.Err() == nil {
		h.log.Warn("backstop: reading heads failed", "err", err)
	}
}

// pollBatch bounds the ids of one store read of the poll.
const pollBatch = 1000

// pollHeads reads the heads of watched conversations, pollBatch at a time,
// and hands each to its worker, which pushes what it is behind on exactly
// as if the notices had come.
func (h *Hub) pollHeads(ctx context.Context) error {
	convs := h.watched()
	for len(convs) > 0 {
		batch := convs[:min(len(convs), pollBatch)]
		convs = convs[len(batch):]
		qctx, cancel := context.WithTimeout(ctx, h.timeout())
		heads, err := h.store.Heads(qctx, batch)
		cancel()
		if err != nil {
			return err
		}
		for _, hd := range heads {
			h.worker(hd.Conv).check(hd)
		}
	}
	return nil
}

// DefaultResyncWindow is the default of Options.ResyncWindow.
const DefaultResyncWindow = 10 * time.Second

func uniformJitter(window time.Duration) time.Duration {
	if window <= 0 {
		return 0
	}
	return rand.N(window)
}

// recoverLoop covers each bus loss: poll the store for what the lost
// notices would have said and push it; when the poll fails, resync every
// subscribed socket, spread over ResyncWindow.
func (h *Hub) recoverLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.lost:
		}
		for _, w := range h.workers {
			w.forgetRosters()
		}
		err := h.recoverLoss(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			h.stats.Recovered.Add(1)
			continue
		}
		h.log.Warn("bus loss: polling the store failed; spreading resync over the sockets", "err", err, "window", h.o.ResyncWindow)
		h.spreadResync(ctx)
	}
}

// recoverLoss re-learns what a bus loss may have hidden, in few store
// reads: the open periods of every subscribed user (a join whose notice
// was lost leaves a conversation unwatched here; its worker starts at the
// join seq, as the notice would have made it) and then the heads of every
// watched conversation (events, leaves and rollbacks whose notices were
// lost). Workers push what changed through the usual Feed; conversations
// that did not change cost nothing more.
func (h *Hub) recoverLoss(ctx context.Context) error {
	h.mu.RLock()
	users := make([]string, 0, len(h.subs))
	for u := range h.subs {
		users = append(users, u)
	}
	h.mu.RUnlock()
	for len(users) > 0 {
		batch := users[:min(len(users), pollBatch)]
		users = users[len(batch):]
		qctx, cancel := context.WithTimeout(ctx, h.timeout())
		periods, err := h.store.OpenPeriods(qctx, batch)
		cancel()
		if err != nil {
			return err
		}
		for _, p := range periods {
			h.relearn(p)
		}
	}
	return h.pollHeads(ctx)
}

// relearn makes the subscribed sockets of p.User that do not watch p.Conv
// watch it, after telling the worker to start from the join seq: were it
// marked watched first, a backstop poll could reach the worker before and
// start it at the head, skipping the join.
func (h *Hub) relearn(p parley.OpenPeriod) {
	h.mu.RLock()
	missing := false
	for c := range h.subs[p.User] {
		if _, ok := c.watched[p.Conv]; !ok {
			missing = true
			break
		}
	}
	h.mu.RUnlock()
	if !missing {
		return
	}
	h.worker(p.Conv).join(p)
	h.mu.Lock()
	for c := range h.subs[p.User] {
		if _, ok := c.watched[p.Conv]; !ok {
			c.watched[p.Conv] = struct{}{}
			if h.watchLocked(p.Conv) {
				h.declareLocked(parley.Interest{Watch: []string{p.Conv}})
			}
		}
	}
	h.mu.Unlock()
}

// spreadResync sends resync to every subscribed socket, each at its own
// moment within ResyncWindow (Jitter), so a loss the store cannot cover
// does not make every client of the gateway sync at the same instant.
func (h *Hub) spreadResync(ctx context.Context) {
	type due struct {
		at time.Duration
		c  *conn
	}
	h.mu.RLock()
	var ds []due
	for _, set := range h.subs {
		for c := range set {
			ds = append(ds, due{c: c})
		}
	}
	h.mu.RUnlock()
	for i := range ds {
		ds[i].at = min(max(h.o.Jitter(h.o.ResyncWindow), 0), h.o.ResyncWindow)
	}
	slices.SortFunc(ds, func(a, b due) int { return cmp.Compare(a.at, b.at) })
	f := &frame{b: wire.MarshalFrame(wire.Resync())}
	start := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for _, d := range ds {
		if wait := time.Until(start.Add(d.at)); wait > 0 {
			t.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if d.c.ctx.Err() == nil {
			d.c.control(f)
			h.stats.Resyncs.Add(1)
		}
	}
}

// worker returns the fan-out worker that owns conv.
func (h *Hub) worker(conv string) *worker {
	// FNV-1a: stable, cheap, no allocation.
	var x uint32 = 2166136261
	for i := 0; i < len(conv); i++ {
		x ^= uint32(conv[i])
		x *= 16777619
	}
	return h.workers[x%uint32(len(h.workers))]
}
