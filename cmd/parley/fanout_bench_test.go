package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/cpucap"
	"github.com/parleychat/parley/postgres/pgtest"
)

// BenchmarkFanoutPipelined measures what the members of a 1,000-member
// group feel while one publisher sends as fast as the fan-out takes it:
// one group of 1,000 members, one subscribed socket each, and one more
// socket (of the first member, not subscribed) whose sends are pipelined
// (it keeps PARLEY_BENCH_WINDOW sends, default 8, not yet delivered to
// every member in flight, without waiting for replies one by one), for
// PARLEY_BENCH_SENDS sends (default 1000); run it with -benchtime 1x (the
// set-up is far too slow to repeat, and ns/op means nothing). It reports deliveries/s, the publish→receive
// latency of every delivery (p50, p99: from just before the send frame is
// written to when the member's reader has the event), and the server
// process's CPU (utime + stime from /proc/PID/stat, over the timed part)
// per delivery, and the deliveries per write system call the server made
// (syscw of /proc/PID/io: every write, the socket writes nearly all).
//
// PARLEY_BENCH_STATE=DIR keeps the set-up for the next run: the SQLite
// database under DIR, the PostgreSQL one as database parley_fanout_bench,
// the members' tokens in DIR/BACKEND.tokens; a later run with the same DIR
// reuses them.
//
// PARLEY_BENCH_AB="before=/tmp/before.test,after=/tmp/after.test,…" runs
// one round per entry on the same database (the users' set-up, argon2id
// hashing, is the slow part and is done once), each round's server being
// that test binary of this package built from another tree; each metric
// is then reported per round, prefixed with its name and round number.
//
// The members' readers find the body marker in the raw frame instead of
// decoding the JSON, so the load client takes little of the 2 cores the
// server shares with it.
func BenchmarkFanoutPipelined(b *testing.B) {
	benchBackends(b, func(b *testing.B, bk backend) {
		const members = 1000
		window := 8
		if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_WINDOW")); err == nil && v > 0 {
			window = v
		}
		bk, tokens := fanoutSetup(b, bk, members)
		type round struct{ name, bin string }
		rounds := []round{{"", os.Args[0]}}
		if ab := os.Getenv("PARLEY_BENCH_AB"); ab != "" {
			rounds = nil
			for e := range strings.SplitSeq(ab, ",") {
				name, bin, ok := strings.Cut(e, "=")
				if !ok {
					b.Fatalf("PARLEY_BENCH_AB entry %q: want name=binary", e)
				}
				rounds = append(rounds, round{fmt.Sprintf("%s%d-", name, len(rounds)+1), bin})
			}
		}
		sends := 1000
		if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_SENDS")); err == nil && v > 0 {
			sends = v
		}
		for b.Loop() {
			for k, r := range rounds {
				serverBin = r.bin
				res := fanoutRound(b, bk, tokens, sends, window, k, fanoutServers{n: 1})
				serverBin = os.Args[0]
				b.ReportMetric(res.deliveries, r.name+"deliveries/s")
				b.ReportMetric(res.p50, r.name+"p50-ms")
				b.ReportMetric(res.p99, r.name+"p99-ms")
				b.ReportMetric(res.cpu, r.name+"server-cpu-µs/delivery")
				b.ReportMetric(res.perWrite, r.name+"deliveries/write")
			}
		}
	})
}

const fanoutConv = "fanout-pipelined"

// runID keeps the request keys of runs on a kept set-up apart.
var runID = time.Now().UnixNano()

