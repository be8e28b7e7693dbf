package gateway_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// TestIdleSocketOneGoroutine: a subscribed socket with nothing to write
// costs the gateway one goroutine (its reader): no writer, no net/http
// handler goroutine kept for it. The peers here have no goroutines of
// their own (nobody reads them after sub), so the process's goroutine
// count grows by the gateway's alone. It runs on SQLite only and not in
// parallel: other tests' goroutines would be counted.
func TestIdleSocketOneGoroutine(t *testing.T) {
	{
		s := openSQLite(t)
		srv := newServer(t, s, gateway.Options{MaxUserSockets: 1000})
		user(t, s, "ida")
		group(t, s, "g1", "ida")
		token := login(t, s, "ida", "d1", "i1").Token
		const n = 100
		settle := func() int {
			time.Sleep(300 * time.Millisecond)
			return runtime.NumGoroutine()
		}
		before := settle()
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ws, _, err := websocket.Dial(ctx, srv.url, &websocket.DialOptions{HTTPHeader: bearer(token)})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			t.Cleanup(func() { ws.CloseNow() })
			if err := ws.Write(ctx, websocket.MessageText, []byte(`{"t":"sub","rid":1}`)); err != nil {
				t.Fatal(err)
			}
			_, b, err := ws.Read(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if f, err := wire.DecodeFrame(b); err != nil || f.T != wire.TSubscribed {
				t.Fatalf("socket %d: sub answered %s", i, b)
			}
		}
		after := settle()
		if per := float64(after-before) / n; per > 1.1 {
			t.Fatalf("%d idle sockets added %d goroutines (%.2f each), want one each", n, after-before, per)
		}
	}
}

// TestBurstArrivesInOrder: events committed faster than the socket is
// written go out in batches (several frames in one write), each still its
// own WebSocket message with one JSON frame, in seq order, none lost.
func TestBurstArrivesInOrder(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "bo")
		user(t, s, "bea")
		group(t, s, "g1", "bo", "bea")
		bea := dial(t, srv.url, login(t, s, "bea", "d1", "i1").Token)
		if f := bea.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
			t.Fatalf("sub: %+v", f)
		}
		c, err := s.Conversation(context.Background(), "g1")
		if err != nil {
			t.Fatal(err)
		}
		const n = 300
		ctx := context.Background()
		for i := range n {
			sent, err := s.Send(ctx, parley.Principal{User: "bo", DeviceID: "d1"}, parley.SendRequest{Conv: "g1", CMID: fmt.Sprint("b", i), Body: fmt.Sprint("burst ", i)})
			if err != nil {
				t.Fatal(err)
			}
			srv.hub.Notify([]parley.Notice{{Conv: "g1", Seq: sent.Seq}})
		}
		for i := range n {
			f := bea.push(wire.TEvent)
			if want := c.Head + 1 + int64(i); f.Ev == nil || f.Ev.Seq != want || f.Ev.Body != fmt.Sprint("burst ", i) {
				t.Fatalf("push %d = %+v, want seq %d", i, f.Ev, want)
			}
		}
	})
}
