package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// TestCommands drives run() as a shell would: migrate, user add, user
// disable, and the usage errors (exit status 2).
func TestCommands(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "sub", "parley.db")
	env := map[string]string{"PARLEY_SECRET_KEY_FILE": testKeyFile()} // the key of backend.store
	getenv := func(k string) string { return env[k] }
	cmd := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"parley"}, args...), getenv, strings.NewReader(stdin), &out, &out)
		return out.String(), err
	}
	if out, err := cmd("", "migrate", "--db", db); err != nil || !strings.Contains(out, "migrated") {
		t.Fatalf("migrate: %q %v", out, err)
	}
	if out, err := cmd("s3cret-pass\n", "user", "add", "dan", "--email", "Dan@Example.com", "--admin", "--password-stdin", "--db", db); err != nil || !strings.Contains(out, "created user dan (admin)") {
		t.Fatalf("user add: %q %v", out, err)
	}
	// The DSN from the environment, as PARLEY_DB.
	env["PARLEY_DB"] = db
	if _, err := cmd("other-password\n", "user", "add", "dan", "--password-stdin"); parley.ErrorCode(err) != parley.CodeAlreadyExists {
		t.Fatalf("second user add: %v, want ALREADY_EXISTS", err)
	}
	// A password under 8 characters is refused, and nobody is created.
	if _, err := cmd("short7!\n", "user", "add", "eve", "--password-stdin"); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Fatalf("user add with a 7-character password: %v, want INVALID_ARGUMENT", err)
	}
	s := backend{name: "sqlite", db: db}.store(t)
	if _, err := s.User(context.Background(), "eve"); parley.ErrorCode(err) != parley.CodeNotFound {
		t.Fatalf("eve after a refused user add: %v, want NOT_FOUND", err)
	}
	if _, err := s.Login(context.Background(), parley.LoginRequest{Login: "dan@example.com", Password: "s3cret-pass", DeviceID: "d", InstallID: "i"}); err != nil {
		t.Fatalf("login as the added user: %v", err)
	}
	if out, err := cmd("", "user", "disable", "dan"); err != nil || !strings.Contains(out, "disabled user dan") {
		t.Fatalf("user disable: %q %v", out, err)
	}
	if _, err := s.Login(context.Background(), parley.LoginRequest{Login: "dan", Password: "s3cret-pass", DeviceID: "d", InstallID: "i"}); parley.ErrorCode(err) != parley.CodeUnauthenticated {
		t.Fatalf("login after disable: %v, want UNAUTHENTICATED", err)
	}
	if _, err := cmd("", "user", "disable", "nobody"); parley.ErrorCode(err) != parley.CodeNotFound {
		t.Fatalf("disable unknown: %v, want NOT_FOUND", err)
	}

	usage := [][]string{
		{},
		{"frobnicate"},
		{"serve", "--no-such-flag"},
		{"serve", "extra"},
		{"serve", "--db", "mysql://x"},
		{"serve", "--send-budget", "100"},
		{"serve", "--user-sockets", "0"},
		{"serve", "--heap-floor", "-1"},
		{"serve", "--push-delay", "-1s"},
		{"serve", "--token-idle", "1m"},
		{"serve", "--stale-install-grace", "0s"},
		{"serve", "--token-max", "24h"}, // under --token-idle's 720h
		{"serve", "--token-sweep", "10ms"},
		{"user"},
		{"user", "rename", "x"},
		{"user", "add", "eve"},              // no --password-stdin
		{"user", "add", "--password-stdin"}, // no id
		{"migrate", "extra"},
	}
	for _, args := range usage {
		var ue usageError
		if _, err := cmd("pw\n", args...); !errors.As(err, &ue) {
			t.Errorf("parley %q: %v, want a usage error (exit 2)", args, err)
		}
	}
	env["PARLEY_ADDR"] = "not an address"
	if _, err := cmd("", "serve", "--db", db); err == nil {
		t.Error("serve on a bad PARLEY_ADDR started")
	}
}

