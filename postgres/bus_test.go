package postgres_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/bustest"
	"github.com/parleychat/parley/postgres"
)

// busDSN is the server of PARLEY_TEST_POSTGRES, used as is: the bus needs
// no tables, and each test has a channel of its own (testChannel).
func busDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("PARLEY_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("PostgreSQL tests need a server: set PARLEY_TEST_POSTGRES=postgres://USER@HOST:5432/parley_test?sslmode=disable")
	}
	return dsn
}

// testChannel is a NOTIFY channel no other test uses.
func testChannel() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "parley_test_" + hex.EncodeToString(b)
}

// testLogger writes to a buffer the test can read, and to t.Log.
func testLogger(t testing.TB) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{t: t}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

type syncBuffer struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Logf("bus log: %s", bytes.TrimSpace(p))
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newBus(t testing.TB, dsn string, opts postgres.BusOptions) *postgres.Bus {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger, _ = testLogger(t)
	}
	b, err := postgres.NewBus(dsn, opts)
	if err != nil {
		t.Fatalf("NewBus: %v", err)
	}
	return b
}

type busBackend struct{ dsn string }

func (be busBackend) New(t testing.TB) (a, b parley.Bus) {
	ch := testChannel()
	return newBus(t, be.dsn, postgres.BusOptions{Channel: ch}), newBus(t, be.dsn, postgres.BusOptions{Channel: ch})
}

func (busBackend) SingleNode() bool { return false }
func (busBackend) Selective() bool  { return false }
func (busBackend) MaxCarried() int  { return parley.MaxNoticeBody }

func TestBusContract(t *testing.T) {
	bustest.Run(t, busBackend{busDSN(t)})
}

func TestNewBusRejects(t *testing.T) {
	for _, c := range []struct {
		name, dsn string
		opts      postgres.BusOptions
	}{
		{"bad dsn", "postgres://%zz", postgres.BusOptions{}},
		{"channel with a dash", "postgres://localhost/x", postgres.BusOptions{Channel: "parley-1"}},
		{"channel too long", "postgres://localhost/x", postgres.BusOptions{Channel: strings.Repeat("c", 64)}},
	} {
		if _, err := postgres.NewBus(c.dsn, c.opts); err == nil {
			t.Errorf("%s: NewBus succeeded", c.name)
		}
	}
	if _, err := postgres.NewBus("postgres://localhost/x?pool_max_conns=4", postgres.BusOptions{}); err != nil {
		t.Errorf("the DSN that Open takes: %v", err)
	}
}

// handler records what a bus delivers.
type handler struct {
	mu      sync.Mutex
	ns      []parley.Notice
	at      []time.Time // when each of ns arrived
	lost    int
	changed chan struct{} // closed and replaced on every call
}

func newHandler() *handler { return &handler{changed: make(chan struct{})} }

func (h *handler) Notify(ns []parley.Notice) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range ns {
		h.ns = append(h.ns, n)
		h.at = append(h.at, now)
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *handler) Lost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost++
	close(h.changed)
	h.changed = make(chan struct{})
}

// waitUntil waits up to 10s for cond, checked under h's lock after every
// call; it fails the test with what when that time passes.
func (h *handler) waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		h.mu.Lock()
		ok, changed := cond(), h.changed
		h.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("after 10s: %s", what)
		}
	}
}

// has reports whether h heard n (call with h.mu held).
func (h *handler) has(n parley.Notice) bool { return slices.Contains(h.ns, n) }

// run runs bus with h until the test ends.
func run(t testing.TB, bus parley.Bus, h parley.BusHandler) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bus.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
}

