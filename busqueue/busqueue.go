// Package busqueue is the bounded, lossy notice buffer the PostgreSQL and
// NATS buses keep between their goroutines.
package busqueue

import (
	"context"
	"sync"

	"github.com/parleychat/parley"
)

// Queue is the bounded, lossy buffer of notices a parley.Bus keeps between
// its goroutines (published and not yet sent; received and not yet
// delivered). It never blocks: when a push would take it over its bound it
// drops everything buffered and remembers the loss, which the Bus then
// reports (parley.BusHandler.Lost) — the recovery that follows supersedes the
// dropped notices anyway. The zero value is not ready: call Init.
type Queue struct {
	max  int
	wake chan struct{} // capacity 1: something to take

	mu   sync.Mutex
	ns   []parley.Notice
	lost bool
}

// Init sets the bound (notices buffered at most).
func (q *Queue) Init(max int) {
	q.max = max
	q.wake = make(chan struct{}, 1)
}

// Push appends ns, and marks a loss if lost (or if ns does not fit).
func (q *Queue) Push(lost bool, ns []parley.Notice) {
	q.mu.Lock()
	if len(q.ns)+len(ns) > q.max {
		q.ns, lost = nil, true
	} else {
		q.ns = append(q.ns, ns...)
	}
	q.lost = q.lost || lost
	q.mu.Unlock()
	q.Signal()
}

// Signal wakes the taker without adding anything (a retry, a first connect).
func (q *Queue) Signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Wake receives after a Push or Signal; the taker then calls Take.
func (q *Queue) Wake() <-chan struct{} { return q.wake }

// Take empties the queue: what was buffered, and whether notices were
// dropped since the last Take.
func (q *Queue) Take() (ns []parley.Notice, lost bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ns, lost = q.ns, q.lost
	q.ns, q.lost = nil, false
	return ns, lost
}

// Deliver hands what the queue receives to h until ctx ends: Lost first when
// notices were dropped, then the batch. It is the one goroutine that calls h
// (parley.BusHandler's methods are called one at a time).
func (q *Queue) Deliver(ctx context.Context, h parley.BusHandler) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		ns, lost := q.Take()
		if lost {
			h.Lost()
		}
		if len(ns) > 0 {
			h.Notify(ns)
		}
	}
}
