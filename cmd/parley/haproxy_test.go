package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// haproxyEnv makes the HAProxy tests required: set (CI sets it), a missing
// haproxy binary fails them instead of skipping them.
const haproxyEnv = "PARLEY_TEST_HAPROXY"

// haproxyTemplate is the deployment's configuration, which the tests run.
const haproxyTemplate = "../../docs/deploy/haproxy.cfg"

// haproxyBin finds the haproxy binary, or skips the test with a message
// (fails it when PARLEY_TEST_HAPROXY is set).
func haproxyBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy" // PATH without /usr/sbin
	}
	msg := "HAProxy tests need the haproxy binary (Debian: apt-get install haproxy)"
	if os.Getenv(haproxyEnv) != "" {
		t.Fatalf("%s (required: %s is set)", msg, haproxyEnv)
	}
	t.Skipf("%s; set %s=1 to make this a failure", msg, haproxyEnv)
	return ""
}

// haproxyConfig turns the deployment's configuration into the test's: the
// frontend binds lb, the stats listener stats, the backend's server lines
// become one per gateway (keeping the options of the template's first
// server line), and the process settings of global that need a system
// install (user, group, chroot, daemon, the stats socket, syslog) are
// dropped, with the log sent to stderr instead. Every other line is kept.
func haproxyConfig(tmpl, lb, stats string, gateways []string) (string, error) {
	var out strings.Builder
	section, servers, binds := "", false, 0
	for n, line := range strings.Split(tmpl, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			out.WriteString(line + "\n")
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			section = fields[0]
			if len(fields) > 1 {
				section += " " + fields[1]
			}
			out.WriteString(line + "\n")
			if section == "global" {
				out.WriteString("\tlog stderr format raw local0 info\n")
			}
			continue
		}
		switch {
		case section == "global" && (fields[0] == "user" || fields[0] == "group" || fields[0] == "chroot" ||
			fields[0] == "daemon" || fields[0] == "log" || fields[0] == "stats"):
			continue
		case fields[0] == "bind":
			addr := lb
			if section == "listen stats" {
				addr = stats
			}
			fmt.Fprintf(&out, "\tbind %s %s\n", addr, strings.Join(fields[2:], " "))
			binds++
		case fields[0] == "server" && section == "backend gateways":
			if len(fields) < 3 {
				return "", fmt.Errorf("line %d: server line without an address: %q", n+1, line)
			}
			if servers {
				continue
			}
			servers = true
			for i, g := range gateways {
				fmt.Fprintf(&out, "\tserver gw%d %s %s\n", i, g, strings.Join(fields[3:], " "))
			}
		default:
			out.WriteString(line + "\n")
		}
	}
	if !servers || binds != 2 {
		return "", fmt.Errorf("template: want server lines in backend gateways and two binds (frontend, stats), found servers %v, %d binds", servers, binds)
	}
	return out.String(), nil
}

// freeAddr picks a free port on 127.0.0.1 (HAProxy cannot report the port
// it picked for port 0).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lb is a running haproxy process.
type lb struct {
	url   string // http://127.0.0.1:PORT, the frontend
	stats string // http://127.0.0.1:PORT, the stats listener
	mu    sync.Mutex
	log   bytes.Buffer
}

func (l *lb) logs() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.log.String()
}

