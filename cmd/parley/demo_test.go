package main

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLoopbackAddr: --demo's check accepts only listen addresses reachable
// from this host alone.
func TestLoopbackAddr(t *testing.T) {
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.0.0.2:0", true},
		{"[::1]:8080", true},
		{"[::ffff:127.0.0.1]:8080", true},
		{"localhost:8080", true},
		{"0.0.0.0:0", false},
		{":8080", false},
		{"[::]:8080", false},
		{"192.168.1.5:8080", false},
		{"chat.example.com:8080", false},
		{"127.0.0.1", false}, // no port: not an address serve can use
	} {
		if got := loopbackAddr(c.addr); got != c.want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", c.addr, got, c.want)
		}
	}
}

// TestDemoLoopbackOnly: `serve --demo` on an address other hosts can reach
// exits with status 2 and one line saying why, before anything opens; on
// loopback it warns at start; PARLEY_DEMO turns nothing on.
func TestDemoLoopbackOnly(t *testing.T) {
	dir := t.TempDir()
	args := []string{"serve", "--demo", "--addr", "0.0.0.0:0", "--data-dir", dir}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("parley %q: %v, want exit status 2; stderr %q", args, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "--demo") || !strings.Contains(stderr.String(), "loopback") {
		t.Errorf("stderr %q, want a line naming --demo and loopback", stderr.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the refused start created %d files in the data directory", len(entries))
	}

	p := serveArgs(t, "--demo")
	if !strings.Contains(p.stderr(), "--demo: demo accounts") {
		t.Errorf("no --demo warning at start; stderr:\n%s", p.stderr())
	}
	// The sign-in page learns whom to sign in as; a server without --demo
	// names nobody.
	if st, got := get(t, p.http+"/api/server"); st != http.StatusOK || strings.TrimSpace(got) != `{"demo":{"users":["ana","ben","cy"],"password":"parley-demo"},"recall_window_ms":600000}` {
		t.Errorf("GET /api/server with --demo: %d %s", st, got)
	}

	// The environment cannot turn it on: no demo user appears.
	q := serveEnv(t, []string{"PARLEY_DEMO=true"})
	body := strings.NewReader(`{"login":"ana","password":"parley-demo","device_id":"d1","install_id":"i1"}`)
	resp, err := http.Post(q.http+"/api/login", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(q.stderr(), "--demo") {
		t.Errorf("with PARLEY_DEMO=true: demo login %d, want 401 (no demo user); stderr:\n%s", resp.StatusCode, q.stderr())
	}
	if st, got := get(t, q.http+"/api/server"); st != http.StatusOK || strings.TrimSpace(got) != `{"recall_window_ms":600000}` {
		t.Errorf("GET /api/server without --demo: %d %s", st, got)
	}
}

// TestMetricsFromAnotherAddress: a real connection to the public listener
// from an address of this host that is not loopback gets 404 on /metrics,
// while loopback reads it.
func TestMetricsFromAnotherAddress(t *testing.T) {
	var other netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			other = p.Addr()
			break
		}
	}
	if !other.IsValid() {
		t.Skip("this host has no IPv4 address besides loopback")
	}
	p := serveArgs(t, "--addr", "0.0.0.0:0")
	_, port, err := net.SplitHostPort(strings.TrimPrefix(p.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		want int
	}{
		{"127.0.0.1", http.StatusOK},
		{other.String(), http.StatusNotFound},
	} {
		resp, err := http.Get("http://" + net.JoinHostPort(c.host, port) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET /metrics via %s: %d, want %d", c.host, resp.StatusCode, c.want)
		}
	}
}
