package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testPool is a pool whose requests call handle instead of answering a
// socket; it is closed at the end of the test.
func testPool(t *testing.T, linger time.Duration, handle func()) *reqPool {
	t.Helper()
	p := newReqPool(linger)
	p.handle = func(*conn, context.Context, []byte) { handle() }
	t.Cleanup(p.close)
	return p
}

// eventually polls cond until it holds; the bound only keeps a broken
// pool from hanging the test, it asserts no timing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// One socket's requests, one after another, all run on the one worker the
// first started: its grown stack is what the next request reuses.
func TestReqPoolReusesWorker(t *testing.T) {
	n := 0
	p := testPool(t, time.Hour, func() { n++ })
	c := &conn{}
	for range 100 {
		p.run(c, context.Background(), nil)
	}
	if n != 100 {
		t.Fatalf("ran %d requests, want 100", n)
	}
	if got := p.started.Load(); got != 1 {
		t.Fatalf("100 requests in a row started %d workers, want 1", got)
	}
}

// Requests that block (on the store) never wait for each other: as many
// run at once as sockets ask, with no cap to deadlock on, and the workers
// of that burst are reused afterwards.
func TestReqPoolNoCap(t *testing.T) {
	const n = 64
	var entered sync.WaitGroup
	entered.Add(n)
	release := make(chan struct{})
	var burst atomic.Bool
	burst.Store(true)
	p := testPool(t, time.Hour, func() {
		if burst.Load() {
			entered.Done()
			<-release // held until all n run at once
		}
	})
	var done sync.WaitGroup
	for range n {
		done.Go(func() { p.run(&conn{}, context.Background(), nil) })
	}
	entered.Wait() // would hang with fewer than n workers
	burst.Store(false)
	close(release)
	done.Wait()
	if got := p.started.Load(); got != n {
		t.Fatalf("%d concurrent requests started %d workers, want %d", n, got, n)
	}
	for range 10 {
		p.run(&conn{}, context.Background(), nil)
	}
	if got := p.started.Load(); got != n {
		t.Fatalf("after the burst %d workers were started, want %d (the idle ones reused)", got, n)
	}
}

// A worker idle for linger exits; the next request starts a new one.
func TestReqPoolLinger(t *testing.T) {
	p := testPool(t, 5*time.Millisecond, func() {})
	p.run(&conn{}, context.Background(), nil)
	eventually(t, "the idle worker exits", func() bool { return p.live.Load() == 0 })
	p.mu.Lock()
	idle := len(p.idle)
	p.mu.Unlock()
	if idle != 0 {
		t.Fatalf("%d workers still on the idle stack after they exited", idle)
	}
	p.run(&conn{}, context.Background(), nil)
	if got := p.started.Load(); got != 2 {
		t.Fatalf("started %d workers, want 2", got)
	}
}

// close stops idle workers and waits for busy ones, which exit once their
// request is answered; requests after it still run.
func TestReqPoolClose(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var hold atomic.Bool
	p := testPool(t, time.Hour, func() {
		if hold.Load() {
			entered <- struct{}{}
			<-release
		}
	})
	for range 3 { // three idle workers
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { p.run(&conn{}, context.Background(), nil) })
		}
		wg.Wait()
	}
	hold.Store(true)
	busy := make(chan struct{})
	go func() { p.run(&conn{}, context.Background(), nil); close(busy) }()
	<-entered
	closed := make(chan struct{})
	go func() { p.close(); close(closed) }()
	eventually(t, "close stops the idle workers", func() bool { return p.live.Load() == 1 })
	select {
	case <-closed:
		t.Fatal("close returned while a request was running")
	default:
	}
	close(release)
	<-busy
	<-closed
	if got := p.live.Load(); got != 0 {
		t.Fatalf("%d workers live after close", got)
	}
	hold.Store(false)
	p.run(&conn{}, context.Background(), nil) // unpooled now
	if got := p.live.Load(); got != 0 {
		t.Fatalf("a request after close left %d workers", got)
	}
}

// deep uses about n KiB of stack, as a store call through the driver does.
//
//go:noinline
func deep(n int) byte {
	var pad [1024]byte
	pad[n%len(pad)] = byte(n)
	if n <= 1 {
		return pad[0]
	}
	return deep(n-1) + pad[n%len(pad)]
}

// BenchmarkRequestHandoff: one request handed off and waited for, its
// handler using 24 KiB of stack: on a new goroutine each time (the stack
// grows from 8 KiB by copying, every time) and on the pool (grown once).
func BenchmarkRequestHandoff(b *testing.B) {
	b.Run("goroutine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				deep(24)
			}()
			<-done
		}
	})
	b.Run("pool", func(b *testing.B) {
		b.ReportAllocs()
		p := newReqPool(time.Minute)
		p.handle = func(*conn, context.Context, []byte) { deep(24) }
		defer p.close()
		c := &conn{}
		for b.Loop() {
			p.run(c, context.Background(), nil)
		}
	})
}
