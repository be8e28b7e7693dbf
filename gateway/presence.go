package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Presence. Every socket is online or away (the presence frame; a new
// socket is online). The hub holds one lease per user it has sockets of
// in the store (Store.PutPresence): online when one of the user's sockets
// here is online, away when all are. presenceLoop puts the leases that
// changed at once and renews all of them every PresenceTTL/3, in one
// statement per round, and gives them up when the hub stops; sweepLoop
// removes the expired leases of gateways that stopped renewing (died).
// The store reports each change of a user's presence to exactly one
// caller, which announces it: one presence notice per conversation in
// which the user holds an open period (parley.PresenceNotices), so that
// every gateway watching one of them hears it. A receiver pushes it once
// (presenceSeen) to the subscribed sockets of its users who share an open
// conversation with the user (Store.Sharing), the user's own excepted.

// presence is the hub's lease state.
type presence struct {
	poke chan struct{}

	mu   sync.Mutex
	held map[string]parley.PresenceState // the lease state last put, by user
	seen map[string]seenPresence         // the last presence notice pushed, by user
}

type seenPresence struct {
	state parley.PresenceState
	at    time.Time
}

func newPresence() *presence {
	return &presence{poke: make(chan struct{}, 1), held: map[string]parley.PresenceState{}, seen: map[string]seenPresence{}}
}

// pokePresence asks presenceLoop to put what changed; it never blocks.
func (h *Hub) pokePresence() {
	select {
	case h.pres.poke <- struct{}{}:
	default:
	}
}

// presenceTTL is the lease lifetime.
func (h *Hub) presenceTTL() time.Duration { return h.o.PresenceTTL }

// localPresence is, per user with sockets here, the state of their lease.
func (h *Hub) localPresence() map[string]parley.PresenceState {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make(map[string]parley.PresenceState, len(h.byUser))
	for u, cs := range h.byUser {
		st := parley.PresenceAway
		for c := range cs {
			if !c.away.Load() {
				st = parley.PresenceOnline
				break
			}
		}
		out[u] = st
	}
	return out
}

// presenceLoop puts the leases: what changed when poked, everything every
// PresenceTTL/3, and every lease given up when ctx ends.
func (h *Hub) presenceLoop(ctx context.Context) {
	t := time.NewTicker(h.presenceTTL() / 3)
	defer t.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			h.giveUpLeases(ctx)
			return
		case <-t.C:
			all = true
		case <-h.pres.poke:
		}
		h.putLeases(ctx, all)
	}
}

// putLeases puts the leases that changed since the last put (all: every
// lease, a renewal) and announces the changes the store reports.
func (h *Hub) putLeases(ctx context.Context, all bool) {
	want := h.localPresence()
	h.pres.mu.Lock()
	var ls []parley.PresenceLease
	for u, st := range want {
		if all || h.pres.held[u] != st {
			ls = append(ls, parley.PresenceLease{User: u, State: st})
		}
	}
	for u := range h.pres.held {
		if _, ok := want[u]; !ok {
			ls = append(ls, parley.PresenceLease{User: u, State: parley.PresenceOffline})
		}
	}
	h.pres.mu.Unlock()
	if len(ls) == 0 {
		return
	}
	// A write once started is finished, not cancelled by a stop: an
	// aborted one could have committed unseen (held would then miss a
	// lease, and its changes go unannounced).
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.timeout())
	changed, err := h.store.PutPresence(pctx, h.o.GatewayID, ls, h.presenceTTL())
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("presence: putting leases failed; retried at the next round", "leases", len(ls), "err", err)
		}
		return
	}
	h.pres.mu.Lock()
	for _, l := range ls {
		if l.State == parley.PresenceOffline {
			delete(h.pres.held, l.User)
		} else {
			h.pres.held[l.User] = l.State
		}
	}
	h.pres.mu.Unlock()
	h.announce(ctx, changed)
}

