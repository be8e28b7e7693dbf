package gateway

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRequestLinger is how long an idle request worker waits for its
// next job before it exits: long enough that a steady stream of requests
// keeps reusing the same few goroutines, short enough that a burst's
// workers (and their stacks) are gone soon after it.
const DefaultRequestLinger = 5 * time.Second

// reqPool runs the requests of every socket of a hub on goroutines that are
// kept for the next request. A store call grows a deep stack (the driver's
// frames); a goroutine per request grew it anew, copying it at each
// doubling, and threw it away. A worker keeps its grown stack between
// requests, and the reader of a socket, which waits for its whole life on
// an idle socket, still never runs the deep call, so its stack stays small.
//
// There is no cap: a request blocks on the store, and a fixed number of
// workers would make every socket wait behind the slowest. A job goes to
// the most recently idle worker (its stack is grown and its cache warm) or,
// when none is idle, to a new one; a worker idle for linger exits. After
// close, requests run on a goroutine of their own, as before the pool.
type reqPool struct {
	linger time.Duration
	handle func(c *conn, ctx context.Context, data []byte) // (*conn).handle; tests swap it

	mu     sync.Mutex
	idle   []*reqWorker // a stack: the last parked goes first
	closed bool
	wg     sync.WaitGroup // every worker

	started atomic.Int64 // workers ever started
	live    atomic.Int64 // workers running now
}

// reqWorker is one pooled goroutine; jobs holds at most the one job it was
// handed when taken off the idle stack (or a zero job: exit).
type reqWorker struct {
	jobs chan reqJob
}

// reqJob is one request; done is signalled once it is answered.
type reqJob struct {
	c    *conn
	ctx  context.Context
	data []byte
	done chan struct{}
}

// dones recycles the channels a reader waits on: a socket answers one
// request at a time, so a channel is free again once it was received from.
var dones = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

func newReqPool(linger time.Duration) *reqPool {
	return &reqPool{linger: linger, handle: (*conn).handle}
}

// run answers one request of c on a pooled worker and returns once it is
// answered, so a socket's requests stay in order and a drain that waits
// for its reader waits for the request too.
func (p *reqPool) run(c *conn, ctx context.Context, data []byte) {
	done := dones.Get().(chan struct{})
	j := reqJob{c: c, ctx: ctx, data: data, done: done}
	p.mu.Lock()
	switch n := len(p.idle); {
	case p.closed:
		p.mu.Unlock()
		go func() {
			p.handle(j.c, j.ctx, j.data)
			done <- struct{}{}
		}()
	case n > 0:
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.jobs <- j // never blocks: a worker off the stack has no job yet
	default:
		p.wg.Add(1)
		p.mu.Unlock()
		p.started.Add(1)
		p.live.Add(1)
		go p.work(&reqWorker{jobs: make(chan reqJob, 1)}, j)
	}
	<-done
	dones.Put(done)
}

// work runs jobs until the worker idles for linger or the pool closes.
func (p *reqPool) work(w *reqWorker, j reqJob) {
	defer p.wg.Done()
	defer p.live.Add(-1)
	idle := time.NewTimer(p.linger)
	defer idle.Stop()
	for {
		p.handle(j.c, j.ctx, j.data)
		done := j.done
		j = reqJob{} // hold nothing of the socket while idle
		// Parked before the reader hears of it, so the socket's next
		// request finds this worker idle.
		parked := p.park(w)
		done <- struct{}{}
		if !parked {
			return
		}
		idle.Reset(p.linger)
		select {
		case j = <-w.jobs:
		case <-idle.C:
			if p.retire(w) {
				return
			}
			j = <-w.jobs // taken just as it timed out: the job is on its way
		}
		if j.c == nil {
			return // the pool closed
		}
	}
}

// park puts w on the idle stack; false when the pool is closed.
func (p *reqPool) park(w *reqWorker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.idle = append(p.idle, w)
	return true
}

// retire takes w off the idle stack; false when it was taken meanwhile.
func (p *reqPool) retire(w *reqWorker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.idle, w)
	if i < 0 {
		return false
	}
	p.idle = slices.Delete(p.idle, i, i+1)
	return true
}

// close stops the idle workers and waits for every worker: a busy one
// exits once its request is answered. Requests after it run unpooled.
func (p *reqPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		w.jobs <- reqJob{}
	}
	p.wg.Wait()
}