// startHAProxy runs haproxy in the foreground on the deployment's
// configuration with the test's addresses, and waits until it sees every
// gateway UP.
func startHAProxy(t *testing.T, gateways []string) *lb {
	t.Helper()
	bin := haproxyBin(t)
	tmpl, err := os.ReadFile(haproxyTemplate)
	if err != nil {
		t.Fatal(err)
	}
	front, stats := freeAddr(t), freeAddr(t)
	cfg, err := haproxyConfig(string(tmpl), front, stats, gateways)
	if err != nil {
		t.Fatalf("%s: %v", haproxyTemplate, err)
	}
	name := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(name, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", name).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, cfg)
	}
	l := &lb{url: "http://" + front, stats: "http://" + stats}
	// -n: the configuration's maxconn sized for production needs more file
	// descriptors than a test machine may give (ulimit -n); the test's few
	// hundred sockets fit in 4,000.
	cmd := exec.Command(bin, "-db", "-n", "4000", "-f", name)
	cmd.Stdout = writerFunc(func(b []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.log.Write(b) })
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("haproxy log (last lines):\n%s", lastLines(l.logs(), 80))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := l.serverStates()
		up := 0
		for _, s := range st {
			if s == "UP" {
				up++
			}
		}
		if err == nil && up == len(gateways) {
			return l
		}
		select {
		case <-done:
			t.Fatalf("haproxy exited:\n%s", l.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy: gateways %v (%v), want all UP\n%s", st, err, l.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serverStates reads the backend's server states (UP, DOWN, NOLB, MAINT,
// "UP 1/2"…) from the stats page's CSV, by server name.
func (l *lb) serverStates() (map[string]string, error) {
	resp, err := http.Get(l.stats + "/;csv")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(body, []byte("# "))))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, fmt.Errorf("stats csv: %v: %.200q", err, body)
	}
	col := -1
	for i, h := range rows[0] {
		if h == "status" {
			col = i
		}
	}
	if col < 0 {
		return nil, fmt.Errorf("stats csv: no status column")
	}
	states := map[string]string{}
	for _, row := range rows[1:] {
		if len(row) > col && row[0] == "gateways" && row[1] != "BACKEND" {
			states[row[1]] = row[col]
		}
	}
	return states, nil
}

// wsConnections reads a gateway's parley_ws_connections gauge.
func wsConnections(ctx context.Context, base string) (int, error) {
	return metricValue(ctx, base, "parley_ws_connections")
}

// metricValue reads an unlabelled metric of a gateway's /metrics.
func metricValue(ctx context.Context, base, name string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s/metrics: no %s (%v)", base, name, sc.Err())
}

// TestHAProxyConfigTemplate: the deployment's configuration keeps what
// WebSockets behind HAProxy need, and is valid as shipped.
func TestHAProxyConfigTemplate(t *testing.T) {
	b, err := os.ReadFile(haproxyTemplate)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, want := range []string{
		"timeout tunnel ",                      // upgraded sockets are tunnels
		"balance leastconn",                    // spreads long-lived sockets
		"http-check send meth GET uri /readyz", // a draining gateway leaves the pool
		"http-check expect status 200",
		"retry-on conn-failure 503", // a dead or draining gateway: try another
		"option redispatch",
		"option forwardfor",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("%s lacks %q", haproxyTemplate, want)
		}
	}
	bin := haproxyBin(t)
	test, err := haproxyConfig(cfg, "127.0.0.1:1", "127.0.0.1:2", []string{"127.0.0.1:3", "127.0.0.1:4"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(test, "\tserver ") != 2 || strings.Contains(test, "10.0.1.") || strings.Contains(test, "\tchroot") {
		t.Errorf("generated configuration:\n%s", test)
	}
	name := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(name, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", name).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c on the generated configuration: %v\n%s", err, out)
	}
}

// TestGatewaysBehindHAProxy: three gateways on one PostgreSQL database,
// on the NATS bus (PARLEY_TEST_NATS; skipped without it) and on the
// default LISTEN/NOTIFY bus, behind a real HAProxy running
// docs/deploy/haproxy.cfg; the load and the
// acceptance check of `parley bench` with every client (sockets and HTTP,
// the admin's too) connected only through HAProxy. Mid-load one gateway is
// killed (SIGKILL) and another drained (SIGTERM): HAProxy must mark each
// DOWN (the drained one within its drain window, by /readyz), their sockets must all land on the survivors (their
// parley_ws_connections add up to every device), the drained one must
// exit 0, and the check must find nothing lost, doubled, reordered or
// leaked.
func TestGatewaysBehindHAProxy(t *testing.T) {
	haproxyBin(t)
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string // extra serve arguments (the bus)
	}{
		{"nats bus", func(t *testing.T) []string {
			u := os.Getenv("PARLEY_TEST_NATS")
			if u == "" {
				t.Skip("PARLEY_TEST_NATS is not set (e.g. nats://127.0.0.1:4222): the NATS bus variant is skipped")
			}
			return []string{"--bus", u}
		}},
		{"postgres bus", func(*testing.T) []string { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bus := tc.args(t)
			db := pgtest.Libpq(pgtest.DSN(t)) // skips without PARLEY_TEST_POSTGRES
			dir := t.TempDir()
			// One key file for every gateway, as docs/deploy.md says: each
			// has a data directory of its own, whose default key would differ.
			key := filepath.Join(dir, "secret.key")
			if err := os.WriteFile(key, secretkey.Generate(), 0o600); err != nil {
				t.Fatal(err)
			}
			runCLI(t, "root-password\n", "user", "add", "root", "--admin", "--password-stdin", "--db", db, "--secret-key-file", key)
			var gws []*proc
			var addrs []string
			for i := range 3 {
				args := append([]string{"--db", db, "--data-dir", filepath.Join(dir, fmt.Sprintf("gw%d", i)),
					"--secret-key-file", key,
					"--export-dir", filepath.Join(dir, "exports"), "--drain-window", drainWindow.String()}, bus...)
				p := serveArgs(t, args...)
				gws = append(gws, p)
				addrs = append(addrs, strings.TrimPrefix(p.http, "http://"))
			}
			l := startHAProxy(t, addrs)
			failoverLoad(t, l, gws)
		})
	}
}

