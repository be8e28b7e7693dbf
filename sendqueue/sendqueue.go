// Package sendqueue is group commit for a store's Send: concurrent calls
// queue per lane and run as batches through the store's
// parley.SendBatcher.
package sendqueue

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/parleychat/parley"
)

// DefaultMaxBatch bounds a batch of a Queue, so one busy conversation's
// leader commits promptly and hands over (fairness), and one transaction's
// lock is held for a bounded time.
const DefaultMaxBatch = 64

// Queue turns concurrent Send calls into batches: callers whose lane
// (the key function of their request's conversation: a hash of it into
// postgres.sendLanes lanes, today one; one lane for everything on SQLite's
// single writer; a conversation must always map to the same lane) is busy
// queue up; the caller that finds the lane idle leads: it runs a batch of itself and up
// to max-1 queued callers, in arrival order, hands every result over
// after the commit, and passes the lead to the first caller still queued.
// A lone caller is a batch of one and waits for nobody.
//
// A caller whose context ends while it is still queued leaves the queue
// with the context's error (nothing was done for it); once its request is
// in a running batch it waits for the batch, which ends when the database
// answers or when every caller in it has given up.
type Queue struct {
	run func(ctx context.Context, items []parley.BatchSend) []parley.BatchResult
	key func(conv string) string
	max int

	mu    sync.Mutex
	lanes map[string]*lane

	batches, batched atomic.Int64
}

type lane struct {
	queue []*waiter
}

type waiter struct {
	ctx    context.Context
	item   parley.BatchSend
	res    parley.BatchResult
	taken  bool          // in a batch or leading: no longer in the queue
	lead   bool          // handed the lead rather than a result
	signal chan struct{} // 1-buffered: sent on once res or lead is set
	batch  *batch        // the running batch it was taken into (not as leader)
}

// batch is the shared context of a batch of several callers: it ends when
// every caller has left (its context ended). A queued caller leaves from
// its own wait in Send, which watches its context anyway; only the leader,
// busy running the batch, needs a context.AfterFunc.
type batch struct {
	ctx    context.Context
	cancel context.CancelFunc
	left   atomic.Int64
}

// leave counts one caller out; the last one ends the batch's context.
// Late calls, after the batch ran, are harmless.
func (b *batch) leave() {
	if b.left.Add(-1) == 0 {
		b.cancel()
	}
}

// New returns a queue that runs batches of at most max items
// (DefaultMaxBatch if max < 1) with run, laned by key.
func New(run func(ctx context.Context, items []parley.BatchSend) []parley.BatchResult, key func(conv string) string, max int) *Queue {
	if max < 1 {
		max = DefaultMaxBatch
	}
	return &Queue{run: run, key: key, max: max, lanes: map[string]*lane{}}
}

// Stats returns how many batches ran and how many sends they held.
func (q *Queue) Stats() (batches, sends int64) {
	return q.batches.Load(), q.batched.Load()
}

// Queued returns how many callers wait in conv's lane (not counting the
// batch running).
func (q *Queue) Queued(conv string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lanes[q.key(conv)]; l != nil {
		return len(l.queue)
	}
	return 0
}

// Send sends r as p in the next batch of its lane. r must be validated.
func (q *Queue) Send(ctx context.Context, p parley.Principal, r parley.SendRequest) (parley.Sent, error) {
	if err := ctx.Err(); err != nil {
		return parley.Sent{}, err
	}
	w := waiters.Get().(*waiter)
	w.ctx, w.item = ctx, parley.BatchSend{P: p, Req: r}
	s, err := q.send(w)
	// Nobody holds w any more: a leader is done with a waiter once it
	// has signalled it, and each waiter receives every signal sent to it
	// (none when it left the queue on its own).
	*w = waiter{signal: w.signal}
	waiters.Put(w)
	return s, err
}

// waiters keeps waiters and their channels for reuse: every send needs one.
var waiters = sync.Pool{New: func() any { return &waiter{signal: make(chan struct{}, 1)} }}

// send is Send with w's context and request set.
func (q *Queue) send(w *waiter) (parley.Sent, error) {
	ctx := w.ctx
	k := q.key(w.item.Req.Conv)
	q.mu.Lock()
	l := q.lanes[k]
	if l == nil {
		// The lane is idle: lead at once.
		l = lanePool.Get().(*lane)
		l.queue = l.queue[:0]
		q.lanes[k] = l
		w.taken = true
		q.mu.Unlock()
		return q.lead(k, w)
	}
	l.queue = append(l.queue, w)
	q.mu.Unlock()

	select {
	case <-w.signal:
	case <-ctx.Done():
		q.mu.Lock()
		if !w.taken {
			for i, o := range l.queue {
				if o == w {
					// slices.Delete clears the slot past the new end: waiters
					// are pooled, and the array must not keep this one.
					l.queue = slices.Delete(l.queue, i, i+1)
					break
				}
			}
			q.mu.Unlock()
			return parley.Sent{}, ctx.Err()
		}
		b := w.batch
		q.mu.Unlock()
		if b != nil {
			b.leave()
		}
		<-w.signal
	}
	if w.lead {
		return q.lead(k, w)
	}
	return w.res.Sent, w.res.Err
}

// lead runs one batch headed by w, answers its other callers, and passes
// the lead on or retires the lane.
func (q *Queue) lead(k string, w *waiter) (parley.Sent, error) {
	q.mu.Lock()
	l := q.lanes[k]
	var others []*waiter
	var b *batch
	if n := min(len(l.queue), q.max-1); n > 0 {
		others = make([]*waiter, n)
		copy(others, l.queue)
		l.queue = shift(l.queue, n)
		// Values and deadline-free, so one impatient caller does not fail
		// the others; made before the callers can see it.
		b = &batch{}
		b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(w.ctx))
		b.left.Store(int64(1 + n))
		for _, o := range others {
			o.taken, o.batch = true, b
		}
	}
	q.mu.Unlock()

	items := make([]parley.BatchSend, 1+len(others))
	items[0] = w.item
	for i, o := range others {
		items[i+1] = o.item
	}
	// The batch runs under the lone caller's own context, or under b's,
	// which ends when all of its callers' contexts have ended.
	var res []parley.BatchResult
	if b == nil {
		res = q.run(w.ctx, items)
	} else {
		stop := context.AfterFunc(w.ctx, b.leave)
		res = q.run(b.ctx, items)
		stop()
		b.cancel()
	}
	q.batches.Add(1)
	q.batched.Add(int64(len(items)))
	for i, o := range others {
		o.res = res[i+1]
		o.signal <- struct{}{}
	}

	q.mu.Lock()
	if len(l.queue) > 0 {
		next := l.queue[0]
		l.queue = shift(l.queue, 1)
		next.taken, next.lead = true, true
		next.signal <- struct{}{}
	} else {
		delete(q.lanes, k)
		lanePool.Put(l)
	}
	q.mu.Unlock()
	return res[0].Sent, res[0].Err
}

// shift drops the first n waiters of queue and moves the rest to the front:
// the array keeps its capacity for the next callers (reslicing from the
// front shrank it, and a busy lane reallocated its queue every few batches).
func shift(queue []*waiter, n int) []*waiter {
	rest := copy(queue, queue[n:])
	clear(queue[rest:])
	return queue[:rest]
}

// lanePool keeps retired lanes (and their queues' arrays) for reuse: an
// uncontended send makes and retires a lane every time.
var lanePool = sync.Pool{New: func() any { return &lane{} }}
