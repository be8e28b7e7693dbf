package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/sqlite"
)

// TestHello runs the README's steps against a real server on 127.0.0.1:
// ana listens, ben sends, ana prints ben's message.
func TestHello(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	for _, u := range []string{"ana", "ben"} {
		if _, err := store.CreateUser(ctx, parley.NewUser{ID: u, Password: "parley-demo"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.CreateConversation(ctx, parley.Principal{User: "ana"}, parley.NewConversation{ID: "c-team", Kind: parley.KindGroup, Title: "C team", Members: []string{"ana", "ben"}}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hub := gateway.New(gateway.Options{Store: store, Bus: inmem.NewBus(), Log: log})
	hctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { hub.Run(hctx) })
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Deps{
		App:   app.New(app.Options{Store: store, Publish: hub.Publish, Revoke: hub, Log: log}),
		Store: store, Gateway: hub, Log: log, Draining: hub.Draining,
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); stop(); wg.Wait() })

	dir := t.TempDir()
	var anaOut syncBuffer
	listening := make(chan error, 1)
	go func() {
		listening <- run(ctx, []string{"-server", srv.URL, "-login", "ana", "-body", "", "-wait", "4s", "-dir", dir}, &anaOut)
	}()
	time.Sleep(500 * time.Millisecond) // let ana connect and subscribe
	var benOut bytes.Buffer
	if err := run(ctx, []string{"-server", srv.URL, "-login", "ben", "-body", "hi ana", "-wait", "10ms", "-dir", dir}, &benOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(benOut.String(), "sent c-team #3 (dup=false)") {
		t.Fatalf("ben printed %q", benOut.String())
	}
	if err := <-listening; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(anaOut.String(), "c-team #3 ben: hi ana") {
		t.Fatalf("ana printed %q, want ben's message", anaOut.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
