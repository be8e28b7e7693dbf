package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/sqlite"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Each socket gets one access line when it ends, at info, with its user,
// device, duration and close code and reason, whoever closed it.
func TestLifetimeLogLine(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	logs := &lockedBuffer{}
	hub := gateway.New(gateway.Options{Store: s, Bus: inmem.NewBus(), Log: slog.New(slog.NewJSONHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	srv := httptest.NewServer(hub)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done })
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	user(t, s, "ana")

	tests := []struct {
		name   string
		device string
		end    func(c *client)
		code   websocket.StatusCode
		by     string
		reason string
	}{
		{"client closes", "d1", func(c *client) { c.ws.Close(websocket.StatusNormalClosure, "bye") }, websocket.StatusNormalClosure, "client", "bye"},
		{"frame too big", "d2", func(c *client) {
			c.raw(websocket.MessageText, []byte(`{"t":"sync","pad":"`+strings.Repeat("x", parley.MaxFrameBytes)+`"}`))
		}, websocket.StatusMessageTooBig, "server", "frame over the size limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess := login(t, s, "ana", tt.device, "i1")
			c := dial(t, url, sess.Token)
			c.do(map[string]any{"t": "sub"})
			tt.end(c)
			var line map[string]any
			deadline := time.Now().Add(5 * time.Second)
			for line == nil {
				if time.Now().After(deadline) {
					t.Fatalf("no lifetime line for device %s:\n%s", tt.device, logs.String())
				}
				time.Sleep(10 * time.Millisecond)
				sc := bufio.NewScanner(strings.NewReader(logs.String()))
				for sc.Scan() {
					var l map[string]any
					if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
						t.Fatalf("log line is not JSON: %q", sc.Text())
					}
					if l["msg"] == "ws connection" && l["device"] == tt.device {
						line = l
					}
				}
			}
			want := map[string]any{
				"level": "INFO", "route": "GET /ws", "user": "ana", "close_code": float64(tt.code),
				"closed_by": tt.by, "close_reason": tt.reason,
			}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v (line %v)", k, line[k], v, line)
				}
			}
			if d, ok := line["duration_ms"].(float64); !ok || d < 0 {
				t.Errorf("duration_ms %v in %v", line["duration_ms"], line)
			}
		})
	}
}
