package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
)

// BenchmarkSend compares, in one run and on one store, 64 concurrent
// senders calling Store.Send directly with the same senders posting through
// the whole HTTP API (chain with a send limit it never reaches, metrics,
// publish to the gateway), over 64 conversations. The difference is what
// the HTTP layer costs a send.
func BenchmarkSend(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			var store parley.Store
			var err error
			if kind == "sqlite" {
				store, err = sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "p.db"), parley.Options{})
			} else {
				store, err = postgres.Open(context.Background(), pgtest.WithPoolSize(pgtest.DSN(b), 16), parley.Options{})
			}
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { store.Close() })
			s := start(b, store, serverOptions{config: "rate_limits:\n  send: {limit: 1000000, window: 1m}\n"})
			token := s.user("ana", parley.RoleUser)
			ana, err := store.Authenticate(context.Background(), token)
			if err != nil {
				b.Fatal(err)
			}
			const convs = 64
			for i := range convs {
				s.do("POST", "/api/convs", token, map[string]any{"id": fmt.Sprintf("c%d", i)}).want(201)
			}
			var n atomic.Int64
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.Run("store", func(b *testing.B) {
				b.SetParallelism(32) // 64 goroutines on 2 cores
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						_, err := store.Send(context.Background(), ana, parley.SendRequest{Conv: fmt.Sprintf("c%d", i%convs), CMID: fmt.Sprintf("s%d", i), Body: "hello"})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
			})
			b.Run("http", func(b *testing.B) {
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						req, _ := http.NewRequest("POST", fmt.Sprintf("%s/api/convs/c%d/messages", s.URL, i%convs), strings.NewReader(`{"body":"hello"}`))
						req.Header.Set("Authorization", "Bearer "+token)
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Idempotency-Key", fmt.Sprintf("h%d", i))
						resp, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						resp.Body.Close()
						if resp.StatusCode != http.StatusCreated {
							b.Errorf("status %d", resp.StatusCode)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
			})
		})
	}
}
