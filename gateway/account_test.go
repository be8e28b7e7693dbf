package gateway_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// TestAccountNoticeUsesUserIndex: the hub finds a user's sockets through a
// per-user index, not by scanning every socket. Sockets of several users
// open and close concurrently while account notices arrive (run with
// -race); the index then holds exactly the open sockets, and an account
// notice after a disable ends exactly the disabled user's sockets.
func TestAccountNoticeUsesUserIndex(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{Reauth: time.Hour})
		users := []string{"ana", "ben", "cy"}
		tokens := map[string][]string{}
		for _, u := range users {
			user(t, s, u)
			for d := range 2 {
				tokens[u] = append(tokens[u], login(t, s, u, fmt.Sprint("d", d), "i1").Token)
			}
		}

		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for g := range 6 {
			wg.Go(func() {
				u := users[g%len(users)]
				for i := range 8 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					ws, _, err := websocket.Dial(ctx, srv.url, &websocket.DialOptions{HTTPHeader: bearer(tokens[u][i%2])})
					cancel()
					if err != nil {
						errs <- fmt.Errorf("%s: dial: %v", u, err)
						return
					}
					ws.CloseNow()
				}
			})
		}
		wg.Go(func() {
			for i := range 50 {
				srv.hub.Notify([]parley.Notice{parley.AccountNotice(users[i%len(users)])})
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		waitFor(t, "every socket gone", func() bool { return srv.hub.Stats().Conns.Load() == 0 })
		if !gateway.IndexConsistent(srv.hub) {
			t.Fatal("the per-user index does not match the open sockets")
		}

		// Two sockets each for ana and ben; ana is disabled.
		var anas, bens []*client
		for d := range 2 {
			anas = append(anas, dial(t, srv.url, tokens["ana"][d]))
			bens = append(bens, dial(t, srv.url, tokens["ben"][d]))
		}
		waitFor(t, "four sockets", func() bool { return srv.hub.Stats().Conns.Load() == 4 })
		if got := gateway.SocketsOf(srv.hub, "ana"); got != 2 {
			t.Fatalf("index: %d sockets of ana, want 2", got)
		}
		if err := s.SetUserDisabled(context.Background(), "ana", true); err != nil {
			t.Fatal(err)
		}
		srv.hub.Notify([]parley.Notice{parley.AccountNotice("ana")})
		for _, c := range anas {
			if f := c.push(wire.TError); f.Code != parley.CodeUnauthenticated {
				t.Errorf("disabled ana's socket got %+v", f)
			}
		}
		for _, c := range bens {
			if f := c.do(map[string]any{"t": "convs"}); f.T != wire.TConvsReply {
				t.Errorf("ben's socket after ana's notice: %+v", f)
			}
		}
		waitFor(t, "ana's sockets gone", func() bool { return gateway.SocketsOf(srv.hub, "ana") == 0 })
		if !gateway.IndexConsistent(srv.hub) {
			t.Error("the per-user index does not match the open sockets")
		}
	})
}
