package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

func TestRoutes(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.CreateUser(context.Background(), parley.NewUser{ID: "ana", Password: "password-ana"}); err != nil {
		t.Fatal(err)
	}
	var draining atomic.Bool
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Deps{
		App: app.New(app.Options{Store: s}), Store: s, Gateway: http.NotFoundHandler(), Draining: draining.Load,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		code   parley.Code // problem code, when an error
	}{
		{"healthz", "GET", "/healthz", "", 200, ""},
		{"readyz", "GET", "/readyz", "", 200, ""},
		{"login", "POST", "/api/login", `{"login":"ANA","password":"password-ana","device_id":"d","install_id":"i"}`, 200, ""},
		{"login wrong password", "POST", "/api/login", `{"login":"ana","password":"no","device_id":"d","install_id":"i"}`, 401, parley.CodeUnauthenticated},
		{"login unknown user", "POST", "/api/login", `{"login":"zed","password":"no","device_id":"d","install_id":"i"}`, 401, parley.CodeUnauthenticated},
		{"login not JSON", "POST", "/api/login", `login=ana`, 400, parley.CodeInvalidArgument},
		{"login unknown field", "POST", "/api/login", `{"login":"ana","password":"password-ana","device_id":"d","install_id":"i","x":1}`, 400, parley.CodeInvalidArgument},
		{"login two objects", "POST", "/api/login", `{"login":"ana"}{}`, 400, parley.CodeInvalidArgument},
		{"login too big", "POST", "/api/login", `{"login":"` + strings.Repeat("a", 70000) + `"}`, 400, parley.CodeInvalidArgument},
		{"login no device", "POST", "/api/login", `{"login":"ana","password":"password-ana"}`, 400, parley.CodeInvalidArgument},
		{"logout without token", "POST", "/api/logout", "", 401, parley.CodeUnauthenticated},
		{"unknown API route", "GET", "/api/nope", "", 404, parley.CodeNotFound},
		{"unknown hook route", "GET", "/hooks/", "", 404, parley.CodeNotFound},
		{"wrong method", "GET", "/api/convs/g/messages", "", 405, parley.CodeInvalidArgument},
		{"wrong method on a listing", "PATCH", "/api/convs", "", 405, parley.CodeInvalidArgument},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
		if tt.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p wire.Problem
		if tt.code != "" {
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("%s: Content-Type %q", tt.name, ct)
			}
			json.NewDecoder(resp.Body).Decode(&p)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status || p.Code != tt.code {
			t.Errorf("%s: %d %s (%s), want %d %s", tt.name, resp.StatusCode, p.Code, p.Detail, tt.status, tt.code)
		}
		wantAllow := map[string]string{"/api/convs/g/messages": "POST", "/api/convs": "GET, POST"}
		if allow := resp.Header.Get("Allow"); tt.status == 405 && allow != wantAllow[tt.path] {
			t.Errorf("%s: Allow %q, want %q", tt.name, allow, wantAllow[tt.path])
		}
		if tt.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tt.name)
		}
	}

	draining.Store(true)
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("readyz while draining: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
