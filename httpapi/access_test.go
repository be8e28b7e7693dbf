package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/sqlite"
)

// logLine is one JSON log line (slog.JSONHandler).
type logLine map[string]any

func jsonLines(t *testing.T, text string) []logLine {
	t.Helper()
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

func openSQLite(t *testing.T) parley.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Every request gets one access line, at info, with the route template
// (not the path), the status, the user and the request id its response
// carries; refusals (401, 403) included; a login is logged without its
// password.
func TestAccessLogOneLinePerRequest(t *testing.T) {
	s := start(t, openSQLite(t), serverOptions{jsonLog: true})
	ben := s.user("ben", parley.RoleUser)
	tests := []struct {
		name, method, path, token string
		body                      any
		route                     string
		status                    int
		user                      string
	}{
		{"login", "POST", "/api/login", "", map[string]string{"login": "ben", "password": "password-ben", "device_id": "d2", "install_id": "i2"}, "POST /api/login", 200, "ben"},
		{"failed login", "POST", "/api/login", "", map[string]string{"login": "ben", "password": "wrong-password", "device_id": "d2", "install_id": "i2"}, "POST /api/login", 401, ""},
		{"read", "GET", "/api/convs/c-x/events?after=0", ben, nil, "GET /api/convs/{id}/events", 404, "ben"},
		{"anonymous", "GET", "/api/convs", "", nil, "GET /api/convs", 401, ""},
		{"not admin", "GET", "/api/admin/audit", ben, nil, "GET /api/admin/audit", 403, "ben"},
		{"list", "GET", "/api/convs", ben, nil, "GET /api/convs", 200, "ben"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, tt.path, tt.token, tt.body)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			id := r.header.Get(middleware.RequestIDHeader)
			if id == "" {
				t.Fatal("no X-Request-Id on the response")
			}
			var got []logLine
			eventually(t, "the access line", func() bool {
				got = nil
				for _, l := range jsonLines(t, s.logs.String()) {
					if l["msg"] == "http request" && l["request_id"] == id {
						got = append(got, l)
					}
				}
				return len(got) > 0
			})
			if len(got) != 1 {
				t.Fatalf("%d access lines for request %s, want 1: %v", len(got), id, got)
			}
			l := got[0]
			want := map[string]any{"level": "INFO", "method": tt.method, "route": tt.route, "status": float64(tt.status), "user": tt.user}
			for k, v := range want {
				if l[k] != v {
					t.Errorf("%s = %v, want %v (line %v)", k, l[k], v, l)
				}
			}
			if _, ok := l["duration_ms"].(float64); !ok {
				t.Errorf("no duration_ms in %v", l)
			}
		})
	}
	logs := s.logs.String()
	if strings.Contains(logs, "wrong-password") || strings.Contains(logs, "password-ben") {
		t.Errorf("a password reached the log:\n%s", logs)
	}
	var logins, failed int
	for _, l := range jsonLines(t, logs) {
		switch {
		case l["msg"] == "login" && l["user"] == "ben" && l["level"] == "INFO":
			logins++
		case l["msg"] == "login failed" && l["login"] == "ben" && l["level"] == "INFO":
			failed++
		}
	}
	if logins < 2 || failed != 1 {
		t.Errorf("%d login lines (want 2: setup and test) and %d failed-login lines (want 1):\n%s", logins, failed, logs)
	}
}

// hangingStore answers Convs only when the caller's context ends, as a
// slow database does, with the driver's wrapped context error.
type hangingStore struct {
	parley.Store
	entered chan struct{}
}

func (h *hangingStore) Convs(ctx context.Context, p parley.Principal, r parley.ConvsRequest) (parley.ConvsPage, error) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return parley.ConvsPage{}, fmt.Errorf("sqlite: convs: %w", ctx.Err())
}

// A client that hangs up mid-request is not an internal error: no ERROR
// line, and its access line says 499.
func TestClientHangUpIsNotAnError(t *testing.T) {
	store := &hangingStore{Store: openSQLite(t), entered: make(chan struct{}, 1)}
	s := start(t, store, serverOptions{jsonLog: true})
	ben := s.user("ben", parley.RoleUser)

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/api/convs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ben)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-store.entered
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request was answered; want it canceled")
	}
	var access logLine
	eventually(t, "the access line of the canceled request", func() bool {
		for _, l := range jsonLines(t, s.logs.String()) {
			if l["msg"] == "http request" && l["route"] == "GET /api/convs" {
				access = l
				return true
			}
		}
		return false
	})
	if access["status"] != float64(middleware.StatusClientClosed) || access["level"] != "INFO" {
		t.Errorf("access line %v, want status 499 at INFO", access)
	}
	for _, l := range jsonLines(t, s.logs.String()) {
		if l["level"] == "ERROR" {
			t.Errorf("ERROR line for a client that hung up: %v", l)
		}
	}
}

// A WebSocket behind the chain gets one line, the gateway's, when it ends:
// with the upgrade's request id and the close code, and no access line for
// the 101.
func TestAccessLogWebSocket(t *testing.T) {
	s := start(t, openSQLite(t), serverOptions{jsonLog: true})
	ben := s.user("ben", parley.RoleUser)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + ben}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Header.Get(middleware.RequestIDHeader)
	if id == "" {
		t.Fatal("no X-Request-Id on the upgrade")
	}
	ws.Close(websocket.StatusNormalClosure, "done")
	var lines []logLine
	eventually(t, "the socket's line", func() bool {
		lines = nil
		for _, l := range jsonLines(t, s.logs.String()) {
			if l["request_id"] == id {
				lines = append(lines, l)
			}
		}
		return len(lines) > 0
	})
	if len(lines) != 1 || lines[0]["msg"] != "ws connection" || lines[0]["close_code"] != float64(websocket.StatusNormalClosure) ||
		lines[0]["close_reason"] != "done" || lines[0]["user"] != "ben" || lines[0]["level"] != "INFO" {
		t.Errorf("lines for the socket: %v; want one ws connection line, close 1000 \"done\", user ben, at INFO", lines)
	}
}
