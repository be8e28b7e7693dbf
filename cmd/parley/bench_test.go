package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/wire"
)

// The gateway benchmarks drive a real `parley serve` child process (see
// TestMain) over real loopback WebSockets, so they measure what a client
// sees. The server and the benchmark's clients share the machine's cores.
// They run only with -bench (docs/benchmarks.md has the commands):
//
//	go test ./cmd/parley -run '^$' -bench 'RoundTrip|Fanout' -benchtime 10s
//	go test ./cmd/parley -run '^$' -bench IdleConnections -benchtime 10000x
//	go test ./cmd/parley -run '^$' -bench FanoutPipelined -benchtime 1x
//
// Setup (users, whose argon2id hashing costs ~25 ms per CreateUser and per
// Login) runs once per sub-benchmark: RoundTrip and Fanout1000 use b.Loop,
// which calls the function once and ramps b.N inside it.

// benchBackends runs fn as the sub-benchmarks sqlite and postgres (skipped
// without PARLEY_TEST_POSTGRES). The PostgreSQL server gets parley serve's
// default pool size, not pgtest's small one.
func benchBackends(b *testing.B, fn func(b *testing.B, bk backend)) {
	b.Run("sqlite", func(b *testing.B) {
		dir := b.TempDir()
		fn(b, backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir})
	})
	b.Run("postgres", func(b *testing.B) {
		fn(b, backend{name: "postgres", db: pgtest.Libpq(pgtest.DSN(b)), dir: b.TempDir()})
	})
}