// drainWindow is the gateways' --drain-window in the HAProxy test: longer
// than the 5 s default, so a slow machine still sees the readiness check
// take a draining gateway out before the window ends.
const drainWindow = 10 * time.Second

// failoverLoad runs the bench load through l while it kills gws[0] and
// drains gws[1], and checks where the sockets went.
func failoverLoad(t *testing.T, l *lb, gws []*proc) {
	// Sized for a shared 2-core machine: logging the devices in (argon2,
	// several times slower under the race detector) dominates the setup.
	users, devices, dur, rate := 80, 2, 40*time.Second, 20
	if raceEnabled {
		users, dur, rate = 30, 60*time.Second, 10
	}
	total := users * devices
	killed, drained, survivor := gws[0], gws[1], gws[2]

	// sockets polls the gateways' parley_ws_connections until ok accepts
	// them (true) or ctx or d ends (false, with the last counts).
	sockets := func(ctx context.Context, d time.Duration, ps []*proc, ok func(n []int) bool) ([]int, bool) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		n := make([]int, len(ps))
		for {
			var err error
			for i, p := range ps {
				if n[i], err = wsConnections(ctx, p.http); err != nil {
					break
				}
			}
			if err == nil && ok(n) {
				return n, true
			}
			select {
			case <-ctx.Done():
				return n, false
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	sum := func(n []int) int {
		s := 0
		for _, v := range n {
			s += v
		}
		return s
	}
	down := func(ctx context.Context, server string) string {
		var st map[string]string
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
			st, _ = l.serverStates()
			if strings.HasPrefix(st[server], "DOWN") {
				break
			}
		}
		return st[server]
	}
	var (
		phases   []string
		finished bool
	)
	during := func(ctx context.Context) {
		// Spread: every gateway holds some of the sockets.
		n, ok := sockets(ctx, 10*time.Second, gws, func(n []int) bool { return sum(n) == total && n[0] > 0 && n[1] > 0 && n[2] > 0 })
		phases = append(phases, fmt.Sprintf("before: sockets per gateway %v", n))
		if !ok {
			t.Errorf("sockets per gateway %v, want %d in all, on every gateway (balance leastconn)", n, total)
			return
		}
		time.Sleep(3 * time.Second)

		began := time.Now()
		killed.kill()
		n, ok = sockets(ctx, 30*time.Second, gws[1:], func(n []int) bool { return sum(n) == total })
		phases = append(phases, fmt.Sprintf("gw0 killed: after %v, sockets on gw1, gw2 %v", time.Since(began).Round(time.Millisecond), n))
		if !ok {
			t.Errorf("after the kill, sockets on the survivors %v, want %d in all", n, total)
			return
		}
		if st := down(ctx, "gw0"); !strings.HasPrefix(st, "DOWN") {
			t.Errorf("haproxy: killed gateway gw0 is %q, want DOWN", st)
		}
		time.Sleep(2 * time.Second)

		began = time.Now()
		drained.cmd.Process.Signal(syscall.SIGTERM)
		// Out of the pool by its readiness check, while it still listens
		// (its drain window): not only once it stops accepting, which a
		// plain TCP check would notice too.
		st, took := down(ctx, "gw1"), time.Since(began)
		if !strings.HasPrefix(st, "DOWN") || took >= drainWindow {
			t.Errorf("haproxy: drained gateway gw1 is %q %v after SIGTERM, want DOWN within its drain window (%v: the readiness check on /readyz)", st, took.Round(time.Millisecond), drainWindow)
		}
		phases = append(phases, fmt.Sprintf("gw1 drained: %s in haproxy after %v", st, took.Round(time.Millisecond)))
		n, ok = sockets(ctx, 30*time.Second, gws[2:], func(n []int) bool { return n[0] == total })
		phases = append(phases, fmt.Sprintf("gw1 drained: after %v, sockets on gw2 %v", time.Since(began).Round(time.Millisecond), n))
		if !ok {
			t.Errorf("after the drain, sockets on the last gateway %v, want all %d", n, total)
			return
		}
		select {
		case <-drained.done:
			if drained.err != nil {
				t.Errorf("drained gateway exited with %v, want status 0", drained.err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("drained gateway still running 30s after SIGTERM")
		}
		finished = ctx.Err() == nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep := faultLoad(t, ctx, "through haproxy", loadtest.Config{
		Servers: []string{l.url}, Users: users, DevicesPerUser: devices, Duration: dur, Rate: float64(rate),
		ChurnEvery: 500 * time.Millisecond, DuringLoad: during,
	}, &phases, gws)
	if rep.Devices != total || rep.Committed == 0 || rep.MembershipChanges == 0 {
		t.Fatalf("report: %d devices, %d committed, %d membership changes", rep.Devices, rep.Committed, rep.MembershipChanges)
	}
	if !finished && !t.Failed() {
		t.Fatalf("the load ended before the kill and the drain were done: %v", phases)
	}
	select {
	case <-survivor.done:
		t.Fatalf("the surviving gateway exited: %v", survivor.err)
	default:
	}
	// The survivor heard the others' writes over the bus it was given.
	heard, err := metricValue(ctx, survivor.http, metrics.NameBusReceived)
	if err != nil || heard == 0 {
		t.Fatalf("surviving gateway: %s %d (%v), want notices", metrics.NameBusReceived, heard, err)
	}
	if bad := grepLines(survivor.stderr(), "bus: cannot connect", "bus: connection lost"); bad != "" {
		t.Fatalf("surviving gateway lost its bus:\n%s", bad)
	}
	t.Logf("surviving gateway: %d bus notices received", heard)
}

// faultLoad runs the bench's load (cfg: the servers, its size and the
// faults DuringLoad makes; the mix is the fault tests' own) and logs the
// phases DuringLoad noted and the summary. The test fails when the run
// fails or its acceptance check does not hold (or the test failed
// meanwhile): the device logs and every gateway's warnings are logged then.
func faultLoad(t *testing.T, ctx context.Context, what string, cfg loadtest.Config, phases *[]string, gws []*proc) *loadtest.Report {
	t.Helper()
	var progress bytes.Buffer
	work := t.TempDir()
	cfg.Admin, cfg.AdminPassword = "root", "root-password"
	cfg.Groups, cfg.Directs, cfg.RecallRatio, cfg.ReadRatio, cfg.Settle = []int{10, 25}, true, 0.05, 0.1, time.Minute
	cfg.WorkDir, cfg.Log = work, &progress
	rep, err := loadtest.Run(ctx, cfg)
	for _, p := range *phases {
		t.Log(p)
	}
	if err != nil {
		t.Fatalf("bench run: %v\n%s", err, progress.String())
	}
	var summary bytes.Buffer
	rep.Text(&summary)
	t.Logf("bench %s:\n%s%s", what, progress.String(), summary.String())
	if t.Failed() || !rep.Pass {
		dumpDeviceLogs(t, work, summary.String())
		for i, g := range gws {
			t.Logf("gateway %d warnings and errors:\n%s", i, lastLines(grepLines(g.stderr(), "WARN", "ERROR"), 40))
		}
	}
	if !rep.Pass {
		t.Fatalf("the acceptance check failed with %d violation(s)", rep.ViolationCount)
	}
	return rep
}