// fanoutSetup returns the backend to run on and the members' tokens: a
// fresh set-up, or the one kept in PARLEY_BENCH_STATE.
func fanoutSetup(b *testing.B, bk backend, members int) (backend, []string) {
	state := os.Getenv("PARLEY_BENCH_STATE")
	if state != "" {
		if bk.name == "sqlite" {
			bk.db = "sqlite:" + filepath.Join(state, "parley.db")
		} else {
			server := pgtest.Server(b)
			conn, err := pgx.Connect(context.Background(), pgtest.Libpq(server))
			if err != nil {
				b.Fatal(err)
			}
			_, err = conn.Exec(context.Background(), `CREATE DATABASE parley_fanout_bench`)
			conn.Close(context.Background())
			if err != nil && !strings.Contains(err.Error(), "42P04") { // already exists
				b.Fatal(err)
			}
			bk.db = pgtest.Libpq(pgtest.WithDatabase(server, "parley_fanout_bench"))
		}
		bk.dir = filepath.Join(state, bk.name+"-data")
		if err := os.MkdirAll(bk.dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if saved, err := os.ReadFile(filepath.Join(state, bk.name+".tokens")); err == nil {
			return bk, strings.Fields(string(saved))
		}
	}
	s := bk.store(b)
	ids, tokens := benchUsers(b, s, "fp", members)
	if _, err := s.CreateConversation(context.Background(), parley.Principal{User: ids[0]}, parley.NewConversation{
		ID: fanoutConv, Kind: parley.KindGroup, Title: fanoutConv, Members: ids,
	}); err != nil {
		b.Fatal(err)
	}
	if state != "" {
		if err := os.WriteFile(filepath.Join(state, bk.name+".tokens"), []byte(strings.Join(tokens, "\n")), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return bk, tokens
}

// BenchmarkFanoutGateways is BenchmarkFanoutPipelined (same members,
// publisher, window and metrics; PostgreSQL only) with the NATS bus
// (PARLEY_TEST_NATS) and the members spread over several gateways: per
// round, one gateway and then PARLEY_BENCH_GATEWAYS (default 3), member i
// on gateway i mod n, the publisher on the first. Each metric is reported
// per round (gw1-…, gw3-…); server CPU is that of all the gateways
// together. Run it with -benchtime 1x. On one machine the gateways share
// its cores with each other, PostgreSQL, NATS and the load client, so
// what it shows is the cost of the bus, not more hardware.
func BenchmarkFanoutGateways(b *testing.B) {
	nats := os.Getenv("PARLEY_TEST_NATS")
	if nats == "" {
		b.Skip("PARLEY_TEST_NATS is not set (e.g. nats://127.0.0.1:4222)")
	}
	gateways := 3
	if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_GATEWAYS")); err == nil && v > 0 {
		gateways = v
	}
	window := 8
	if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_WINDOW")); err == nil && v > 0 {
		window = v
	}
	sends := 1000
	if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_SENDS")); err == nil && v > 0 {
		sends = v
	}
	// PARLEY_BENCH_GATEWAY_CPU caps each gateway at that many cores (a
	// control group each; root), so that the gateways, not PostgreSQL,
	// NATS or the readers they share the machine with, bound a round.
	cpu, _ := strconv.ParseFloat(os.Getenv("PARLEY_BENCH_GATEWAY_CPU"), 64)
	bk := backend{name: "postgres", db: pgtest.Libpq(pgtest.DSN(b)), dir: b.TempDir()}
	bk, tokens := fanoutSetup(b, bk, 1000)
	for b.Loop() {
		for k, n := range []int{1, gateways, gateways, 1} {
			res := fanoutRound(b, bk, tokens, sends, window, k, fanoutServers{n: n, args: []string{"--bus", nats}, cpu: cpu})
			name := fmt.Sprintf("gw%d-%d-", n, k+1)
			b.ReportMetric(res.deliveries, name+"deliveries/s")
			b.ReportMetric(res.p50, name+"p50-ms")
			b.ReportMetric(res.p99, name+"p99-ms")
			b.ReportMetric(res.cpu, name+"server-cpu-µs/delivery")
			b.ReportMetric(res.perWrite, name+"deliveries/write")
			if cpu > 0 {
				b.ReportMetric(res.throttled, name+"throttled-share")
			}
		}
	}
}

type fanoutResult struct{ deliveries, p50, p99, cpu, perWrite, throttled float64 }

// fanoutServers is how a round's servers run: n gateways on the one store,
// each with args, and each capped at cpu cores when cpu > 0.
type fanoutServers struct {
	n    int
	args []string
	cpu  float64
}