// ready publishes probes on pub until h hears one.
func ready(t testing.TB, pub parley.Bus, h *handler) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for seq := int64(1); ; seq++ {
		n := parley.Notice{Conv: "probe", Seq: seq}
		pub.Publish(n)
		deadline := time.Now().Add(50 * time.Millisecond)
		for time.Now().Before(deadline) {
			h.mu.Lock()
			ok := len(h.ns) > 0 && h.ns[len(h.ns)-1].Conv == "probe"
			h.mu.Unlock()
			if ok {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		if time.Now().After(end) {
			t.Fatal("bus not ready after 10s")
		}
	}
}

func admin(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// terminate kills the backend pid, which must belong to app.
func terminate(t testing.TB, db *pgx.Conn, pid uint32, app string) {
	t.Helper()
	if pid == 0 {
		t.Fatalf("no %s connection to kill", app)
	}
	var killed bool
	err := db.QueryRow(context.Background(),
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2`,
		int64(pid), app).Scan(&killed)
	if err != nil || !killed {
		t.Fatalf("terminate %s backend %d: killed %v, %v", app, pid, killed, err)
	}
}

// When the listening connection is killed, the bus reconnects, LISTENs
// again, calls Lost, and delivers what is published afterwards.
func TestBusReconnect(t *testing.T) {
	dsn := busDSN(t)
	db := admin(t, dsn)
	bus := newBus(t, dsn, postgres.BusOptions{Channel: testChannel()})
	h := newHandler()
	run(t, bus, h)
	ready(t, bus, h)

	for round := 1; round <= 3; round++ {
		old := postgres.BusListenPID(bus)
		begin := time.Now()
		terminate(t, db, old, postgres.BusListenApp)
		h.waitUntil(t, "Lost after the listener was killed", func() bool { return h.lost == round })
		t.Logf("round %d: Lost %v after the kill", round, time.Since(begin).Round(time.Millisecond))
		if now := postgres.BusListenPID(bus); now == old || now == 0 {
			t.Errorf("listener pid %d after reconnect, was %d", now, old)
		}
		after := parley.Notice{Conv: "after", Seq: int64(round)}
		bus.Publish(after)
		h.waitUntil(t, "a notice published after the reconnect", func() bool { return h.has(after) })
	}
}

// When a send fails, the publisher drops the batch, reconnects, and sends a
// loss marker: every listener, its own included, calls Lost.
func TestBusPublisherReconnect(t *testing.T) {
	dsn := busDSN(t)
	db := admin(t, dsn)
	ch := testChannel()
	pub := newBus(t, dsn, postgres.BusOptions{Channel: ch})
	sub := newBus(t, dsn, postgres.BusOptions{Channel: ch})
	hp, hs := newHandler(), newHandler()
	run(t, pub, hp)
	run(t, sub, hs)
	ready(t, pub, hs)
	ready(t, pub, hp)

	terminate(t, db, postgres.BusPublishPID(pub), postgres.BusPublishApp)
	pub.Publish(parley.Notice{Conv: "during", Seq: 1}) // its send fails
	for _, h := range []*handler{hs, hp} {
		h.waitUntil(t, "Lost after a failed send", func() bool { return h.lost == 1 })
	}
	after := parley.Notice{Conv: "after", Seq: 1}
	pub.Publish(after)
	hs.waitUntil(t, "a notice published after the publisher reconnected", func() bool { return hs.has(after) })
}

// A publishing connection that died while idle is replaced before the next
// send, which then loses nothing.
func TestBusPublisherIdleReconnect(t *testing.T) {
	dsn := busDSN(t)
	db := admin(t, dsn)
	bus := newBus(t, dsn, postgres.BusOptions{Channel: testChannel(), PingEvery: 50 * time.Millisecond})
	h := newHandler()
	run(t, bus, h)
	ready(t, bus, h)

	terminate(t, db, postgres.BusPublishPID(bus), postgres.BusPublishApp)
	time.Sleep(100 * time.Millisecond) // idle for longer than PingEvery
	after := parley.Notice{Conv: "after", Seq: 1}
	bus.Publish(after)
	h.waitUntil(t, "the first notice after the idle connection died", func() bool { return h.has(after) })
	if h.lost != 0 {
		t.Errorf("Lost called %d times; a dead idle connection should cost nothing", h.lost)
	}
}

// With SkipOwn, a bus does not hand its handler what it published itself
// (the gateway pushed that already), and the others still hear it all.
func TestBusSkipOwn(t *testing.T) {
	dsn := busDSN(t)
	ch := testChannel()
	a := newBus(t, dsn, postgres.BusOptions{Channel: ch, SkipOwn: true})
	b := newBus(t, dsn, postgres.BusOptions{Channel: ch})
	ha, hb := newHandler(), newHandler()
	run(t, a, ha)
	run(t, b, hb)
	ready(t, b, ha)
	ready(t, b, hb)
	ready(t, a, hb) // a's publisher is connected

	own := make([]parley.Notice, 50)
	for i := range own {
		own[i] = parley.Notice{Conv: "froma", Seq: int64(i + 1)}
		a.Publish(own[i])
	}
	hb.waitUntil(t, "b hears all of a's notices", func() bool {
		for _, n := range own {
			if !hb.has(n) {
				return false
			}
		}
		return true
	})
	// PostgreSQL delivers notifications in commit order: once a hears
	// this, it has been sent everything of its own published before.
	marker := parley.Notice{Conv: "fromb", Seq: 1}
	b.Publish(marker)
	ha.waitUntil(t, "a hears b's notice", func() bool { return ha.has(marker) })
	ha.mu.Lock()
	defer ha.mu.Unlock()
	for _, n := range ha.ns {
		if n.Conv == "froma" {
			t.Errorf("a heard its own notice %+v", n)
		}
	}
	if ha.lost != 0 || hb.lost != 0 {
		t.Errorf("Lost called: a %d, b %d times", ha.lost, hb.lost)
	}
}

// A publisher whose buffer overflows tells the other gateways, which call
// Lost.
func TestBusOverflowAnnounced(t *testing.T) {
	dsn := busDSN(t)
	ch := testChannel()
	sub := newBus(t, dsn, postgres.BusOptions{Channel: ch})
	hs := newHandler()
	run(t, sub, hs)
	ready(t, sub, hs)

	pub := newBus(t, dsn, postgres.BusOptions{Channel: ch, MaxBuffered: 10})
	for i := range 11 { // before Run: all buffered, the 11th overflows
		pub.Publish(parley.Notice{Conv: "dropped", Seq: int64(i + 1)})
	}
	kept := parley.Notice{Conv: "kept", Seq: 1}
	pub.Publish(kept)
	run(t, pub, newHandler())
	hs.waitUntil(t, "Lost, then the notice published after the overflow", func() bool { return hs.lost == 1 && hs.has(kept) })
	for _, n := range hs.ns {
		if n.Conv == "dropped" {
			t.Errorf("dropped notice %+v delivered", n)
		}
	}
}

// Another program notifying on the channel: its payloads are logged and
// skipped, and the bus goes on.
func TestBusSkipsForeignPayloads(t *testing.T) {
	dsn := busDSN(t)
	db := admin(t, dsn)
	ch := testChannel()
	logger, logs := testLogger(t)
	bus := newBus(t, dsn, postgres.BusOptions{Channel: ch, Logger: logger})
	h := newHandler()
	run(t, bus, h)
	ready(t, bus, h)

	foreign := []string{"", "hello", "p1\nbad conv 1", "p1\nc 1 a %", "p3\nc 1", "p2\n+c 1  1 0 m message a d 0  4 bad flags"}
	for _, p := range foreign {
		if _, err := db.Exec(context.Background(), `SELECT pg_notify($1, $2)`, ch, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(context.Background(), `SELECT pg_notify($1, $2)`, ch, "p1\nforeign 7 alice ph%20one"); err != nil {
		t.Fatal(err)
	}
	want := parley.Notice{Conv: "foreign", Seq: 7, User: "alice", Device: "ph one"}
	h.waitUntil(t, "a well-formed payload after malformed ones", func() bool { return h.has(want) })
	if n := strings.Count(logs.String(), "skipped a payload"); n != len(foreign) {
		t.Errorf("%d skipped payloads logged, want %d", n, len(foreign))
	}
	if h.lost != 0 {
		t.Errorf("Lost called %d times", h.lost)
	}
}

// TestBusLatency logs Publish to Notify latency across two buses, at a
// leisurely rate (each notice flushed on its own) and in a burst; what it
// checks is that every notice arrives (speed is for benchmarks: a loaded CI
// machine once took over a second for the median).
func TestBusLatency(t *testing.T) {
	dsn := busDSN(t)
	ch := testChannel()
	pub := newBus(t, dsn, postgres.BusOptions{Channel: ch})
	sub := newBus(t, dsn, postgres.BusOptions{Channel: ch})
	hs := newHandler()
	run(t, pub, newHandler())
	run(t, sub, hs)
	ready(t, pub, hs)

	measure := func(name string, n int, gap time.Duration) {
		sent := make([]time.Time, n)
		for i := range n {
			sent[i] = time.Now()
			pub.Publish(parley.Notice{Conv: name, Seq: int64(i)})
			time.Sleep(gap)
		}
		hs.waitUntil(t, name+" notices", func() bool {
			c := 0
			for _, x := range hs.ns {
				if x.Conv == name {
					c++
				}
			}
			return c == n
		})
		hs.mu.Lock()
		var lat []time.Duration
		for i, x := range hs.ns {
			if x.Conv == name {
				lat = append(lat, hs.at[i].Sub(sent[x.Seq]))
			}
		}
		hs.mu.Unlock()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("%s: %d notices, Publish→Notify p50 %v, p99 %v, max %v", name, n,
			lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	}
	measure("spaced", 200, 10*time.Millisecond)
	measure("burst", 5000, 0)
}
