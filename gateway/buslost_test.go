package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// frames reads every frame c gets within d of quiet.
func (c *client) drain(d time.Duration) []wire.Frame {
	c.t.Helper()
	got := append([]wire.Frame(nil), c.pending...)
	c.pending = nil
	for {
		f, err := c.read(d)
		if err != nil {
			return got
		}
		got = append(got, f)
	}
}

// TestBusLossRecovers: after a bus loss the gateway polls the store instead
// of resyncing every socket. A conversation that advanced while notices
// were lost is pushed (the missed events, in order, through the usual
// fan-out); one that did not change sends nothing; a join whose notice was
// lost is re-learned, so the new member gets the conversation from their
// join on. No socket gets resync.
func TestBusLossRecovers(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		// The backstop is far away: only the recovery can push here.
		srv := newServer(t, s, gateway.Options{Backstop: time.Hour})
		for _, u := range []string{"ana", "ben", "dan"} {
			user(t, s, u)
		}
		group(t, s, "g1", "ana", "ben")
		group(t, s, "g2", "ana", "ben")
		group(t, s, "g3", "ana")
		ben := dial(t, srv.url, login(t, s, "ben", "d1", "i1").Token)
		dan := dial(t, srv.url, login(t, s, "dan", "d1", "i1").Token)
		for _, c := range []*client{ben, dan} {
			if f := c.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
				t.Fatalf("sub: %+v", f)
			}
		}

		// Committed while the bus was losing notices: no notice at all.
		ctx := context.Background()
		ana := parley.Principal{User: "ana", DeviceID: "d1"}
		for i := range 3 {
			if _, err := s.Send(ctx, ana, parley.SendRequest{Conv: "g1", CMID: fmt.Sprint("g1-", i), Body: fmt.Sprint("missed ", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Send(ctx, ana, parley.SendRequest{Conv: "g3", CMID: "before-dan", Body: "before dan"}); err != nil {
			t.Fatal(err)
		}
		join, err := s.AddMember(ctx, ana, "g3", "dan")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Send(ctx, ana, parley.SendRequest{Conv: "g3", CMID: "hi-dan", Body: "hi dan"}); err != nil {
			t.Fatal(err)
		}

		srv.hub.Lost() // as the bus handler calls it

		for want := int64(3); want <= 5; want++ {
			f := ben.next()
			if f.T != wire.TEvent || f.Ev.Conv != "g1" || f.Ev.Seq != want {
				t.Fatalf("ben got %s %+v, want g1 event %d", f.T, f.Ev, want)
			}
		}
		if f := dan.next(); f.T != wire.TEvent || f.Ev.Seq != join.Seq || f.Ev.Kind != "member_joined" || f.Ev.User != "dan" {
			t.Fatalf("dan got %s %+v, want his join at %d", f.T, f.Ev, join.Seq)
		}
		if f := dan.next(); f.T != wire.TEvent || f.Ev.Body != "hi dan" {
			t.Fatalf("dan got %s %+v, want the message after his join", f.T, f.Ev)
		}
		// Nothing else: no resync, nothing of g2 (unchanged), nothing of g3
		// before dan's join.
		for _, c := range []*client{ben, dan} {
			if fs := c.drain(300 * time.Millisecond); len(fs) > 0 {
				t.Fatalf("unexpected frames after the recovery: %+v", fs)
			}
		}
		if n := srv.hub.Stats().Resyncs.Load(); n != 0 {
			t.Fatalf("%d resync frames sent, want none", n)
		}
		if srv.hub.Stats().Recovered.Load() != 1 {
			t.Fatalf("recovered %d losses, want 1", srv.hub.Stats().Recovered.Load())
		}

		// The re-learned conversation is watched now: later notices reach dan.
		sent := send(dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token), "g3", "later", "later")
		if f := dan.push(wire.TEvent); f.Ev.Seq != *sent.Seq {
			t.Fatalf("dan push = %+v", f.Ev)
		}
	})
}

// TestBusLossPollFails: when the store cannot be polled after a bus loss,
// every subscribed socket gets resync, each after its own delay drawn from
// Jitter within ResyncWindow, not all at once: the socket whose delay is
// near the end of a one-hour window gets nothing yet while the others have
// theirs. Unsubscribed sockets get nothing.
func TestBusLossPollFails(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		const window = time.Hour
		var mu sync.Mutex
		var windows []time.Duration
		jitter := func(w time.Duration) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			windows = append(windows, w)
			if len(windows) == 4 {
				return w - time.Millisecond // the last socket waits
			}
			return time.Duration(len(windows)) * time.Millisecond
		}
		srv := newServer(t, s, gateway.Options{Backstop: time.Hour, ResyncWindow: window, Jitter: jitter})
		user(t, s, "ana")
		user(t, s, "ben")
		group(t, s, "g1", "ana", "ben")
		var subbed []*client
		for _, who := range []struct{ user, device string }{{"ana", "d1"}, {"ana", "d2"}, {"ben", "d1"}, {"ben", "d2"}} {
			c := dial(t, srv.url, login(t, s, who.user, who.device, "i1").Token)
			if f := c.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
				t.Fatalf("sub: %+v", f)
			}
			subbed = append(subbed, c)
		}
		idle := dial(t, srv.url, login(t, s, "ben", "d3", "i1").Token)

		s.Close() // the store is gone: the poll fails
		srv.hub.Lost()

		deadline := time.Now().Add(15 * time.Second)
		for srv.hub.Stats().Resyncs.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		got, waiting := 0, 0
		for i, c := range subbed {
			fs := c.drain(300 * time.Millisecond)
			switch {
			case len(fs) == 1 && fs[0].T == wire.TResync:
				got++
			case len(fs) == 0:
				waiting++
			default:
				t.Fatalf("socket %d got %+v, want one resync or nothing yet", i, fs)
			}
		}
		if got != 3 || waiting != 1 {
			t.Fatalf("%d sockets resynced and %d waiting, want 3 and the one whose delay is near the end of the window", got, waiting)
		}
		idle.quiet(100 * time.Millisecond)
		if n := srv.hub.Stats().Resyncs.Load(); n != 3 {
			t.Fatalf("%d resyncs, want 3 so far", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(windows) != 4 || slices.ContainsFunc(windows, func(w time.Duration) bool { return w != window }) {
			t.Fatalf("Jitter asked with windows %v, want %v once per subscribed socket", windows, window)
		}
	})
}
