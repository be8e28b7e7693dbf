package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// TestDrainWindow: after SIGTERM the server keeps listening for the drain
// window. An open socket gets goaway and its new requests UNAVAILABLE;
// /readyz and a new upgrade answer 503 UNAVAILABLE with Retry-After (not a
// refused connection); other requests are still answered, on connections
// closed after the response. The window ends by itself or at a second
// signal, and the process exits 0.
func TestDrainWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window string
		second bool // end the window with a second SIGTERM
	}{
		// A window far longer than the test: only the second signal ends it.
		{name: "second signal ends the window", window: "10m", second: true},
		{name: "window ends by itself", window: "300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := serveArgs(t, "--demo", "--drain-window", tc.window, "--data-dir", filepath.Join(dir, "data"))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			token := demoToken(t, p.http, "ben")
			hdr := http.Header{"Authorization": {"Bearer " + token}}
			sock, _, err := websocket.Dial(ctx, p.ws, &websocket.DialOptions{HTTPHeader: hdr})
			if err != nil {
				t.Fatal(err)
			}
			defer sock.CloseNow()
			var end error
			in := frames(ctx, sock, &end)
			// The socket is registered once a request on it is answered.
			if err := sock.Write(ctx, websocket.MessageText, []byte(`{"t":"convs","rid":0}`)); err != nil {
				t.Fatal(err)
			}
			if f := readUntil(t, in, &end, func(f wire.Frame) bool { return string(f.RID) == "0" }); f.T == wire.TError {
				t.Fatalf("convs before the drain: %+v", f)
			}

			p.cmd.Process.Signal(syscall.SIGTERM)
			readUntil(t, in, &end, func(f wire.Frame) bool { return f.T == wire.TGoaway })
			if !tc.second {
				if err := p.waitExit(30 * time.Second); err != nil {
					t.Fatalf("exit after the drain window: %v, want status 0", err)
				}
				return
			}

			// The open socket: a new request is refused, retryable.
			if err := sock.Write(ctx, websocket.MessageText, []byte(`{"t":"convs","rid":1}`)); err != nil {
				t.Fatal(err)
			}
			if f := readUntil(t, in, &end, func(f wire.Frame) bool { return string(f.RID) == "1" }); f.Code != parley.CodeUnavailable {
				t.Errorf("a request after goaway: %+v, want code UNAVAILABLE", f)
			}
			// The listener: still open, not ready, refusing upgrades.
			for _, c := range []struct {
				name   string
				path   string
				token  string
				status int
			}{
				{"readiness", "/readyz", "", http.StatusServiceUnavailable},
				{"new upgrade", "/ws", token, http.StatusServiceUnavailable},
				{"liveness", "/healthz", "", http.StatusOK},
				{"API request", "/api/convs", token, http.StatusOK},
			} {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.http+c.path, nil)
				if c.token != "" {
					req.Header.Set("Authorization", "Bearer "+c.token)
				}
				if c.path == "/ws" {
					req.Header.Set("Connection", "Upgrade")
					req.Header.Set("Upgrade", "websocket")
					req.Header.Set("Sec-WebSocket-Version", "13")
					req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("%s during the drain window: %v (want an answer, not a refused connection)", c.name, err)
					continue
				}
				var prob wire.Problem
				json.NewDecoder(resp.Body).Decode(&prob)
				resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Errorf("%s during the drain window: %d, want %d", c.name, resp.StatusCode, c.status)
				}
				if c.status == http.StatusServiceUnavailable && (prob.Code != parley.CodeUnavailable || resp.Header.Get("Retry-After") == "") {
					t.Errorf("%s during the drain window: code %q, Retry-After %q; want UNAVAILABLE with Retry-After", c.name, prob.Code, resp.Header.Get("Retry-After"))
				}
				if !resp.Close {
					t.Errorf("%s during the drain window: connection kept alive, want it closed after the response", c.name)
				}
			}

			p.cmd.Process.Signal(syscall.SIGTERM)
			if err := p.waitExit(30 * time.Second); err != nil {
				t.Fatalf("exit after the second signal: %v, want status 0", err)
			}
			// The socket was closed by the server, going away.
			for range in { // the frames left before the close
			}
			if st := websocket.CloseStatus(end); st != websocket.StatusGoingAway {
				t.Errorf("socket closed with %v (%v), want 1001 going away", st, end)
			}
			if !strings.Contains(p.stderr(), "drain window ended early") {
				t.Errorf("the log does not say the second signal ended the window:\n%s", p.stderr())
			}
		})
	}
}

// frames reads sock's frames into a channel, closed when the socket ends;
// *end then holds the read error. Reading all along lets the server's
// close handshake finish at once.
func frames(ctx context.Context, sock *websocket.Conn, end *error) <-chan wire.Frame {
	ch := make(chan wire.Frame, 64)
	go func() {
		defer close(ch)
		for {
			_, b, err := sock.Read(ctx)
			if err != nil {
				*end = err
				return
			}
			var f wire.Frame
			if err := json.Unmarshal(b, &f); err != nil {
				*end = fmt.Errorf("frame %q: %w", b, err)
				return
			}
			ch <- f
		}
	}()
	return ch
}

// readUntil returns the first frame from ch that ok accepts.
func readUntil(t *testing.T, ch <-chan wire.Frame, end *error, ok func(wire.Frame) bool) wire.Frame {
	t.Helper()
	for f := range ch {
		if ok(f) {
			return f
		}
	}
	t.Fatalf("socket ended: %v", *end)
	return wire.Frame{}
}
