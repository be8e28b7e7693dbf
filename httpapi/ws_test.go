package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley/wire"
)

// wsClient is a subscribed WebSocket client of the test server.
type wsClient struct {
	t  *testing.T
	ws *websocket.Conn
}

// dialWS opens a socket with token and subscribes it.
func dialWS(t *testing.T, s *server, token string) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	c := &wsClient{t: t, ws: ws}
	c.send(map[string]any{"t": "sub", "rid": "sub"})
	c.next(wire.TSubscribed)
	return c
}

func (c *wsClient) send(req map[string]any) {
	c.t.Helper()
	b, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next returns the next frame of type typ, skipping others (hints, other
// pushes); it fails the test after 5 seconds.
func (c *wsClient) next(typ string) wire.Frame {
	c.t.Helper()
	for {
		f, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", typ, err)
		}
		if f.T == typ {
			return f
		}
	}
}

func (c *wsClient) read() (wire.Frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return wire.Frame{}, err
	}
	return wire.DecodeFrame(b)
}