// TestServeDemo: the quick start. `parley serve --demo` on a fresh data
// directory creates the demo users and group; the README's login works;
// a second start on the same directory keeps them.
func TestServeDemo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "parley-data")
	for round := range 2 {
		p := serveArgs(t, "--demo", "--data-dir", dir)
		resp, err := http.Post(p.http+"/api/login", "application/json", strings.NewReader(`{"login":"ben","password":"parley-demo","device_id":"laptop","install_id":"i1"}`))
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ User, DeviceID, Token string }
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || got.User != "ben" || got.Token == "" {
			t.Fatalf("round %d: login %d %+v", round, resp.StatusCode, got)
		}
		if c := resp.Cookies(); len(c) != 1 || c[0].Name != wire.SessionCookie || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
			t.Fatalf("login cookie %+v", c)
		}
		ready, err := http.Get(p.http + "/readyz")
		if err != nil || ready.StatusCode != http.StatusOK {
			t.Fatalf("readyz: %v %v", ready, err)
		}
		ready.Body.Close()
		bad, _ := http.Post(p.http+"/api/login", "application/json", strings.NewReader(`{"login":"ben","password":"wrong","device_id":"laptop","install_id":"i1"}`))
		var prob wire.Problem
		json.NewDecoder(bad.Body).Decode(&prob)
		bad.Body.Close()
		if bad.StatusCode != http.StatusUnauthorized || prob.Code != parley.CodeUnauthenticated || bad.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("bad login: %d %+v", bad.StatusCode, prob)
		}
		// Logout revokes the token: a socket open with it is ended at once,
		// and the next upgrade with it is refused.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sock, _, err := websocket.Dial(ctx, p.ws, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + got.Token}}})
		if err != nil {
			t.Fatal(err)
		}
		defer sock.CloseNow()
		req, _ := http.NewRequest(http.MethodPost, p.http+"/api/logout", nil)
		req.Header.Set("Authorization", "Bearer "+got.Token)
		out, err := http.DefaultClient.Do(req)
		if err != nil || out.StatusCode != http.StatusNoContent {
			t.Fatalf("logout: %v %v", out, err)
		}
		out.Body.Close()
		_, b, err := sock.Read(ctx)
		if f, _ := wire.DecodeFrame(b); err != nil || f.Code != parley.CodeUnauthenticated {
			t.Fatalf("open socket after logout: %s %v, want an UNAUTHENTICATED frame", b, err)
		}
		if _, _, err := sock.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("open socket after logout: %v, want close 1008", err)
		}
		ws, _ := http.NewRequest(http.MethodGet, p.http+"/ws", nil)
		ws.Header.Set("Authorization", "Bearer "+got.Token)
		if r, err := http.DefaultClient.Do(ws); err != nil || r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("upgrade after logout: %v %v, want 401", r, err)
		} else {
			r.Body.Close()
		}
		p.kill()
	}
}

