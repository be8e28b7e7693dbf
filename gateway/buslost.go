package gateway

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Bus-loss recovery. The bus says when it may have lost notices (Lost);
// the hub then polls the store for what they would have said and pushes
// it through the fan-out, and only when that poll fails do the subscribed
// sockets get resync, spread over a window. The same poll of the heads of
// watched conversations runs as a slow backstop (backstop) for a publisher
// that died between its commit and its publish.

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
		for _, fo := range h.fanouts {
			fo.forgetRosters()
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
// was lost leaves a conversation unwatched here; its fan-out starts at the
// join seq, as the notice would have made it) and then the heads of every
// watched conversation (events, leaves and rollbacks whose notices were
// lost). Workers push what changed through the usual Feed; conversations
// that did not change cost nothing more.
func (h *Hub) recoverLoss(ctx context.Context) error {
	users := h.subscribedUsers()
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
// watch it, after telling the fan-out to start from the join seq: were it
// marked watched first, a backstop poll could reach the fan-out before and
// start it at the head, skipping the join.
func (h *Hub) relearn(p parley.OpenPeriod) {
	if !h.unwatchedBy(p.User, p.Conv) {
		return
	}
	h.fanoutOf(p.Conv).join(p)
	h.watchFor(p.Conv, p.User)
}

// spreadResync sends resync to every subscribed socket, each at its own
// moment within ResyncWindow (Jitter), so a loss the store cannot cover
// does not make every client of the gateway sync at the same instant.
func (h *Hub) spreadResync(ctx context.Context) {
	type due struct {
		at time.Duration
		c  *conn
	}
	var ds []due
	for _, c := range h.subscribed() {
		ds = append(ds, due{c: c, at: min(max(h.o.Jitter(h.o.ResyncWindow), 0), h.o.ResyncWindow)})
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

// backstop polls the heads of watched conversations and hands the ones
// ahead of what was pushed to their fan-outs.
func (h *Hub) backstop(ctx context.Context) {
	if err := h.pollHeads(ctx); err != nil && ctx.Err() == nil {
		h.log.Warn("backstop: reading heads failed", "err", err)
	}
}

// pollBatch bounds the ids of one store read of the poll.
const pollBatch = 1000

// pollHeads reads the heads of watched conversations, pollBatch at a time,
// and hands each to its fan-out, which pushes what it is behind on exactly
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
			h.fanoutOf(hd.Conv).check(hd)
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
