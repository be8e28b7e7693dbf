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
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/storetest"
)

// benchBackend is the backend of the benchmarks, or a skip without a server.
func benchBackend(b *testing.B) backend {
	pgtest.Server(b)
	return backend{}
}

func BenchmarkSend(b *testing.B) { storetest.BenchSend(b, benchBackend(b)) }
func BenchmarkSendHotConversation(b *testing.B) {
	storetest.BenchSendHotConversation(b, benchBackend(b))
}
func BenchmarkSync(b *testing.B)  { storetest.BenchSync(b, benchBackend(b)) }
func BenchmarkConvs(b *testing.B) { storetest.BenchConvs(b, benchBackend(b)) }

// BenchmarkSendVsPgbench runs, on one fresh database, Store.Send from
// storetest.Senders goroutines (PARLEY_BENCH_CLIENTS overrides) and pgbench
// with as many clients running
// bench/send.sql (the same statements in the same pipelines), each for
// PARLEY_BENCH_SECONDS (default 10) in all, interleaved A B B A, and
// reports both rates and their ratio: what the Go layer costs over the
// bare transaction. Run it once:
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
		// A B B A: each side runs twice for half the time, so the table
		// growing and checkpoints during the run fall on both alike.
		half := time.Duration(secs) * time.Second / 2
		var goSends, goTime, pgTx, pgTime float64
		for i, side := range []string{"go", "pgbench", "pgbench", "go"} {
			var n float64
			var took time.Duration
			if side == "go" {
				n, took = storeSends(b, h, ana, half, i)
				goSends, goTime = goSends+n, goTime+took.Seconds()
			} else {
				n, took = pgbenchRun(b, pgbench, h.dsn, half)
				pgTx, pgTime = pgTx+n, pgTime+took.Seconds()
			}
		}
		goRate, pgRate := goSends/goTime, pgTx/pgTime
		b.ReportMetric(goRate, "store-sends/s")
		b.ReportMetric(pgRate, "pgbench-tps")
		b.ReportMetric(goRate/pgRate, "ratio")
	}
}

// benchClients is the number of concurrent senders on each side.
func benchClients() int {
	if n, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_CLIENTS")); err == nil && n > 0 {
		return n
	}
	return storetest.Senders
}

// storeSends runs Store.Send from benchClients goroutines for d, goroutine
// g on the conversations congruent to g (so senders do not meet on a row,
// as pgbench's random picks rarely do), and returns the sends and the time
// they took.
func storeSends(b *testing.B, h *handle, ana parley.Principal, d time.Duration, round int) (float64, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	clients := benchClients()
	for g := range clients {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				_, err := h.store.Send(ctx, ana, parley.SendRequest{
					Conv: storetest.BenchConv((g + i*clients) % 64), CMID: fmt.Sprintf("go-%d-%d-%d", round, g, i),
					Body: "a benchmark message of ordinary length",
				})
				if err == nil {
					sent.Add(1)
				} else if ctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(sent.Load()), time.Since(start)
}

// pgbenchRun runs bench/send.sql with benchClients clients for d and
// returns the transactions and the time pgbench measured them over.
func pgbenchRun(b *testing.B, pgbench, dsn string, d time.Duration) (float64, time.Duration) {
	cmd := exec.Command(pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(benchClients()), "-j", strconv.Itoa(min(2, benchClients())),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", "../bench/send.sql", pgtest.Libpq(dsn))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		b.Fatalf("pgbench: %v\n%s", err, out.String())
	}
	tx := regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`).FindStringSubmatch(out.String())
	tps := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindStringSubmatch(out.String())
	if tx == nil || tps == nil {
		b.Fatalf("pgbench printed no figures:\n%s", out.String())
	}
	n, _ := strconv.ParseFloat(tx[1], 64)
	rate, _ := strconv.ParseFloat(tps[1], 64)
	return n, time.Duration(n / rate * float64(time.Second))
}
