package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley/loadtest"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/secretkey"
)

// natsServer is a nats-server process the test runs on a port of its own,
// so it can kill and restart it without touching the shared one.
type natsServer struct {
	t    *testing.T
	bin  string
	addr string // 127.0.0.1:PORT, kept across restarts
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer
}

// startNATS runs nats-server on a free port; the test ends it. It needs
// the nats-server binary, which a machine that runs the NATS tests has
// (.ci/run installs it).
func startNATS(t *testing.T) *natsServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/nats-server"); err != nil {
			t.Fatal("PARLEY_TEST_NATS is set but no nats-server binary is installed (apt-get install nats-server)")
		}
		bin = "/usr/sbin/nats-server"
	}
	n := &natsServer{t: t, bin: bin, addr: freeAddr(t)}
	n.start()
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			t.Logf("nats-server log (last lines):\n%s", lastLines(n.logs(), 40))
		}
	})
	return n
}

func (n *natsServer) url() string { return "nats://" + n.addr }

func (n *natsServer) logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

// start runs the server and waits until its port accepts.
func (n *natsServer) start() {
	host, port, _ := net.SplitHostPort(n.addr)
	cmd := exec.Command(n.bin, "-a", host, "-p", port)
	cmd.Stdout = writerFunc(func(b []byte) (int, error) { n.mu.Lock(); defer n.mu.Unlock(); return n.log.Write(b) })
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		n.t.Error(err)
		return
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", n.addr); err == nil {
			c.Close()
			return
		}
	}
	n.t.Errorf("nats-server did not listen on %s", n.addr)
}

// kill ends the server with SIGKILL and waits for it.
func (n *natsServer) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// TestNATSRestart: three gateways on PostgreSQL and a NATS server of the
// test's own carry a load while the NATS server is killed with SIGKILL and
// started again at once, then killed and kept down for 10 s. The bus is not
// on the send path, and a gateway that loses it reads the store for what
// the bus would have said (the loss handling of the PostgreSQL bus), so the
// acceptance check holds: nothing lost, nothing doubled, every device
// caught up; and the bus carries notices again after the last restart.
func TestNATSRestart(t *testing.T) {
	if os.Getenv("PARLEY_TEST_NATS") == "" {
		t.Skip("PARLEY_TEST_NATS is not set (e.g. nats://127.0.0.1:4222): the NATS restart test is skipped")
	}
	db := pgtest.Libpq(pgtest.DSN(t)) // skips without PARLEY_TEST_POSTGRES
	nats := startNATS(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "secret.key")
	if err := os.WriteFile(key, secretkey.Generate(), 0o600); err != nil {
		t.Fatal(err)
	}
	runCLI(t, "root-password\n", "user", "add", "root", "--admin", "--password-stdin", "--db", db, "--secret-key-file", key)
	var gws []*proc
	var urls []string
	for i := range 3 {
		p := serveArgs(t, "--db", db, "--data-dir", filepath.Join(dir, fmt.Sprintf("gw%d", i)), "--secret-key-file", key,
			"--export-dir", filepath.Join(dir, "exports"), "--files-dir", filepath.Join(dir, "files"), "--bus", nats.url())
		gws = append(gws, p)
		urls = append(urls, p.http)
	}
	users, devices, dur, rate := 60, 2, 40*time.Second, 20
	if raceEnabled {
		users, dur, rate = 30, 50*time.Second, 10
	}
	var phases []string
	var heard []int // each gateway's bus notices when NATS came back the last time
	finished := false
	during := func(ctx context.Context) {
		pause := func(d time.Duration) bool {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(d):
				return true
			}
		}
		if !pause(4 * time.Second) {
			return
		}
		nats.kill()
		nats.start()
		phases = append(phases, "NATS killed and started again")
		if !pause(6 * time.Second) {
			return
		}
		nats.kill()
		phases = append(phases, "NATS killed, down for 10 s")
		if !pause(10 * time.Second) {
			return
		}
		nats.start()
		phases = append(phases, "NATS started again")
		for _, g := range gws {
			n, _ := metricValue(ctx, g.http, metrics.NameBusReceived)
			heard = append(heard, n)
		}
		finished = pause(8 * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep := faultLoad(t, ctx, "across a NATS restart", loadtest.Config{
		Servers: urls, Users: users, DevicesPerUser: devices, Duration: dur, Rate: float64(rate),
		ChurnEvery: time.Second, DuringLoad: during,
	}, &phases, gws)
	if !finished {
		t.Fatalf("the load ended before the restarts were done: %v", phases)
	}
	if rep.Devices != users*devices || rep.Committed == 0 {
		t.Fatalf("report: %d devices, %d committed", rep.Devices, rep.Committed)
	}
	for i, g := range gws {
		if !strings.Contains(g.stderr(), "bus: connection lost") {
			t.Errorf("gateway %d never noticed the NATS server go away; its warnings:\n%s", i, lastLines(grepLines(g.stderr(), "WARN", "ERROR"), 20))
		}
		// The bus carries notices again: not only the store polls.
		if n, err := metricValue(ctx, g.http, metrics.NameBusReceived); err != nil || n <= heard[i] {
			t.Errorf("gateway %d: %s %d after the last restart, %d before (%v): the bus did not come back", i, metrics.NameBusReceived, n, heard[i], err)
		}
	}
}
