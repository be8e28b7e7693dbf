package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// TestCommands drives run() as a shell would: migrate, user add, user
// disable, and the usage errors (exit status 2).
func TestCommands(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "sub", "parley.db")
	env := map[string]string{}
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
	if _, err := cmd("other\n", "user", "add", "dan", "--password-stdin"); parley.ErrorCode(err) != parley.CodeAlreadyExists {
		t.Fatalf("second user add: %v, want ALREADY_EXISTS", err)
	}
	s := backend{name: "sqlite", db: db}.store(t)
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