// TestServeConfig: `parley serve --config FILE` enforces the file's policy
// and reloads it while running (a real process, a real file); a file that
// does not parse is refused at start and kept out while running; /metrics
// shows the gateway's sockets and the reloads.
func TestServeConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "parley.yaml")
	write := func(text string) {
		t.Helper()
		tmp := cfg + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	write("rate_limits:\n  login: {limit: 2, window: 1h}\n  sned: {limit: 1}\n")
	p := serveEnv(t, []string{"PARLEY_CONFIG=" + cfg}, "--demo", "--data-dir", filepath.Join(dir, "data"))
	for warned := time.Now().Add(5 * time.Second); !strings.Contains(p.stderr(), "rate_limits.sned is used by no route"); {
		if time.Now().After(warned) { // stderr is copied apart from stdout: give it a moment
			t.Fatalf("no warning about the misspelt bucket; log:\n%s", p.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	login := func() int {
		resp, err := http.Post(p.http+"/api/login", "application/json", strings.NewReader(`{"login":"ana","password":"parley-demo","device_id":"d","install_id":"i"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, want := range []int{200, 200, 429} {
		if got := login(); got != want {
			t.Fatalf("login %d: %d, want %d", i+1, got, want)
		}
	}
	write("rate_limits:\n  login: {limit: 0}\n")
	deadline := time.Now().Add(10 * time.Second)
	for login() != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the new configuration never took effect")
		}
		time.Sleep(50 * time.Millisecond)
	}
	write("rate_limits: {login: [broken\n")
	for !strings.Contains(scrape(t, p.http), `parley_config_reloads_total{result="error"} 1`) {
		if time.Now().After(deadline) {
			t.Fatal("the broken file was not counted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := login(); got != 200 {
		t.Errorf("login after a broken file: %d, want the last good configuration (no limit)", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	token := demoToken(t, p.http, "ben")
	sock, _, err := websocket.Dial(ctx, p.ws, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.CloseNow()
	// The socket is counted once the server has registered it, a moment
	// after the client's handshake returns.
	for m := scrape(t, p.http); !strings.Contains(m, "parley_ws_connections 1") || !strings.Contains(m, `parley_config_reloads_total{result="ok"} 1`); m = scrape(t, p.http) {
		if time.Now().After(deadline) {
			t.Fatalf("metrics:\n%s", grepLines(m, "parley_ws_connections", "parley_config_reloads_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()

	// A broken file at start: refused, with one line naming the flag.
	var out bytes.Buffer
	err = run(context.Background(), []string{"parley", "serve", "--addr", "127.0.0.1:0", "--config", cfg, "--db", "sqlite:" + filepath.Join(dir, "x.db")},
		func(string) string { return "" }, strings.NewReader(""), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("serve with a broken --config: %v", err)
	}
}

// TestServeSocketBounds: serve wires the per-user socket cap (from its
// environment variable) and the frame rate limits (read bucket from the
// configuration file) into the gateway.
func TestServeSocketBounds(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "parley.yaml")
	if err := os.WriteFile(cfg, []byte("rate_limits:\n  read: {limit: 2, window: 1h}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := serveEnv(t, []string{"PARLEY_USER_SOCKETS=1"}, "--demo", "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hdr := http.Header{"Authorization": {"Bearer " + demoToken(t, p.http, "ben")}}
	sock, _, err := websocket.Dial(ctx, p.ws, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.CloseNow()
	_, resp, err := websocket.Dial(ctx, p.ws, &websocket.DialOptions{HTTPHeader: hdr})
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a second socket with --user-sockets 1: %v %v", resp, err)
	}
	var codes []parley.Code
	for i := range 3 {
		if err := sock.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"t":"convs","rid":%d}`, i)); err != nil {
			t.Fatal(err)
		}
		_, b, err := sock.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f, err := wire.DecodeFrame(b)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, f.Code)
	}
	if want := []parley.Code{"", "", parley.CodeRateLimited}; !slices.Equal(codes, want) {
		t.Errorf("three convs frames with read limited to 2: %v, want %v", codes, want)
	}
}

// demoToken logs a demo user in and returns the token.
func demoToken(t *testing.T, base, user string) string {
	t.Helper()
	resp, err := http.Post(base+"/api/login", "application/json", strings.NewReader(`{"login":"`+user+`","password":"parley-demo","device_id":"d","install_id":"i"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Token string }
	json.NewDecoder(resp.Body).Decode(&got)
	if got.Token == "" {
		t.Fatalf("login %s: %d", user, resp.StatusCode)
	}
	return got.Token
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestSharedRateLimit: with the shared_rate_limit switch on, two server
// processes on one store share one Redis budget, so the limit holds across
// the cluster and not per instance. Needs PARLEY_TEST_REDIS.
func TestSharedRateLimit(t *testing.T) {
	url := os.Getenv("PARLEY_TEST_REDIS")
	if url == "" {
		t.Skip("set PARLEY_TEST_REDIS=redis://127.0.0.1:6379/0 to run the shared rate-limit test")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	clear := func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, "parley:rl:login:*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}
	clear()
	t.Cleanup(clear)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "parley.yaml")
	text := "switches: {shared_rate_limit: true}\nrate_limit_store: {redis: \"" + url + "\"}\nrate_limits:\n  login: {limit: 4, window: 1m}\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	db := "sqlite:" + filepath.Join(dir, "parley.db")
	a := serveArgs(t, "--config", cfg, "--db", db, "--demo")
	b := serveArgs(t, "--config", cfg, "--db", db)
	allowed := 0
	for i := range 10 {
		base := a.http
		if i%2 == 1 {
			base = b.http
		}
		resp, err := http.Post(base+"/api/login", "application/json", strings.NewReader(`{"login":"cy","password":"parley-demo","device_id":"d","install_id":"i"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("login %d: %d", i, resp.StatusCode)
		}
	}
	if allowed != 4 {
		t.Errorf("%d of 10 logins across two servers allowed, want 4 (one shared budget)", allowed)
	}
}