// capCPU moves p into a control group of its own allowed cores CPUs; the
// group goes when the test ends (after p was killed).
func capCPU(tb testing.TB, p *proc, cores float64) *cpucap.Group {
	tb.Helper()
	g, err := cpucap.New(fmt.Sprintf("parley-bench-%d-%d", os.Getpid(), p.cmd.Process.Pid), cores)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.kill()
		g.Remove()
	})
	if err := g.Add(p.cmd.Process.Pid); err != nil {
		tb.Fatal(err)
	}
	return g
}

// fanoutRound starts the servers, connects and subscribes the members
// (member i to server i mod n), runs n pipelined sends (tagged with round
// k) from the first server and stops the servers.
func fanoutRound(b *testing.B, bk backend, tokens []string, n, window, k int, sv fanoutServers) fanoutResult {
	members := len(tokens)
	var ps []*proc
	var caps []*cpucap.Group
	for i := range sv.n {
		dir := bk.dir
		if i > 0 {
			dir = filepath.Join(bk.dir, fmt.Sprintf("gw%d", i))
		}
		p := serveEnv(b, nil, append([]string{"--db", bk.db, "--data-dir", dir}, sv.args...)...)
		defer p.kill()
		ps = append(ps, p)
		if sv.cpu > 0 {
			caps = append(caps, capCPU(b, p, sv.cpu))
		}
	}
	p := ps[0]

	sentAt := make([]atomic.Int64, n+1) // send i's publish time, unix ns
	count := make([]atomic.Int32, n+1)  // members that have send i
	lat := make([][]time.Duration, members)
	slots := make(chan struct{}, window) // a send fully delivered frees one
	var bad atomic.Pointer[string]
	var wg sync.WaitGroup
	readers := make([]*websocket.Conn, members)
	defer func() {
		for _, ws := range readers {
			if ws != nil {
				ws.CloseNow()
			}
		}
		wg.Wait()
	}()
	marker := []byte(fmt.Sprintf("fp%d:", k))
	err := parallel(members, 32, func(i int) error {
		ws, err := rawDial(ps[i%len(ps)].ws, tokens[i])
		if err != nil {
			return fmt.Errorf("socket %d: %w", i, err)
		}
		readers[i] = ws
		if err := rawSub(ws); err != nil {
			return fmt.Errorf("socket %d: %w", i, err)
		}
		lat[i] = make([]time.Duration, 0, n)
		wg.Go(func() {
			for {
				_, m, err := ws.Read(context.Background())
				if err != nil {
					return
				}
				at := bytes.Index(m, marker)
				if at < 0 {
					if !bytes.Contains(m, []byte(`"t":"event"`)) && !bytes.Contains(m, []byte(`"t":"presence"`)) {
						msg := string(m)
						bad.CompareAndSwap(nil, &msg)
					}
					continue
				}
				now := time.Now().UnixNano()
				j := at + len(marker)
				for j < len(m) && m[j] >= '0' && m[j] <= '9' {
					j++
				}
				seq, _ := strconv.Atoi(string(m[at+len(marker) : j]))
				if seq < 1 || seq > n {
					continue
				}
				lat[i] = append(lat[i], time.Duration(now-sentAt[seq].Load()))
				if count[seq].Add(1) == int32(members) {
					slots <- struct{}{}
				}
			}
		})
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	sender, err := rawDial(p.ws, tokens[0])
	if err != nil {
		b.Fatal(err)
	}
	defer sender.CloseNow()
	go func() { // the sender's replies, drained so its socket keeps moving
		for {
			_, m, err := sender.Read(context.Background())
			if err != nil {
				return
			}
			// Pushes (events, presence) come too; a reply must be sent.
			if bytes.Contains(m, []byte(`"rid":`)) && !bytes.Contains(m, []byte(`"t":"sent"`)) {
				msg := "send answered " + string(m)
				bad.CompareAndSwap(nil, &msg)
			}
		}
	}()
	for range window {
		slots <- struct{}{}
	}

	cpu0, writes0 := sumOver(b, ps, procCPU), sumOver(b, ps, procWrites)
	periods0, throttled0 := throttleSum(b, caps)
	start := time.Now()
	for i := 1; i <= n; i++ {
		select {
		case <-slots:
		case <-time.After(30 * time.Second):
			b.Fatalf("send %d: no earlier send reached every member in 30 s (bad frame: %v)", i, bad.Load())
		}
		if m := bad.Load(); m != nil {
			b.Fatal(*m)
		}
		req := fmt.Sprintf(`{"t":"send","rid":%d,"conv":%q,"cmid":"fp%d-%d-%d","body":"%s%d"}`, i, fanoutConv, k, runID, i, marker, i)
		sentAt[i].Store(time.Now().UnixNano())
		if err := sender.Write(context.Background(), websocket.MessageText, []byte(req)); err != nil {
			b.Fatal(err)
		}
	}
	for range window { // the last sends delivered
		select {
		case <-slots:
		case <-time.After(30 * time.Second):
			b.Fatalf("the last sends did not reach every member in 30 s (bad frame: %v)", bad.Load())
		}
	}
	elapsed := time.Since(start)
	cpu := sumOver(b, ps, procCPU) - cpu0
	writes := sumOver(b, ps, procWrites) - writes0
	periods1, throttled1 := throttleSum(b, caps)
	if m := bad.Load(); m != nil {
		b.Fatal(*m)
	}
	all := slices.Concat(lat...)
	if len(all) != members*n {
		b.Fatalf("%d deliveries, want %d", len(all), members*n)
	}
	slices.Sort(all)
	return fanoutResult{
		deliveries: float64(members*n) / elapsed.Seconds(),
		p50:        ms(percentile(all, 50)),
		p99:        ms(percentile(all, 99)),
		cpu:        float64(cpu) / float64(time.Microsecond) / float64(members*n),
		perWrite:   float64(members*n) / float64(max(writes, 1)),
		throttled:  float64(throttled1-throttled0) / float64(max(periods1-periods0, 1)),
	}
}

// throttleSum adds up the CPU periods of the groups and those in which a
// group waited at its cap.
func throttleSum(tb testing.TB, caps []*cpucap.Group) (periods, throttled int64) {
	tb.Helper()
	for _, g := range caps {
		p, t, err := g.Throttled()
		if err != nil {
			tb.Fatal(err)
		}
		periods, throttled = periods+p, throttled+t
	}
	return periods, throttled
}

// rawDial opens a socket with token, for a reader that handles raw frames.
// A 503 (a gateway too busy to identify the token in time, as a capped
// one connecting a thousand sockets is) is retried, as a client would.
func rawDial(url, token string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
		if err == nil {
			ws.SetReadLimit(1 << 20)
			return ws, nil
		}
		if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// rawSub subscribes ws and reads the reply (nothing else can come first).
func rawSub(ws *websocket.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"t":"sub","rid":1}`)); err != nil {
		return err
	}
	for {
		_, m, err := ws.Read(ctx)
		if err != nil {
			return err
		}
		if !bytes.Contains(m, []byte(`"rid":`)) {
			continue // a push (presence) before the reply
		}
		if !bytes.Contains(m, []byte(`"t":"subscribed"`)) {
			return fmt.Errorf("sub answered %s", m)
		}
		return nil
	}
}

// sumOver adds up f over the processes of ps (procCPU, procWrites).
func sumOver[T int64 | time.Duration](tb testing.TB, ps []*proc, f func(testing.TB, int) T) T {
	var sum T
	for _, p := range ps {
		sum += f(tb, p.cmd.Process.Pid)
	}
	return sum
}

// procWrites returns the write system calls process pid has made (syscw
// of /proc/PID/io).
func procWrites(tb testing.TB, pid int) int64 {
	tb.Helper()
	return procField(tb, pid, "io", "syscw", "")
}

// procField returns the whole number after "key:" in /proc/PID/file,
// which must be followed by unit alone ("" for none).
func procField(tb testing.TB, pid int, file, key, unit string) int64 {
	tb.Helper()
	path := fmt.Sprintf("/proc/%d/%s", pid, file)
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		v, ok := strings.CutPrefix(line, key+":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 || strings.Join(f[1:], " ") != unit {
			break
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			return n
		}
		break
	}
	tb.Fatalf("no %s: … %s in %s: %q", key, unit, path, b)
	return 0
}

// procCPU returns the CPU time (user + system) process pid has used, from
// fields 14 and 15 of /proc/PID/stat (clock ticks of 10 ms).
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		tb.Fatalf("short /proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("bad /proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
