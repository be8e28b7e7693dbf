package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/nats"
)

// server is a nats-server process of the test's own, which it kills and
// restarts on the same port: the shared server of PARLEY_TEST_NATS must
// stay up.
type server struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

const serverBin = "/usr/sbin/nats-server"

func newServer(t *testing.T) *server {
	t.Helper()
	if _, err := os.Stat(serverBin); err != nil {
		if os.Getenv("PARLEY_TEST_NATS") != "" {
			t.Fatalf("%s is missing (required: PARLEY_TEST_NATS is set)", serverBin)
		}
		t.Skipf("connection-loss tests need %s (Debian package nats-server)", serverBin)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, port: ln.Addr().(*net.TCPAddr).Port}
	ln.Close()
	t.Cleanup(s.kill)
	return s
}

func (s *server) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(serverBin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.done)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port)); err == nil {
			c.Close()
			return
		}
	}
	s.t.Fatalf("nats-server not listening on port %d after 10s", s.port)
}

// kill ends the server with SIGKILL: no goodbye to its clients.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// handler records notices by conversation and counts Lost calls.
type handler struct {
	mu   sync.Mutex
	seqs map[string][]int64
	lost int
}

func newHandler() *handler { return &handler{seqs: map[string][]int64{}} }

func (h *handler) Notify(ns []parley.Notice) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range ns {
		h.seqs[n.Conv] = append(h.seqs[n.Conv], n.Seq)
	}
}

func (h *handler) Lost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost++
}

func (h *handler) state(conv string) (n, lost int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seqs[conv]), h.lost
}

func run(t *testing.T, b *nats.Bus, h parley.BusHandler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run = %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
}

// eventually polls cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", d, what)
		}
	}
}

// heard publishes on pub, one notice of conv every 20ms, until h has heard
// one of them (the subscriptions are up).
func heard(t *testing.T, pub *nats.Bus, h *handler, conv string) {
	t.Helper()
	before, _ := h.state(conv)
	seq := int64(0)
	eventually(t, 15*time.Second, "no notice of "+conv+" arrived", func() bool {
		seq++
		pub.Publish(parley.Notice{Conv: conv, Seq: seq})
		n, _ := h.state(conv)
		return n > before
	})
}

// A server that dies and comes back: each gateway gets Lost (it polls the
// store for what was missed) and hears notices again, on the
// subscriptions the client restored.
func TestServerRestart(t *testing.T) {
	s := newServer(t)
	s.start()
	o := nats.Options{Prefix: "restart", PingEvery: 200 * time.Millisecond}
	a, b := newBus(t, s.url(), o), newBus(t, s.url(), o)
	a.Interest(parley.Interest{Watch: []string{"c"}})
	b.Interest(parley.Interest{Watch: []string{"c"}})
	ha, hb := newHandler(), newHandler()
	run(t, a, ha)
	run(t, b, hb)
	heard(t, a, hb, "c")
	heard(t, b, ha, "c")
	if _, lost := hb.state("c"); lost != 0 {
		t.Fatalf("Lost called %d times before any failure", lost)
	}

	s.kill()
	time.Sleep(300 * time.Millisecond)
	s.start()
	for _, h := range []*handler{ha, hb} {
		eventually(t, 15*time.Second, "no Lost after the server came back", func() bool {
			_, lost := h.state("c")
			return lost > 0
		})
	}
	heard(t, a, hb, "c")
	heard(t, b, ha, "c")
	if got := b.Subscriptions(); got != 2 { // the shard and PREFIX.lost
		t.Errorf("%d subscriptions after the reconnect, want 2", got)
	}
}

// A server that is down when Run starts is retried, not fatal; once
// connected the gateway gets Lost (others' notices were missed) and hears
// notices, its own published meanwhile included.
func TestServerDownAtStart(t *testing.T) {
	s := newServer(t)
	o := nats.Options{Prefix: "late", Timeout: 500 * time.Millisecond}
	a := newBus(t, s.url(), o)
	a.Interest(parley.Interest{Watch: []string{"c"}})
	ha := newHandler()
	run(t, a, ha)
	time.Sleep(300 * time.Millisecond)
	s.start()
	eventually(t, 15*time.Second, "no Lost once the server was up", func() bool {
		_, lost := ha.state("c")
		return lost > 0
	})
	heard(t, a, ha, "c")
}

// A publisher that dropped notices (here: its buffer overflowed before
// Run) announces the loss with its next send: every gateway, itself
// included, calls Lost, and the notices published after the overflow
// still arrive.
func TestPublisherLossAnnounced(t *testing.T) {
	url := natsURL(t)
	prefix := "t" + parley.NewID()[:12]
	b := newBus(t, url, nats.Options{Prefix: prefix})
	b.Interest(parley.Interest{Watch: []string{"c"}})
	hb := newHandler()
	run(t, b, hb)
	heard(t, b, hb, "c")
	_, lostBefore := hb.state("c")

	a := newBus(t, url, nats.Options{Prefix: prefix, MaxBuffered: 10})
	for i := range 11 { // one more than fits: all ten buffered are dropped
		a.Publish(parley.Notice{Conv: "c", Seq: 1000 + int64(i)})
	}
	a.Publish(parley.Notice{Conv: "c", Seq: 5000})
	ha := newHandler()
	run(t, a, ha) // a watches nothing: it hears only the marker
	for name, h := range map[string]*handler{"the publisher": ha, "the other gateway": hb} {
		eventually(t, 10*time.Second, name+" did not call Lost", func() bool {
			_, lost := h.state("c")
			return lost > lostBefore
		})
	}
	eventually(t, 10*time.Second, "the notice after the overflow did not arrive", func() bool {
		hb.mu.Lock()
		defer hb.mu.Unlock()
		for _, seq := range hb.seqs["c"] {
			if seq >= 1000 && seq < 5000 {
				t.Errorf("dropped notice %d arrived", seq)
			}
			if seq == 5000 {
				return true
			}
		}
		return false
	})
}
