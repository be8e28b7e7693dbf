package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
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
func BenchmarkFeed(b *testing.B)  { storetest.BenchFeed(b, benchBackend(b)) }

// BenchmarkSendVsPgbench runs, on one fresh database, Store.Send from
// storetest.Senders goroutines (PARLEY_BENCH_CLIENTS overrides), each on
// conversations of its own, and pgbench with as many clients running
// bench/send.sql (the send transaction written by hand: lock, key lookup,
// append, commit, in two pipelines), each for PARLEY_BENCH_SECONDS
// (default 10) in all, interleaved A B B A, and reports both rates and
// their ratio: what the Go layer costs over the bare transaction. Run it
// once:
//
//	go test ./postgres -run '^$' -bench SendVsPgbench -benchtime 1x
func BenchmarkSendVsPgbench(b *testing.B) { sendVsPgbench(b, false) }

// BenchmarkSendHotVsPgbench is BenchmarkSendVsPgbench with every sender on
// one conversation, against bench/send_hot.sql (every pgbench client on
// that conversation's row): what group commit wins over one commit per
// send.
func BenchmarkSendHotVsPgbench(b *testing.B) { sendVsPgbench(b, true) }

func sendVsPgbench(b *testing.B, hot bool) {
	be := benchBackend(b)
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		b.Skip("pgbench is not installed")
	}
	secs := 10
	if s, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_SECONDS")); err == nil && s > 0 {
		secs = s
	}
	script := "../bench/send.sql"
	if hot {
		script = "../bench/send_hot.sql"
	}
	for b.Loop() {
		db := be.New(b, parley.Options{})
		ana, _ := storetest.SeedSenders(b, db.Store(), 64)
		h := db.(*handle)
		// A B B A: each side runs twice for half the time, so the table
		// growing and checkpoints during the run fall on both alike.
		half := time.Duration(secs) * time.Second / 2
		var goSends, goTime, pgTx, pgTime float64
		var lats []time.Duration
		for i, side := range []string{"go", "pgbench", "pgbench", "go"} {
			var n float64
			var took time.Duration
			if side == "go" {
				var l []time.Duration
				n, took, l = storeSends(b, h, ana, half, i, hot)
				goSends, goTime, lats = goSends+n, goTime+took.Seconds(), append(lats, l...)
			} else {
				n, took = pgbenchRun(b, pgbench, h.dsn, script, half)
				pgTx, pgTime = pgTx+n, pgTime+took.Seconds()
			}
		}
		goRate, pgRate := goSends/goTime, pgTx/pgTime
		b.ReportMetric(goRate, "store-sends/s")
		b.ReportMetric(pgRate, "pgbench-tps")
		b.ReportMetric(goRate/pgRate, "ratio")
		if len(lats) > 0 {
			slices.Sort(lats)
			b.ReportMetric(float64(lats[len(lats)*99/100])/float64(time.Millisecond), "p99-ms")
		}
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
// as pgbench's random picks rarely do) or, hot, all on bench-0, and
// returns the sends, the time they took and each send's latency.
//
// The store is opened for the round with a pool of benchClients
// connections (the suite's DSN has pgtest.PoolSize, 4, which would queue
// 16 senders on 4 connections) and closed after it, so its idle
// connections do not count against pgbench's.
func storeSends(b *testing.B, h *handle, ana parley.Principal, d time.Duration, round int, hot bool) (float64, time.Duration, []time.Duration) {
	st, err := postgres.Open(context.Background(), pgtest.WithPoolSize(h.dsn, benchClients()), parley.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	clients := benchClients()
	lats := make([][]time.Duration, clients)
	for g := range clients {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				conv := storetest.BenchConv((g + i*clients) % 64)
				if hot {
					conv = storetest.BenchConv(0)
				}
				t0 := time.Now()
				_, err := st.Send(ctx, ana, parley.SendRequest{
					Conv: conv, CMID: fmt.Sprintf("go-%d-%d-%d", round, g, i),
					Body: "a benchmark message of ordinary length",
				})
				if err == nil {
					sent.Add(1)
					lats[g] = append(lats[g], time.Since(t0))
				} else if ctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	return float64(sent.Load()), time.Since(start), all
}

// pgbenchRun runs script with benchClients clients for d and returns the
// transactions and the time pgbench measured them over.
func pgbenchRun(b *testing.B, pgbench, dsn, script string, d time.Duration) (float64, time.Duration) {
	cmd := exec.Command(pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(benchClients()), "-j", strconv.Itoa(min(2, benchClients())),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", script, pgtest.Libpq(dsn))
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
