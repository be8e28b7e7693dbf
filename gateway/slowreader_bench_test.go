package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/sqlite"
)

// BenchmarkSlowReaderMemory measures what one socket that sends sync
// frames and never reads costs the server: three such sockets each send
// 300 syncs of a full page of 4,000-character messages (about 850 KB a
// reply) over ordinary loopback sockets, and the heap is read (after GC)
// once it stops growing. It uses only the API the gateway had before its
// byte budget, so the same file measures both (docs/benchmarks.md):
//
//	go test -run '^$' -bench SlowReaderMemory -benchtime 1x ./gateway/
func BenchmarkSlowReaderMemory(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hub := gateway.New(gateway.Options{
		Store: s, Bus: inmem.NewBus(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		WriteTimeout: 5 * time.Minute, PingEvery: 5 * time.Minute, // the stalled sockets stay while measured
	})
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go hub.Run(hctx)
	srv := httptest.NewServer(hub)
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")

	for _, u := range []string{"ana", "ben"} {
		if _, err := s.CreateUser(ctx, parley.NewUser{ID: u, Password: "password-" + u}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.CreateConversation(ctx, parley.Principal{User: "ana"}, parley.NewConversation{ID: "g1", Kind: parley.KindGroup, Title: "g1", Members: []string{"ana", "ben"}}); err != nil {
		b.Fatal(err)
	}
	body := strings.Repeat("x", parley.MaxBodyChars)
	for i := range parley.MaxPage {
		if _, err := s.Send(ctx, parley.Principal{User: "ana", DeviceID: "d1"}, parley.SendRequest{Conv: "g1", CMID: fmt.Sprint("m", i), Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}

	const sockets, frames = 3, 300
	for b.Loop() {
		before := heap()
		var conns []*websocket.Conn
		for i := range sockets {
			sess, err := s.Login(ctx, parley.LoginRequest{Login: "ben", Password: "password-ben", DeviceID: fmt.Sprint("slow", i), InstallID: "i1"})
			if err != nil {
				b.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ws, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {"Bearer " + sess.Token}}})
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, ws)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				for range frames {
					if ws.Write(wctx, websocket.MessageText, []byte(`{"t":"sync","conv":"g1","after":0,"limit":200}`)) != nil {
						return
					}
				}
			}()
		}
		// Wait until the heap stops growing (the server has read what it
		// will read), then measure.
		last := heap()
		for range 120 {
			time.Sleep(500 * time.Millisecond)
			now := heap()
			if now < last+(1<<20) && now+(1<<20) > last {
				break
			}
			last = now
		}
		grown := float64(heap()) - float64(before)
		b.ReportMetric(grown/sockets/(1<<20), "MiB/socket")
		for _, ws := range conns {
			ws.CloseNow()
		}
	}
}