// BenchmarkRoundTrip: 64 sockets, each of its own user, send in a closed
// loop and wait for each sent reply; b.N sends in all. User i sends to
// group i, whose members are users i and i+1, so no two senders meet on
// one conversation's row lock, and every socket is subscribed, so each
// send is also read back by the fan-out and pushed to two sockets (as a
// real client's would be). PARLEY_BENCH_NOSUB=1 leaves the sockets
// unsubscribed: no fan-out, so the difference is what pushing costs the
// send path. ns/op is the run's time over b.N: the inverse of sends/s, not
// a send's latency (p50-ms, p99-ms).
func BenchmarkRoundTrip(b *testing.B) {
	benchBackends(b, func(b *testing.B, bk backend) {
		const conns = 64
		s := bk.store(b)
		ids, tokens := benchUsers(b, s, "rt", conns)
		convs := make([]string, conns)
		err := parallel(conns, 8, func(i int) error {
			convs[i] = fmt.Sprintf("rt-%02d", i)
			_, err := s.CreateConversation(context.Background(), parley.Principal{User: ids[i]}, parley.NewConversation{
				ID: convs[i], Kind: parley.KindGroup, Title: convs[i], Members: []string{ids[i], ids[(i+1)%conns]},
			})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		p := serve(b, bk.db, bk.dir)
		sub := os.Getenv("PARLEY_BENCH_NOSUB") != "1"
		socks := dialAll(b, p.ws, conns, func(i int) string { return tokens[i] }, sub, nil)

		jobs := make(chan struct{})
		lat := make([][]time.Duration, conns)
		var failed atomic.Pointer[error]
		var wg sync.WaitGroup
		for i, c := range socks {
			wg.Go(func() {
				n := 0
				for range jobs {
					if failed.Load() != nil {
						continue // keep taking jobs so the loop ends
					}
					n++
					req := wire.Request{T: wire.TSend, Conv: convs[i], CMID: fmt.Sprintf("%d-%d", i, n), Body: "benchmark message " + strconv.Itoa(n)}
					start := time.Now()
					f, err := c.do(req)
					if err == nil && f.Seq == nil {
						err = fmt.Errorf("sent reply without seq: %+v", f)
					}
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						continue
					}
					lat[i] = append(lat[i], time.Since(start))
				}
			})
		}
		start := time.Now()
		for b.Loop() {
			jobs <- struct{}{} // taken by the next idle socket
		}
		close(jobs)
		wg.Wait()
		elapsed := time.Since(start)
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
		all := slices.Concat(lat...)
		slices.Sort(all)
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sends/s")
		b.ReportMetric(ms(percentile(all, 50)), "p50-ms")
		b.ReportMetric(ms(percentile(all, 99)), "p99-ms")
	})
}

// BenchmarkFanout1000: one group of 1,000 members, each with one subscribed
// socket, and one more socket (of the first member, not subscribed) that
// sends. Per iteration: one send, then wait until all 1,000 sockets have
// the event push of its seq. The server's hint threshold (--hint-members,
// default 1000) is "more members than", so 1,000 members get events.
func BenchmarkFanout1000(b *testing.B) {
	benchBackends(b, func(b *testing.B, bk backend) {
		const members = 1000
		s := bk.store(b)
		ids, tokens := benchUsers(b, s, "fo", members)
		const conv = "fanout"
		ctx := context.Background()
		if _, err := s.CreateConversation(ctx, parley.Principal{User: ids[0]}, parley.NewConversation{
			ID: conv, Kind: parley.KindGroup, Title: conv, Members: ids,
		}); err != nil {
			b.Fatal(err)
		}
		c, err := s.Conversation(ctx, conv)
		if err != nil {
			b.Fatal(err)
		}
		head := c.Head
		p := serve(b, bk.db, bk.dir)

		// Each reader counts the first push of the awaited seq; the one that
		// makes it 1,000 reports the time.
		var want, got atomic.Int64
		last := make(chan time.Time, 1)
		dialAll(b, p.ws, members, func(i int) string { return tokens[i] }, true, func(int) func(wire.Frame) {
			var seen int64 // the reader's own: the highest seq counted
			return func(f wire.Frame) {
				if f.T != wire.TEvent || f.Ev == nil || f.Ev.Conv != conv || f.Ev.Seq <= seen {
					return
				}
				seen = f.Ev.Seq
				if f.Ev.Seq == want.Load() && got.Add(1) == members {
					last <- time.Now()
				}
			}
		})
		sender := dialAll(b, p.ws, 1, func(int) string { return tokens[0] }, false, nil)[0]

		var total time.Duration
		n := 0
		start := time.Now()
		for b.Loop() {
			n++
			head++
			want.Store(head)
			got.Store(0)
			t0 := time.Now()
			f, err := sender.do(wire.Request{T: wire.TSend, Conv: conv, CMID: "f-" + strconv.Itoa(n), Body: "to everyone " + strconv.Itoa(n)})
			if err != nil {
				b.Fatal(err)
			}
			if f.Seq == nil || *f.Seq != head {
				b.Fatalf("sent %+v, want seq %d", f, head)
			}
			select {
			case t := <-last:
				total += t.Sub(t0)
			case <-time.After(30 * time.Second):
				b.Fatalf("seq %d reached %d of %d sockets in 30 s", head, got.Load(), members)
			}
		}
		elapsed := time.Since(start)
		b.ReportMetric(float64(members*b.N)/elapsed.Seconds(), "deliveries/s")
		b.ReportMetric(ms(total/time.Duration(b.N)), "last-delivery-ms")
	})
}

// BenchmarkIdleConnections opens b.N sockets (one user, one token: devices
// do not change what a socket costs), each subscribed, and reports how much
// the server process's resident memory (VmRSS) grew per socket, read 11 s
// after the last one subscribed (the server pings every 10 s, so after a
// ping cycle; a shorter interval, which is also the pong timeout, drops
// sockets whose pongs a loaded machine delays), and where it went per socket from the server's Go runtime
// metrics (/metrics): goroutines, goroutine stacks, heap in use. Run it
// with -benchtime 10000x: the sockets are b.N, and the test process needs
// a file descriptor for each.
func BenchmarkIdleConnections(b *testing.B) {
	benchBackends(b, func(b *testing.B, bk backend) {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			b.Fatal(err)
		}
		if need := uint64(b.N) + 1000; lim.Cur < need {
			b.Skipf("%d sockets need %d file descriptors, the limit is %d: raise ulimit -n or lower -benchtime (run with -benchtime 10000x)", b.N, need, lim.Cur)
		}
		s := bk.store(b)
		ids, tokens := benchUsers(b, s, "idle", 1)
		if _, err := s.CreateConversation(context.Background(), parley.Principal{User: ids[0]}, parley.NewConversation{
			ID: "idle", Kind: parley.KindGroup, Title: "idle", Members: ids,
		}); err != nil {
			b.Fatal(err)
		}
		p := serveEnv(b, nil, "--db", bk.db, "--data-dir", bk.dir, "--ping", "10s", "--user-sockets", strconv.Itoa(b.N+1))
		time.Sleep(time.Second)
		before := vmRSS(b, p.cmd.Process.Pid)
		rt0 := goRuntime(b, p.http)

		b.ResetTimer()
		start := time.Now()
		dialAll(b, p.ws, b.N, func(int) string { return tokens[0] }, true, nil)
		elapsed := time.Since(start)
		b.StopTimer()

		time.Sleep(11 * time.Second)
		after := vmRSS(b, p.cmd.Process.Pid)
		rt := goRuntime(b, p.http)
		per := func(name string) float64 { return (rt[name] - rt0[name]) / float64(b.N) }
		b.ReportMetric(float64(after-before)/float64(b.N), "KiB/conn")
		b.ReportMetric(per("go_goroutines"), "goroutines/conn")
		b.ReportMetric(per("go_memstats_stack_inuse_bytes")/1024, "stack-KiB/conn")
		b.ReportMetric(per("go_memstats_heap_inuse_bytes")/1024, "heap-inuse-KiB/conn")
		b.ReportMetric(per("go_memstats_heap_alloc_bytes")/1024, "heap-live-KiB/conn")
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "conns/s")
		b.ReportMetric(float64(before)/1024, "rss-before-MiB")
		b.ReportMetric(float64(after)/1024, "rss-after-MiB")
	})
}

