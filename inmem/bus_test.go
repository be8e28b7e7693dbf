package inmem_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/bustest"
	"github.com/parleychat/parley/inmem"
)

type backend struct{}

func (backend) New(t testing.TB) (a, b parley.Bus) {
	bus := inmem.NewBus()
	return bus, bus
}

func (backend) SingleNode() bool { return true }
func (backend) Selective() bool  { return false }
func (backend) MaxCarried() int  { return bustest.NoBound }

func TestBusContract(t *testing.T) { bustest.Run(t, backend{}) }

// handler records what it hears and signals every call.
type handler struct {
	mu   sync.Mutex
	ns   []parley.Notice
	lost int
	call chan struct{}
}

func (h *handler) Notify(ns []parley.Notice) {
	h.mu.Lock()
	h.ns = append(h.ns, ns...)
	h.mu.Unlock()
	h.call <- struct{}{}
}

func (h *handler) Lost() {
	h.mu.Lock()
	h.lost++
	h.mu.Unlock()
	h.call <- struct{}{}
}

// A publish that overflows the buffer drops what is buffered and makes the
// handler's next call Lost, once; notices published after it still arrive.
func TestBusOverflow(t *testing.T) {
	bus := inmem.NewBus()
	for i := range inmem.DefaultMaxBuffered {
		bus.Publish(parley.Notice{Conv: "c", Seq: int64(i + 1)})
	}
	bus.Publish(parley.Notice{Conv: "c", Seq: -1}, parley.Notice{Conv: "c", Seq: -2}) // over the bound
	after := parley.Notice{Conv: "c", Seq: 1 << 40}
	bus.Publish(after)

	h := &handler{call: make(chan struct{}, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bus.Run(ctx, h) }()
	for range 2 { // Lost, then Notify
		select {
		case <-h.call:
		case <-time.After(5 * time.Second):
			t.Fatal("handler not called within 5s")
		}
	}
	cancel()
	<-done

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != 1 {
		t.Errorf("Lost called %d times, want 1", h.lost)
	}
	if len(h.ns) != 1 || h.ns[0] != after {
		t.Errorf("delivered %d notices (first %v), want only %+v", len(h.ns), h.ns[:min(len(h.ns), 1)], after)
	}
}

func TestBusRunTwice(t *testing.T) {
	bus := inmem.NewBus()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	h := &handler{call: make(chan struct{}, 16)}
	go func() { done <- bus.Run(ctx, h) }()
	bus.Publish(parley.Notice{Conv: "c", Seq: 1})
	<-h.call // the first Run is running
	if err := bus.Run(ctx, h); err == nil || err == context.Canceled {
		t.Errorf("second concurrent Run returned %v, want an error", err)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}
