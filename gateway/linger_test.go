package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/wire"
)

// heldSends is a real store whose sends with CMID "held" wait, before the
// store sees them, until release is closed: a send still being committed
// through the gateway.
type heldSends struct {
	parley.Store
	entered chan struct{}
	release chan struct{}
}

func (s heldSends) Send(ctx context.Context, p parley.Principal, r parley.SendRequest) (parley.Sent, error) {
	if r.CMID == "held" {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.Send(ctx, p, r)
}

// TestLinger: a push waits for a send to the same conversation that is
// being committed through the gateway, at most Linger, and leaves with
// its event; with Linger negative it does not wait.
func TestLinger(t *testing.T) {
	tests := []struct {
		name   string
		linger time.Duration
		waits  bool // the first event is pushed only with the held one
	}{
		{"waits for the send", time.Minute, true},
		{"never", -1, false},
		{"bounded", 50 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stores(t, func(t *testing.T, s parley.Store) {
				hs := heldSends{Store: s, entered: make(chan struct{}, 1), release: make(chan struct{})}
				released := false
				release := func() {
					if !released {
						released = true
						close(hs.release)
					}
				}
				srv := newServer(t, hs, gateway.Options{Backstop: time.Hour, Linger: tt.linger})
				t.Cleanup(release) // before the server's clean-up, which waits for the held send
				ben := twoInG1(t, srv)
				ana1 := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
				ana2 := dial(t, srv.url, login(t, s, "ana", "d2", "i1").Token)

				ana1.raw(1, []byte(`{"t":"send","rid":"h","conv":"g1","cmid":"held","body":"second"}`))
				<-hs.entered // the held send is in flight
				first := send(ana2, "g1", "free", "first")
				if tt.waits {
					ben.quiet(300 * time.Millisecond)
				} else {
					if f := ben.push(wire.TEvent); f.Ev == nil || f.Ev.Seq != *first.Seq || f.Ev.Body != "first" {
						t.Fatalf("push %+v, want the first event (seq %d)", f.Ev, *first.Seq)
					}
				}
				release()
				if f := ana1.next(); f.T != wire.TSent {
					t.Fatalf("held send: %s %s %s", f.T, f.Code, f.Msg)
				}
				if tt.waits {
					if f := ben.push(wire.TEvent); f.Ev == nil || f.Ev.Seq != *first.Seq || f.Ev.Body != "first" {
						t.Fatalf("push %+v, want the first event (seq %d)", f.Ev, *first.Seq)
					}
				}
				if f := ben.push(wire.TEvent); f.Ev == nil || f.Ev.Seq != *first.Seq+1 || f.Ev.Body != "second" {
					t.Fatalf("push %+v, want the held event (seq %d)", f.Ev, *first.Seq+1)
				}
				ben.quiet(100 * time.Millisecond)
				if got := srv.hub.Stats().Lingered.Load(); (got > 0) != (tt.linger > 0) {
					t.Errorf("%d waves lingered, want some only with a linger", got)
				}
			})
		})
	}
}

// TestBusLinger: a gateway that commits none of the sends it pushes hears
// them from the bus one by one. While they come less than Linger apart it
// holds each wave for the next, so a stream leaves in a few writes to
// each socket, not one per event; with Linger negative it never holds.
// Every event is pushed, in order, either way.
func TestBusLinger(t *testing.T) {
	tests := []struct {
		name     string
		linger   time.Duration
		maxWaves int64 // waves the stream may take (0: any)
	}{
		{"holds", 500 * time.Millisecond, 10},
		{"never", -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stores(t, func(t *testing.T, s parley.Store) {
				bus := inmem.NewBus()
				srv := newServer(t, s, gateway.Options{Bus: bus, Backstop: time.Hour, Linger: tt.linger})
				ben := twoInG1(t, srv)
				const n = 20
				// Another gateway commits the sends and publishes each: a
				// stream a few milliseconds apart, each notice carrying its
				// event, as a sender's gateway publishes it.
				publish := func(i int) parley.Notice {
					p := parley.Principal{User: "ana", DeviceID: "d1"}
					req := parley.SendRequest{Conv: "g1", CMID: fmt.Sprint("c", i), Body: fmt.Sprint("m", i)}
					sent, err := s.Send(context.Background(), p, req)
					if err != nil {
						t.Fatal(err)
					}
					nt := parley.SentNotice(p, req, sent)
					bus.Publish(nt)
					return nt
				}
				// The first teaches the fan-out the conversation (a store
				// read); the stream after it is pushed from the notices.
				first := publish(0)
				if f := ben.push(wire.TEvent); f.Ev == nil || f.Ev.Seq != first.Seq {
					t.Fatalf("first push: %+v, want seq %d", f.Ev, first.Seq)
				}
				time.Sleep(50 * time.Millisecond)
				waves, lingered0 := srv.hub.Stats().Waves.Load(), srv.hub.Stats().Lingered.Load()
				var ns []parley.Notice
				for i := range n {
					ns = append(ns, publish(i+1))
					time.Sleep(time.Millisecond)
				}
				for i, nt := range ns {
					if f := ben.push(wire.TEvent); f.Ev == nil || f.Ev.Seq != nt.Seq {
						t.Fatalf("push %d: %+v, want seq %d", i, f.Ev, nt.Seq)
					}
				}
				got, lingered := srv.hub.Stats().Waves.Load()-waves, srv.hub.Stats().Lingered.Load()-lingered0
				t.Logf("%d events in %d waves, %d lingered", n, got, lingered)
				if tt.maxWaves > 0 && (got > tt.maxWaves || lingered == 0) {
					t.Errorf("%d events from the bus left in %d waves (%d lingered), want at most %d", n, got, lingered, tt.maxWaves)
				}
				if tt.linger < 0 && lingered != 0 {
					t.Errorf("%d waves lingered with Linger negative", lingered)
				}
			})
		})
	}
}
