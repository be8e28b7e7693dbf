// Package inmem holds Parley's in-process adapters: a parley.Bus for a
// single-node deployment, where every gateway lives in one process.
//
// Like Centrifuge's memory broker, it is single-node only: a notice never
// leaves the process, so two servers each with an inmem.Bus do not hear
// each other. Deployments with several gateways use postgres.Bus or
// nats.Bus.
package inmem

import (
	"context"
	"errors"
	"sync"

	"github.com/parleychat/parley"
)

// DefaultMaxBuffered bounds the notices a Bus holds for its handler.
const DefaultMaxBuffered = 65536

// Bus is a parley.Bus within one process.
//
// Beyond the parley.Bus contract: Publish appends to a buffer under a mutex
// and wakes Run, which hands everything buffered to the handler in one
// Notify call, so notices published while the handler is busy arrive
// together. Notices published before Run (or between runs) wait in the
// buffer. The buffer is bounded: when a publish would take it past
// DefaultMaxBuffered notices (a handler that has stopped keeping up),
// everything buffered is dropped, and the handler's next call is Lost: it
// recovers what the dropped notices would have said from the store.
//
// Interest is accepted and ignored: the one gateway of the process hears
// every notice, as the parley.Bus contract allows (it is not Selective).
// Notices are handed over as published, carried events included.
type Bus struct {
	max  int
	wake chan struct{} // capacity 1: a publish since the last take

	mu      sync.Mutex
	buf     []parley.Notice
	lost    bool // notices were dropped since the last take
	running bool
}

var _ parley.Bus = (*Bus)(nil)

// NewBus returns an empty bus.
func NewBus() *Bus {
	return &Bus{max: DefaultMaxBuffered, wake: make(chan struct{}, 1)}
}

// Publish queues ns for the handler of Run. It never blocks.
func (b *Bus) Publish(ns ...parley.Notice) {
	if len(ns) == 0 {
		return
	}
	b.mu.Lock()
	if len(b.buf)+len(ns) > b.max {
		// Keeping the oldest would not help: Lost makes the handler read
		// the store, which supersedes them. Free the memory instead.
		b.buf, b.lost = nil, true
	} else {
		b.buf = append(b.buf, ns...)
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Interest is a no-op: every notice reaches the handler.
func (b *Bus) Interest(parley.Interest) {}

// Run delivers published notices to h, in publish order, until ctx ends;
// then it returns ctx.Err(). Notices still buffered then stay for the next
// Run. Only one Run may be active at a time; a second gets an error.
func (b *Bus) Run(ctx context.Context, h parley.BusHandler) error {
	b.mu.Lock()
	if b.running {
		b.mu.Unlock()
		return errors.New("inmem: bus: Run is already running")
	}
	b.running = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
	}()

	for {
		// Take first, so that notices published before Run are delivered
		// without waiting for another publish.
		b.mu.Lock()
		ns, lost := b.buf, b.lost
		b.buf, b.lost = nil, false
		b.mu.Unlock()
		if lost {
			h.Lost()
		}
		if len(ns) > 0 {
			h.Notify(ns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.wake:
		}
	}
}
