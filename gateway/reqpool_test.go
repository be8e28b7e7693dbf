package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// TestNoRequestWorkerAfterShutdown: the goroutines that answered requests
// are all gone once the hub has drained, shut down and stopped running,
// with no wait for their idle time to pass.
func TestNoRequestWorkerAfterShutdown(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	hub := gateway.New(gateway.Options{Store: s, Bus: inmem.NewBus(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	srv := httptest.NewServer(hub)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done })
	user(t, s, "wo")
	group(t, s, "g1", "wo")
	c := dial(t, "ws"+strings.TrimPrefix(srv.URL, "http"), login(t, s, "wo", "d1", "i1").Token)
	if f := c.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
		t.Fatalf("sub: %+v", f)
	}
	if f := c.do(map[string]any{"t": "send", "conv": "g1", "cmid": "k1", "body": "hello"}); f.T != wire.TSent {
		t.Fatalf("send: %+v", f)
	}
	if n := gateway.RequestWorkers(hub); n < 1 {
		t.Fatalf("%d request workers after two requests, want the one that answered them kept", n)
	}
	hub.Drain()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := hub.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if n := gateway.RequestWorkers(hub); n != 0 {
		t.Fatalf("%d request workers left after shutdown", n)
	}
}
