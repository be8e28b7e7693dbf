package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/storetest"
)

// benchBackend is the backend of the benchmarks, or a skip without a server.
func benchBackend(b *testing.B) *backend {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		b.Skip("PostgreSQL benchmarks need a server: set " + dsnEnv)
	}
	benchOnce.Do(func() { benchBE = &backend{dsn: dsn} })
	return benchBE
}

var (
	benchOnce sync.Once
	benchBE   *backend
)

func BenchmarkSend(b *testing.B) { storetest.BenchSend(b, benchBackend(b)) }
func BenchmarkSendHotConversation(b *testing.B) {
	storetest.BenchSendHotConversation(b, benchBackend(b))
}
func BenchmarkSync(b *testing.B)  { storetest.BenchSync(b, benchBackend(b)) }
func BenchmarkConvs(b *testing.B) { storetest.BenchConvs(b, benchBackend(b)) }

// BenchmarkSendVsPgbench runs, in one go on one fresh database, Store.Send
// from storetest.Senders goroutines for PARLEY_BENCH_SECONDS (default 10)
// and then pgbench with as many clients running bench/send.sql — the same
// statements — for as long, and reports both rates and their ratio: what
// the Go layer costs over the bare transaction. Run it once:
//
//	go test ./postgres -run '^$' -bench SendVsPgbench -benchtime 1x
func BenchmarkSendVsPgbench(b *testing.B) {
	be := benchBackend(b)
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		b.Skip("pgbench is not installed")
	}
	secs := 10
	if s, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_SECONDS")); err == nil && s > 0 {
		secs = s
	}
	for b.Loop() {
		db := be.New(b, parley.Options{})
		ana, _ := storetest.SeedSenders(b, db.Store(), 64)
		h := db.(*handle)

		// Store.Send, Senders goroutines, fixed duration.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
		var sent atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for g := range storetest.Senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					_, err := h.store.Send(ctx, ana, parley.SendRequest{
						Conv: storetest.BenchConv((g + i*storetest.Senders) % 64), CMID: fmt.Sprintf("go-%d-%d", g, i),
						Body: "a benchmark message of ordinary length",
					})
					if err == nil {
						sent.Add(1)
					} else if ctx.Err() == nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		cancel()
		goRate := float64(sent.Load()) / time.Since(start).Seconds()

		// pgbench, same clients, same statements, same duration.
		cmd := exec.Command(pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(storetest.Senders), "-j", "2",
			"-T", strconv.Itoa(secs), "-f", "../bench/send.sql", h.dsn)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("pgbench: %v\n%s", err, out.String())
		}
		m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindStringSubmatch(out.String())
		if m == nil {
			b.Fatalf("pgbench printed no tps:\n%s", out.String())
		}
		pgRate, _ := strconv.ParseFloat(m[1], 64)
		b.ReportMetric(goRate, "store-sends/s")
		b.ReportMetric(pgRate, "pgbench-tps")
		b.ReportMetric(goRate/pgRate, "ratio")
	}
}
