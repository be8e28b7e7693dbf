// Package gateway serves Parley's realtime protocol (docs/protocol.md) over
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
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
)

// Hub is one gateway. It is the registry of its sockets: who is connected
// (and upgrading), by user, and which sockets are subscribed and which
// conversations each of them watches, from which follows the interest it
// declares to the bus (interest.go). Its other jobs each have a file and
// use the registry: the upgrade (upgrade.go), the requests (request.go),
// the fan-out (fanout.go), revocation (revoke.go), recovery from a bus
// loss (buslost.go), and starting and stopping (lifecycle.go).
type Hub struct {
	o     Options
	store Store
	app   *app.Service
	bus   parley.Bus
	log   *slog.Logger

	// mu guards the registry: these maps, and nothing outside them. A
	// socket's subscription (whether it is subscribed, what it watches)
	// is kept here too, not on the conn, so that it has one owner.
	mu    sync.RWMutex
	conns map[*conn]struct{} // every open socket
	// byUser indexes conns by user, so an account notice (a logout, a
	// disable, a login that replaced an install, from any gateway) costs
	// that user's sockets, not every socket.
	byUser  map[string]map[*conn]struct{}
	sockets map[string]int // open (and upgrading) sockets by user
	// subs holds the subscribed sockets by user, each with the
	// conversations it watches: a socket is subscribed exactly while it
	// is in its user's set.
	subs  map[string]map[*conn]watchSet
	watch map[string]int // conv → subscribed sockets watching it
	// subGen changes whenever a socket subscribes or stops being
	// subscribed (under mu), so the fan-out's kept audiences know when
	// their sockets are stale.
	subGen atomic.Uint64

	revoked revocations // recent revocations, for sockets mid-upgrade (revoke.go)

	// drainMu: request handlers hold it shared; Drain takes it exclusively,
	// so when Drain has it no accepted request is still running.
	drainMu  sync.RWMutex
	draining atomic.Bool

	reqs *reqPool // the goroutines that answer requests

	fanouts []*fanout     // each conversation's pushes go through one (Hub.fanoutOf)
	lost    chan struct{} // the bus lost notices: recover (buslost.go)
	sig     *signals      // typing and presence (typing.go)
	pres    *presence     // presence leases (presence.go)
	wg      sync.WaitGroup
	runCtx  atomic.Pointer[context.Context]

	stats Stats
}

// watchSet is the conversations one subscribed socket watches.
type watchSet map[string]struct{}

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
	// back), typing and presence notices not counted (SignalsReceived).
	// Losses are BusGap.
	NoticesSent     atomic.Int64
	NoticesReceived atomic.Int64
	SignalsReceived atomic.Int64
	// Signal pushes (typing, presence) queued to sockets, and signal
	// notices dropped because the hub's signal queue was full.
	Signals        atomic.Int64
	SignalsDropped atomic.Int64
}

// New returns a Hub. Call Run to start its fan-out, and serve it as the
// handler of GET /ws.
func New(o Options) *Hub {
	o = o.withDefaults()
	h := &Hub{
		o: o, store: o.Store, bus: o.Bus, log: o.Log,
		conns:   map[*conn]struct{}{},
		byUser:  map[string]map[*conn]struct{}{},
		subs:    map[string]map[*conn]watchSet{},
		sockets: map[string]int{},
		watch:   map[string]int{},
		lost:    make(chan struct{}, 1),
		sig:     newSignals(),
		pres:    newPresence(),
		reqs:    newReqPool(DefaultRequestLinger),
	}
	h.fanouts = make([]*fanout, o.Workers)
	for i := range h.fanouts {
		h.fanouts[i] = newFanout(h)
	}
	h.app = o.App
	if h.app == nil {
		full, ok := o.Store.(app.Store)
		if !ok {
			panic("gateway: Options.App is nil and Options.Store does not implement app.Store")
		}
		ao := app.Options{Store: full, Publish: h.Publish, Revoke: h, Config: o.Config, Log: o.Log}
		if o.Metrics != nil {
			ao.Metrics = o.Metrics
		}
		h.app = app.New(ao)
	}
	return h
}

// Stats returns the hub's counters.
func (h *Hub) Stats() *Stats { return &h.stats }

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

// register records an upgraded socket, whose slot is reserved; its user is
// declared served here with their first socket.
func (h *Hub) register(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conns[c] = struct{}{}
	mine := h.byUser[c.p.User]
	if mine == nil {
		mine = map[*conn]struct{}{}
		h.byUser[c.p.User] = mine
		h.declareLocked(parley.Interest{Serve: []string{c.p.User}})
	}
	mine[c] = struct{}{}
	h.stats.Conns.Add(1)
	h.pokePresence()
}

