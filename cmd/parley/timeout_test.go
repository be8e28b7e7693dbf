package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// TestSlowBodyCutOff: a real server with --body-timeout 1s. A client that
// sends its headers and then trickles its body is answered 408 UNAVAILABLE
// and disconnected before its body is complete; a WebSocket that stays
// quiet for several times that timeout still works (the deadline is per
// request body, not on the connection a WebSocket hijacked).
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	p := serveArgs(t, "--demo", "--data-dir", filepath.Join(t.TempDir(), "data"), "--body-timeout", timeout.String())

	t.Run("trickled body", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(p.http, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		const length = 1000
		if _, err := io.WriteString(conn, "POST /api/login HTTP/1.1\r\nHost: parley\r\nContent-Type: application/json\r\n"+
			"Content-Length: 1000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		// One byte every 200ms: the whole body would take 200s.
		var sent atomic.Int64
		sent.Store(1)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for sent.Load() < length {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
				sent.Add(1)
			}
		}()
		conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer to a trickled body (%d of %d bytes sent): %v", sent.Load(), length, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var prob wire.Problem
		json.Unmarshal(body, &prob)
		if res.StatusCode != http.StatusRequestTimeout || prob.Code != parley.CodeUnavailable {
			t.Errorf("answer %d %s; want 408 with code UNAVAILABLE", res.StatusCode, body)
		}
		if n := sent.Load(); n >= length {
			t.Errorf("the whole body (%d bytes) was sent before the answer", n)
		}
		// The server closed the connection: EOF, not our read deadline.
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Errorf("after the 408 the connection is still open: read %v", err)
		}
	})

	t.Run("quiet websocket", func(t *testing.T) {
		token := demoToken(t, p.http, "ben")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sock, _, err := websocket.Dial(ctx, p.ws, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
		if err != nil {
			t.Fatal(err)
		}
		defer sock.CloseNow()
		time.Sleep(3 * timeout)
		if err := sock.Write(ctx, websocket.MessageText, []byte(`{"t":"convs","rid":"r1"}`)); err != nil {
			t.Fatalf("write after %s quiet: %v", 3*timeout, err)
		}
		_, b, err := sock.Read(ctx)
		if f, _ := wire.DecodeFrame(b); err != nil || f.T != "convs" || string(f.RID) != `"r1"` {
			t.Fatalf("reply after %s quiet: %s %v; want convs", 3*timeout, b, err)
		}
	})
}

// isReset reports a connection reset by the peer (a close with unread data).
func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
