package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley/wire"
)

// Lifecycle: Run starts the hub's loops and waits for them; Drain and
// Shutdown end its sockets gracefully when the server stops.

// Run runs the bus subscription, the fan-outs and the backstop
// until ctx ends; it returns when they have all stopped.
func (h *Hub) Run(ctx context.Context) error {
	h.runCtx.Store(&ctx)
	var wg sync.WaitGroup
	for _, fo := range h.fanouts {
		wg.Go(func() { fo.run(ctx) })
	}
	wg.Go(func() { every(ctx, h.o.Backstop, nil, func() { h.backstop(ctx) }) })
	wg.Go(func() { h.recoverLoop(ctx) })
	wg.Go(func() { h.signalLoop(ctx) })
	wg.Go(func() { h.presenceLoop(ctx) })
	wg.Go(func() { every(ctx, h.sweepEvery(), nil, func() { h.sweep(ctx) }) })
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