// benchUsers creates n users prefix0000… and logs each in on device d1,
// on every core at once (password hashing is the cost), and returns their
// ids and tokens.
func benchUsers(tb testing.TB, s parley.Store, prefix string, n int) (ids, tokens []string) {
	tb.Helper()
	ctx := context.Background()
	ids, tokens = make([]string, n), make([]string, n)
	err := parallel(n, 2*runtime.GOMAXPROCS(0), func(i int) error {
		id := fmt.Sprintf("%s%04d", prefix, i)
		if _, err := s.CreateUser(ctx, parley.NewUser{ID: id, Password: "password-" + id}); err != nil {
			return fmt.Errorf("create %s: %w", id, err)
		}
		sess, err := s.Login(ctx, parley.LoginRequest{Login: id, Password: "password-" + id, DeviceID: "d1", InstallID: "i1"})
		if err != nil {
			return fmt.Errorf("login %s: %w", id, err)
		}
		ids[i], tokens[i] = id, sess.Token
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return ids, tokens
}

// parallel runs fn(0) … fn(n-1) on at most workers goroutines and returns
// the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// sock is a raw WebSocket peer. One reader goroutine serves the socket's
// whole life (coder/websocket closes a socket whose Read context ends, so
// reads cannot time out one by one): it hands replies to do and pushes to
// onPush, on its own goroutine.
type sock struct {
	ws      *websocket.Conn
	rid     int64
	replies chan wire.Frame
	done    chan struct{} // the reader ended
}

func dialSock(url, token string, onPush func(wire.Frame)) (*sock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(1 << 20)
	c := &sock{ws: ws, replies: make(chan wire.Frame, 4), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			var f wire.Frame
			if err := json.Unmarshal(b, &f); err != nil {
				f = wire.Frame{T: "undecodable: " + string(b)}
			}
			switch {
			case f.RID != nil:
				select {
				case c.replies <- f:
				default: // nobody waits for it (do has one request out at a time)
				}
			case onPush != nil:
				onPush(f)
			}
		}
	}()
	return c, nil
}

// do sends req with a fresh rid and waits for its reply; an error frame is
// an error.
func (c *sock) do(req wire.Request) (wire.Frame, error) {
	c.rid++
	req.RID = strconv.AppendInt(nil, c.rid, 10)
	b, err := json.Marshal(req)
	if err != nil {
		return wire.Frame{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = c.ws.Write(ctx, websocket.MessageText, b)
	cancel()
	if err != nil {
		return wire.Frame{}, fmt.Errorf("%s: write: %w", req.T, err)
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case f := <-c.replies:
		switch {
		case !bytes.Equal(f.RID, req.RID):
			return f, fmt.Errorf("%s: reply %s while waiting for %s", req.T, f.RID, req.RID)
		case f.T == wire.TError:
			return f, fmt.Errorf("%s: %s: %s", req.T, f.Code, f.Msg)
		}
		return f, nil
	case <-c.done:
		return wire.Frame{}, fmt.Errorf("%s: the socket closed", req.T)
	case <-timeout.C:
		return wire.Frame{}, fmt.Errorf("%s: no reply in 30 s", req.T)
	}
}

// dialAll opens n sockets to url, the i-th with token(i) and pushes to
// onPush(i) (nil: dropped), subscribing each when sub is set, 32 at a time.
// They are closed, and their readers waited for, when tb ends.
func dialAll(tb testing.TB, url string, n int, token func(i int) string, sub bool, onPush func(i int) func(wire.Frame)) []*sock {
	tb.Helper()
	socks := make([]*sock, n)
	tb.Cleanup(func() {
		for _, c := range socks {
			if c != nil {
				c.ws.CloseNow()
			}
		}
		for _, c := range socks {
			if c != nil {
				<-c.done
			}
		}
	})
	err := parallel(n, 32, func(i int) error {
		var push func(wire.Frame)
		if onPush != nil {
			push = onPush(i)
		}
		c, err := dialSock(url, token(i), push)
		if err != nil {
			return fmt.Errorf("socket %d: %w", i, err)
		}
		socks[i] = c
		if !sub {
			return nil
		}
		f, err := c.do(wire.Request{T: wire.TSub})
		if err == nil && f.T != wire.TSubscribed {
			err = errors.New("sub answered " + f.T)
		}
		if err != nil {
			return fmt.Errorf("socket %d: %w", i, err)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return socks
}

// goRuntime reads the server's Go runtime gauges from its /metrics.
func goRuntime(tb testing.TB, base string) map[string]float64 {
	tb.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		tb.Fatal(err)
	}
	m := map[string]float64{}
	for line := range strings.SplitSeq(buf.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[0], "go_") {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				m[f[0]] = v
			}
		}
	}
	for _, k := range []string{"go_goroutines", "go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes", "go_memstats_heap_alloc_bytes"} {
		if _, ok := m[k]; !ok {
			tb.Fatalf("no %s in %s/metrics", k, base)
		}
	}
	return m
}

// vmRSS returns the resident memory of process pid, in KiB.
func vmRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	return procField(tb, pid, "status", "VmRSS", "kB")
}

// percentile returns the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