// giveUpLeases removes this hub's leases when it stops, so its users read
// offline at once rather than after the TTL.
func (h *Hub) giveUpLeases(ctx context.Context) {
	h.pres.mu.Lock()
	var ls []parley.PresenceLease
	for u := range h.pres.held {
		ls = append(ls, parley.PresenceLease{User: u, State: parley.PresenceOffline})
	}
	h.pres.held = map[string]parley.PresenceState{}
	h.pres.mu.Unlock()
	if len(ls) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.timeout())
	defer cancel()
	changed, err := h.store.PutPresence(sctx, h.o.GatewayID, ls, h.presenceTTL())
	if err != nil {
		h.log.Warn("presence: giving up leases failed; they expire", "err", err)
		return
	}
	h.announce(sctx, changed)
}

// sweep removes expired leases (other gateways' that stopped) and
// announces what that changed.
func (h *Hub) sweep(ctx context.Context) {
	const batch = 500
	for ctx.Err() == nil {
		// Finished even when a stop comes meanwhile (see putLeases): a
		// claim that committed unseen would leave its users never
		// announced offline.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.timeout())
		changed, err := h.store.SweepPresence(sctx, batch)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("presence: sweep failed", "err", err)
			}
			return
		}
		h.announce(ctx, changed)
		if len(changed) < batch {
			return
		}
	}
}

// announce publishes each change, once per conversation of the user with
// an open period.
func (h *Hub) announce(ctx context.Context, changed []parley.Presence) {
	for _, p := range changed {
		jctx, cancel := context.WithTimeout(ctx, h.timeout())
		heads, err := h.store.Joined(jctx, p.User)
		cancel()
		if err != nil {
			h.log.Warn("presence: reading the user's conversations failed; change not announced", "user", p.User, "err", err)
			continue
		}
		convs := make([]string, len(heads))
		for i, hd := range heads {
			convs[i] = hd.Conv
		}
		for _, n := range parley.PresenceNotices(p, convs) {
			h.Publish(n)
		}
	}
}

// freshPresence reports whether n is a presence change not pushed here
// yet: not a repeat (its other conversations, an echo) nor older than
// the last one pushed. The store moves a user's last seen time forward
// by at least a millisecond at every change, so it orders them.
func (p *presence) freshPresence(n parley.Notice) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.seen[n.User]
	if ok && !n.At.After(last.at) {
		return false
	}
	p.seen[n.User] = seenPresence{n.State, n.At}
	return true
}

// prunePresence forgets the pushed changes older than an hour: a repeat
// comes within moments of its first.
func (p *presence) prune(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for u, s := range p.seen {
		if now.Sub(s.at) > time.Hour {
			delete(p.seen, u)
		}
	}
}

// pushPresence pushes a presence change to the subscribed sockets here of
// the users who share an open conversation with its user.
func (h *Hub) pushPresence(ctx context.Context, n parley.Notice) {
	if !h.pres.freshPresence(n) {
		return
	}
	var others []string
	for _, u := range h.subscribedUsers() {
		if u != n.User {
			others = append(others, u)
		}
	}
	if len(others) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, h.timeout())
	audience, err := h.store.Sharing(sctx, n.User, others)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("presence: audience read failed; not pushed", "user", n.User, "err", err)
		}
		return
	}
	f := &frame{b: wire.MarshalFrame(wire.PresencePush(parley.Presence{User: n.User, State: n.State, LastSeen: n.At}))}
	h.mu.RLock()
	var conns []*conn
	for _, u := range audience {
		for c := range h.subs[u] {
			conns = append(conns, c)
		}
	}
	h.mu.RUnlock()
	for _, c := range conns {
		c.signal(f)
	}
}

// setPresence answers a presence frame: this socket is now online or
// away. No reply.
func (c *conn) setPresence(req wire.Request) {
	away := req.State == string(parley.PresenceAway)
	if c.away.Swap(away) != away {
		c.h.pokePresence()
	}
}

// sweepEvery is how often the sweep runs: a third of the TTL, at most 5s.
func (h *Hub) sweepEvery() time.Duration { return min(h.presenceTTL()/3, 5*time.Second) }