// remove forgets a closed socket and gives its slot back.
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
	h.pokePresence()
}

// snapshot returns every open socket.
func (h *Hub) snapshot() []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return keysOf(h.conns)
}

// socketsOf returns user's open sockets here.
func (h *Hub) socketsOf(user string) []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return keysOf(h.byUser[user])
}

// subscribe registers c for pushes of the conversations its user is in now
// (and, through the fan-out, those they join later). The socket is
// registered before the store is read, watching nothing yet: a join
// committed while Joined reads reaches it through the fan-out
// (subscribers) and makes it watch that conversation, where a socket
// registered only after the read would never watch it. A socket whose
// token was revoked is refused: revoke marks the socket and then
// unsubscribes it under mu, so a subscribe either comes before and is
// undone, or sees the mark.
func (h *Hub) subscribe(ctx context.Context, c *conn) error {
	h.mu.Lock()
	if c.revoked.Load() {
		h.mu.Unlock()
		return parley.ErrBadToken
	}
	set := h.subs[c.p.User]
	if _, ok := set[c]; ok {
		h.mu.Unlock()
		return nil
	}
	if set == nil {
		set = map[*conn]watchSet{}
		h.subs[c.p.User] = set
	}
	set[c] = watchSet{}
	h.subGen.Add(1)
	h.mu.Unlock()

	heads, err := h.store.Joined(ctx, c.p.User)
	if err != nil {
		h.unsubscribe(c)
		return err
	}
	for _, hd := range heads {
		h.fanoutOf(hd.Conv).baseline(hd)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ws, ok := h.subs[c.p.User][c]
	if !ok || c.revoked.Load() {
		// Revoked or closed while the store was read: unsubscribed.
		return parley.ErrBadToken
	}
	var fresh []string
	for _, hd := range heads {
		if h.watchLocked(ws, hd.Conv) {
			fresh = append(fresh, hd.Conv)
		}
	}
	h.declareLocked(parley.Interest{Watch: fresh})
	return nil
}

// unsubscribe stops pushes to c and forgets what it watched.
func (h *Hub) unsubscribe(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unsubscribeLocked(c)
}

func (h *Hub) unsubscribeLocked(c *conn) {
	set := h.subs[c.p.User]
	ws, ok := set[c]
	if !ok {
		return
	}
	h.subGen.Add(1)
	delete(set, c)
	if len(set) == 0 {
		delete(h.subs, c.p.User)
	}
	for conv := range ws {
		h.unwatchLocked(conv)
	}
}

// subscribers returns the subscribed sockets of users, under one read
// lock. Each is made to watch conv (watchFor) when it does not yet: a user
// who joined after subscribing starts to be watched with their join event.
func (h *Hub) subscribers(conv string, users ...string) []*conn {
	var cs []*conn
	fresh := false
	h.mu.RLock()
	for _, u := range users {
		for c, ws := range h.subs[u] {
			cs = append(cs, c)
			if _, ok := ws[conv]; !ok {
				fresh = true
			}
		}
	}
	h.mu.RUnlock()
	if fresh {
		h.watchFor(conv, users...)
	}
	return cs
}

// subscribed returns every subscribed socket.
func (h *Hub) subscribed() []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var cs []*conn
	for _, set := range h.subs {
		for c := range set {
			cs = append(cs, c)
		}
	}
	return cs
}

// subscribedUsers returns the users with a subscribed socket here.
func (h *Hub) subscribedUsers() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return keysOf(h.subs)
}

// keysOf returns m's keys, in no order: a copy the caller may use after
// the registry's lock is released.
func keysOf[K comparable, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// watchers returns the subscribed sockets watching conv.
func (h *Hub) watchers(conv string) []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var cs []*conn
	for _, set := range h.subs {
		for c, ws := range set {
			if _, ok := ws[conv]; ok {
				cs = append(cs, c)
			}
		}
	}
	return cs
}

// unwatchedBy reports whether a subscribed socket of user does not watch
// conv.
func (h *Hub) unwatchedBy(user, conv string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, ws := range h.subs[user] {
		if _, ok := ws[conv]; !ok {
			return true
		}
	}
	return false
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

// isWatched reports whether a subscribed socket watches conv.
func (h *Hub) isWatched(conv string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.watch[conv] > 0
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
