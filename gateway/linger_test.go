package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
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
