package bustest_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/nats"
	"github.com/parleychat/parley/postgres"
)

// BenchmarkNotice measures what a notice costs the gateways of one
// deployment on each bus: one publisher sends b.N message notices of one
// conversation (each carrying a 100-byte message, which only the buses
// that carry events send), pipelined in Publish calls of 64, to G
// receiving buses, as G gateways would hold them.
//
//   - watching: every receiver watches the conversation;
//   - idle: one receiver watches it, the other G-1 watch other
//     conversations (a deployment where a conversation's members are on
//     one gateway of several).
//
// Reported per notice: cpu-us/notice/gw, the CPU time of this process
// (publisher and receivers: the gateways' side; getrusage) divided by
// notices × G; and broker-cpu-us/notice, the CPU time of the nats-server
// process (NATS only, read from /proc; PostgreSQL's backends are not
// counted). The shared machine makes both rough.
//
//	PARLEY_TEST_POSTGRES=… PARLEY_TEST_NATS=nats://127.0.0.1:4222 \
//	  go test -run '^$' -bench BenchmarkNotice -benchtime 20000x ./bustest/
func BenchmarkNotice(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	type busKind struct {
		name  string
		multi bool
		new   func(b *testing.B, n int) []parley.Bus
	}
	kinds := []busKind{
		{"inmem", false, func(b *testing.B, n int) []parley.Bus { return []parley.Bus{inmem.NewBus()} }},
		{"postgres", true, func(b *testing.B, n int) []parley.Bus {
			dsn := os.Getenv("PARLEY_TEST_POSTGRES")
			if dsn == "" {
				b.Skip("PARLEY_TEST_POSTGRES is not set")
			}
			ch := "bench_" + strconv.FormatInt(time.Now().UnixNano(), 10)
			var out []parley.Bus
			for range n {
				bus, err := postgres.NewBus(dsn, postgres.BusOptions{Channel: ch, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				out = append(out, bus)
			}
			return out
		}},
		{"nats", true, func(b *testing.B, n int) []parley.Bus {
			url := os.Getenv("PARLEY_TEST_NATS")
			if url == "" {
				b.Skip("PARLEY_TEST_NATS is not set")
			}
			prefix := "bench" + parley.NewID()[:8]
			var out []parley.Bus
			for range n {
				bus, err := nats.NewBus(url, nats.Options{Prefix: prefix, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				out = append(out, bus)
			}
			return out
		}},
	}
	for _, k := range kinds {
		for _, g := range []int{1, 3} {
			for _, mode := range []string{"watching", "idle"} {
				if !k.multi && g > 1 || g == 1 && mode == "idle" {
					continue
				}
				b.Run(k.name+"/gw="+strconv.Itoa(g)+"/"+mode, func(b *testing.B) {
					benchNotice(b, k.new(b, g+1), g, mode == "idle")
				})
			}
		}
	}
}

// counter is a receiving gateway: it counts the notices of "bench", and
// notes a notice of "warm" (every receiver watches it).
type counter struct {
	n    atomic.Int64
	warm atomic.Bool
	want int64
	done chan struct{}
	once sync.Once
}

func (c *counter) Notify(ns []parley.Notice) {
	k := int64(0)
	for _, n := range ns {
		switch n.Conv {
		case "bench":
			k++
		case "warm":
			c.warm.Store(true)
		}
	}
	if c.n.Add(k) >= c.want && c.want > 0 {
		c.once.Do(func() { close(c.done) })
	}
}

func (c *counter) Lost() {}

func benchNotice(b *testing.B, buses []parley.Bus, g int, idle bool) {
	pub := buses[0]
	recv := buses[1:]
	if len(buses) == 1 { // single node: the publisher's own bus receives
		recv = buses
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	counters := make([]*counter, len(recv))
	for i, bus := range recv {
		conv := "bench"
		if idle && i > 0 {
			conv = "elsewhere" + strconv.Itoa(i)
		}
		bus.Interest(parley.Interest{Watch: []string{conv, "warm"}})
		counters[i] = &counter{done: make(chan struct{})}
		wg.Go(func() { bus.Run(ctx, counters[i]) })
	}
	if len(buses) > 1 {
		wg.Go(func() { pub.Run(ctx, &counter{}) })
	}
	waitWarm(b, pub, counters)

	ev := parley.Event{Conv: "bench", MID: "m", Kind: parley.EventMessage, Sender: "alice", Device: "phone",
		Body: strings.Repeat("x", 100), At: time.Now().UTC().Truncate(time.Millisecond)}
	ns := make([]parley.Notice, b.N)
	for i := range ns {
		e := ev
		e.Seq = int64(i + 1)
		ns[i] = parley.Notice{Conv: "bench", Seq: e.Seq}.WithEvent(e, 1)
	}
	watching := counters
	if idle {
		watching = counters[:1]
	}
	for _, c := range watching {
		c.want = int64(b.N)
	}
	broker0 := brokerCPU(len(buses) > 1 && isNATS(pub))
	cpu0 := processCPU()
	b.ResetTimer()
	for len(ns) > 0 {
		k := min(64, len(ns))
		pub.Publish(ns[:k]...)
		ns = ns[k:]
	}
	for _, c := range watching {
		select {
		case <-c.done:
		case <-time.After(60 * time.Second):
			b.Fatalf("a receiver got %d of %d notices in 60s", c.n.Load(), b.N)
		}
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/float64(g), "cpu-us/notice/gw")
	if broker0 >= 0 {
		b.ReportMetric(float64((brokerCPU(true)-broker0).Microseconds())/float64(b.N), "broker-cpu-us/notice")
	}
}

func isNATS(bus parley.Bus) bool { _, ok := bus.(*nats.Bus); return ok }

// waitWarm publishes "warm" notices until every receiver has heard one:
// the buses are connected and subscribed.
func waitWarm(b *testing.B, pub parley.Bus, cs []*counter) {
	b.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		pub.Publish(parley.Notice{Conv: "warm", Seq: 1})
		all := true
		for _, c := range cs {
			all = all && c.warm.Load()
		}
		if all {
			return
		}
	}
	b.Fatal("receivers not ready after 20s")
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// brokerCPU is the CPU time of the nats-server processes (-1 when not
// asked or none is found).
func brokerCPU(ask bool) time.Duration {
	if !ask {
		return -1
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	total, found := time.Duration(0), false
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "(nats-server)") {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
		found = true
	}
	if !found {
		return -1
	}
	return total
}
