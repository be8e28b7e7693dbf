// Package gateway serves Parley's realtime protocol (SPEC §3) over
// WebSocket: it authenticates the upgrade, answers the eight request types,
// and pushes committed events to the sockets that may see them.
//
// Delivery model. A send's reply is written only after its commit, and the
// (conv, seq) of every committed event is published on the Bus after the
// commit. Every gateway hears every notice and reads the event and the
// membership periods around it from the Store (Feeder.Feed), so a push is
// decided by the same visibility rules as a sync. Notices are hints: a seq
// gap is filled by reading the store, a slow poll of the heads of watched
// conversations backs up a publisher that died between commit and publish,
// and a bus that lost its connection makes every socket resync. Pushes are
// an optimisation on top of sync, never the only way an event arrives: a
// client that sees a gap syncs.
//
// Slow clients. Every socket has a bounded send queue written by one
// goroutine with a write deadline. Above the high-water mark, events become
// hints (one per conversation until it is written); a full queue
// disconnects that socket and nobody else waits for it.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/middleware"
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
	// QueueSize bounds each socket's send queue, in frames (default 256);
	// HighWater is where events become hints (default QueueSize/2).
	QueueSize int
	HighWater int
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
	// Reauth is how often every socket's token is checked again (default
	// 1m): a token logged out on another gateway, or an account disabled,
	// ends its sockets within it. A logout through this gateway's own HTTP
	// API ends them at once (RevokeToken).
	Reauth time.Duration
	// OriginPatterns lists the browser origins allowed besides the
	// server's own host (see websocket.AcceptOptions); a request without
	// an Origin header (a non-browser client) is always allowed.
	OriginPatterns []string
	// Workers is the number of fan-out goroutines (default 8). A
	// conversation is always handled by the same one, in seq order.
	Workers int
	// SendLimit decides whether user may send now (nil: no limit); a
	// refused send frame is answered RATE_LIMITED with retry_after_ms.
	SendLimit func(ctx context.Context, user string) (ok bool, retryAfter time.Duration)
	// OnAccount is called for every account notice (a user disabled or
	// logged out anywhere), e.g. to forget cached token lookups.
	OnAccount func(user string)
	// Metrics receives sends by outcome, rate-limited frames and bus
	// gaps (nil: none).
	Metrics Metrics
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
	if o.QueueSize <= 0 {
		o.QueueSize = 256
	}
	if o.HighWater <= 0 || o.HighWater > o.QueueSize {
		o.HighWater = o.QueueSize / 2
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
	if o.Workers <= 0 {
		o.Workers = 8
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
	watch   map[string]int                // conv → subscribed sockets watching it

	// drainMu: request handlers hold it shared; Drain takes it exclusively,
	// so when Drain has it no accepted request is still running.
	drainMu  sync.RWMutex
	draining atomic.Bool

	workers []*worker
	poke    chan struct{} // ask the backstop to poll now
	wg      sync.WaitGroup
	runCtx  atomic.Pointer[context.Context]

	stats Stats
}

// Stats are counters a test or the metrics layer can read.
type Stats struct {
	Conns     atomic.Int64 // open sockets
	Pushed    atomic.Int64 // event frames queued to sockets
	Hinted    atomic.Int64 // hint frames queued
	Kicked    atomic.Int64 // sockets closed for a full queue
	Resyncs   atomic.Int64 // resync frames sent after a bus loss
	Backstops atomic.Int64 // conversations the backstop found behind
	Revoked   atomic.Int64 // sockets closed because their token stopped working
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
		watch:   map[string]int{},
		poke:    make(chan struct{}, 1),
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
	wg.Go(func() { every(ctx, h.o.Backstop, h.poke, func() { h.backstop(ctx) }) })
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
		c.enqueue(goaway)
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
	token := wire.BearerToken(r)
	if token == "" {
		wire.WriteProblem(w, parley.CodeUnauthenticated, "a bearer token or session cookie is required", "")
		return
	}
	// Behind the HTTP chain the token was just resolved (through its cache);
	// a reconnect storm then costs one lookup per socket, not two.
	caller := middleware.CallerFrom(r.Context())
	p, looked := caller.Principal, caller.Looked
	var err error
	if !caller.Known || caller.Token != token {
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
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		OriginPatterns:  h.o.OriginPatterns,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		return // Accept has answered (403 for a foreign origin)
	}
	ws.SetReadLimit(parley.MaxFrameBytes)
	c := newConn(h.ctx(), h, ws, p, token)
	h.mu.Lock()
	h.conns[c] = struct{}{}
	mine := h.byUser[p.User]
	if mine == nil {
		mine = map[*conn]struct{}{}
		h.byUser[p.User] = mine
	}
	mine[c] = struct{}{}
	late := h.revokedSinceLocked(looked, "t:"+token, "u:"+p.User)
	h.mu.Unlock()
	h.stats.Conns.Add(1)
	if late { // revoked while this socket was being upgraded: ask again
		ctx := h.ctx()
		h.wg.Go(func() { h.recheck(ctx, []*conn{c}) })
	}
	c.serve()
	h.remove(c)
}

// remove forgets a closed socket.
func (h *Hub) remove(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
	if mine := h.byUser[c.p.User]; mine != nil {
		delete(mine, c)
		if len(mine) == 0 {
			delete(h.byUser, c.p.User)
		}
	}
	h.unsubscribeLocked(c)
	h.stats.Conns.Add(-1)
}

// unsubscribeLocked stops pushes to c and forgets what it watched.
func (h *Hub) unsubscribeLocked(c *conn) {
	if set := h.subs[c.p.User]; set != nil {
		if _, ok := set[c]; ok {
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
	for _, hd := range heads {
		c.watched[hd.Conv] = struct{}{}
		h.watch[hd.Conv]++
	}
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
					h.watch[conv]++
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
	requestID = parley.NewID()
	h.log.Error("internal error", "op", op, "request_id", requestID, "err", err)
	return parley.CodeUnavailable, parley.InternalMessage, requestID
}

// busHandler adapts the hub to parley.BusHandler.
type busHandler struct{ h *Hub }

func (b busHandler) Notify(ns []parley.Notice) { b.h.Notify(ns) }
func (b busHandler) Lost()                     { b.h.Lost() }

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

// Lost tells every subscribed socket to resync and polls the heads now.
func (h *Hub) Lost() {
	h.metric(func(m Metrics) { m.BusGap() })
	f := &frame{b: wire.MarshalFrame(wire.Resync())}
	h.mu.RLock()
	for _, set := range h.subs {
		for c := range set {
			c.enqueue(f)
			h.stats.Resyncs.Add(1)
		}
	}
	h.mu.RUnlock()
	select {
	case h.poke <- struct{}{}:
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
	convs := h.watched()
	for len(convs) > 0 {
		batch := convs[:min(len(convs), 1000)]
		convs = convs[len(batch):]
		qctx, cancel := context.WithTimeout(ctx, h.timeout())
		heads, err := h.store.Heads(qctx, batch)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("backstop: reading heads failed", "err", err)
			}
			return
		}
		for _, hd := range heads {
			h.worker(hd.Conv).check(hd)
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
