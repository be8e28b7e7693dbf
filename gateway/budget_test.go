package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// tiny wraps a listener so that accepted sockets have small kernel send
// buffers: writes to a peer that does not read stall after kilobytes, not
// megabytes, and the gateway's own queue is what holds the rest.
func tiny(l net.Listener) net.Listener { return tinyListener{l} }

type tinyListener struct{ net.Listener }

func (l tinyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// slowDial is a dial with a small kernel receive buffer, for a client that
// stops reading.
func slowDial(token string) *websocket.DialOptions {
	d := &net.Dialer{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetReadBuffer(4096)
		}
		return c, err
	}}
	return &websocket.DialOptions{HTTPHeader: bearer(token), HTTPClient: &http.Client{Transport: tr}}
}

// rawSlow dials a socket that never reads at all.
func rawSlow(t *testing.T, url, token string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, slowDial(token))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
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

// fill sends n messages of body to conv as ana.
func fill(t testing.TB, s parley.Store, conv string, n int, body string) {
	t.Helper()
	p := parley.Principal{User: "ana", DeviceID: "d1"}
	for i := range n {
		if _, err := s.Send(context.Background(), p, parley.SendRequest{Conv: conv, CMID: fmt.Sprint("f", i), Body: body}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestSlowReaderBudget: sockets that send sync frames and never read hold
// at most their byte budget plus one reply each: the gateway stops reading
// their requests (backpressure) instead of queueing hundreds of pages. The
// hub's own accounting says so, and so does the heap. A socket that reads
// gets every reply of a pipelined burst (replies are never dropped), and
// the queued bytes go back to zero when the slow sockets go.
func TestSlowReaderBudget(t *testing.T) {
	s := openSQLite(t)
	// Long write and pong timeouts: the stalled sockets stay open while
	// they are measured.
	srv := newServerOn(t, s, gateway.Options{WriteTimeout: time.Minute, PingEvery: time.Minute}, tiny)
	user(t, s, "ana")
	user(t, s, "ben")
	group(t, s, "g1", "ana", "ben")
	fill(t, s, "g1", parley.MaxPage, strings.Repeat("x", parley.MaxBodyChars))
	syncFrame := []byte(`{"t":"sync","conv":"g1","after":0,"limit":200}`)

	// The size of one reply: a full page of long messages.
	reader := dial(t, srv.url, login(t, s, "ben", "reader", "i1").Token)
	page := reader.do(map[string]any{"t": "sync", "conv": "g1", "after": 0, "limit": 200})
	reply := int64(len(wire.MarshalFrame(page))) + gateway.FrameOverhead
	if len(page.Events) != parley.MaxPage || reply < 800_000 {
		t.Fatalf("page of %d events, %d bytes: want a full page of long messages", len(page.Events), reply)
	}
	budget := int64(gateway.DefaultSendBudget)

	before := heapAlloc()
	const sockets, frames = 3, 300
	for i := range sockets {
		ws := rawSlow(t, srv.url, login(t, s, "ben", fmt.Sprint("slow", i), "i1").Token)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range frames {
				if ws.Write(ctx, websocket.MessageText, syncFrame) != nil {
					return
				}
			}
		}()
	}
	st := srv.hub.Stats()
	waitFor(t, "every slow socket to be held back", func() bool { return st.Backpressured.Load() >= sockets })
	time.Sleep(300 * time.Millisecond) // anything still in flight lands
	grown := heapAlloc() - before

	if peak := st.PeakQueuedBytes.Load(); peak > budget+reply {
		t.Errorf("one socket queued %d bytes, want at most the budget %d plus one reply %d", peak, budget, reply)
	}
	if q := st.QueuedBytes.Load(); q > sockets*(budget+reply) {
		t.Errorf("%d sockets queue %d bytes, want at most %d", sockets, q, sockets*(budget+reply))
	}
	if st.Kicked.Load() != 0 {
		t.Errorf("kicked %d sockets: replies are held back, never a reason to close", st.Kicked.Load())
	}
	// Generous: queues, socket buffers and the store's caches. Without the
	// budget it is 256 pages per socket, about 650 MiB.
	if limit := int64(64 << 20); grown > limit {
		t.Errorf("heap grew by %d MiB with %d slow sockets, want under %d MiB", grown>>20, sockets, limit>>20)
	}
	t.Logf("heap +%.1f MiB for %d slow sockets; peak queue %d bytes", float64(grown)/(1<<20), sockets, st.PeakQueuedBytes.Load())

	// A socket that reads is not held up, and gets every reply of a burst.
	for i := range 5 {
		reader.raw(websocket.MessageText, fmt.Appendf(nil, `{"t":"sync","conv":"g1","after":0,"limit":200,"rid":"b%d"}`, i))
	}
	for i := range 5 {
		f := reader.next()
		if f.T != wire.TPage || string(f.RID) != fmt.Sprintf(`"b%d"`, i) || len(f.Events) != parley.MaxPage {
			t.Fatalf("burst reply %d: %s %s (%d events)", i, f.T, f.RID, len(f.Events))
		}
	}

	// The slow sockets go: their queued bytes are given back.
	srv.hub.Shutdown(canceled())
	waitFor(t, "queued bytes back to zero", func() bool { return st.QueuedBytes.Load() == 0 })
}

// canceled is a context that has ended: Shutdown closes at once.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestPushesOverBudget: pushes to a socket that stops reading become hints
// above the high-water mark, and once even a hint does not fit in its
// budget the socket is closed with 1008; the user's other socket is not
// held up meanwhile.
func TestPushesOverBudget(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		const budget = 16 << 10
		srv := newServerOn(t, s, gateway.Options{SendBudget: budget, WriteTimeout: time.Minute, PingEvery: time.Minute}, tiny)
		user(t, s, "ana")
		user(t, s, "ben")
		const convs = 100
		for i := range convs {
			group(t, s, fmt.Sprintf("g%03d", i), "ana", "ben")
		}
		slow := dialWith(t, srv.url, slowDial(login(t, s, "ben", "slow", "i1").Token), 1)
		slow.do(map[string]any{"t": "sub"})
		fast := dial(t, srv.url, login(t, s, "ben", "fast", "i1").Token)
		fast.do(map[string]any{"t": "sub"})
		ana := parley.Principal{User: "ana", DeviceID: "d1"}
		send := func(conv, cmid, body string) {
			t.Helper()
			sent, err := s.Send(context.Background(), ana, parley.SendRequest{Conv: conv, CMID: cmid, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			srv.hub.Publish(parley.Notice{Conv: conv, Seq: sent.Seq})
		}
		st := srv.hub.Stats()
		// Events fill the socket's buffers, then its queue up to the
		// high-water mark; from there they become hints.
		body := strings.Repeat("e", 1000)
		for i := 0; st.Hinted.Load() == 0; i++ {
			if i == 5000 {
				t.Fatal("no hint after 5000 events to a socket that does not read")
			}
			send("g000", fmt.Sprint("e", i), body)
			time.Sleep(time.Millisecond)
		}
		if st.Pushed.Load() == 0 || st.Kicked.Load() != 0 {
			t.Fatalf("before the budget: pushed %d, kicked %d", st.Pushed.Load(), st.Kicked.Load())
		}
		// One hint per conversation (they coalesce) until they do not fit.
		for round := 0; st.Kicked.Load() == 0; round++ {
			if round == 20 {
				t.Fatal("never closed: hints beyond the budget were queued")
			}
			for i := 1; i < convs && st.Kicked.Load() == 0; i++ {
				send(fmt.Sprintf("g%03d", i), fmt.Sprint("h", round), "hi")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if peak := st.PeakQueuedBytes.Load(); peak > budget+int64(len(body))+2*gateway.FrameOverhead+200 {
			t.Errorf("peak queue %d bytes with a budget of %d", peak, budget)
		}
		// The other socket got its pushes all along.
		send("g000", "last", "still flowing")
		for {
			if f := fast.push(wire.TEvent); f.Ev.Body == "still flowing" {
				break
			}
		}
		var err error
		for err == nil {
			_, err = slow.read(20 * time.Second)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("the slow socket was not closed")
		}
		if cs := websocket.CloseStatus(err); cs != -1 && cs != websocket.StatusPolicyViolation {
			t.Fatalf("slow socket closed with %v, want 1008", cs)
		}
	})
}

// TestUserSocketCap: a user's sockets beyond MaxUserSockets are refused
// with 429 RATE_LIMITED and Retry-After; other users are not affected,
// and a closed socket frees its slot.
func TestUserSocketCap(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{MaxUserSockets: 2})
		user(t, s, "ana")
		user(t, s, "ben")
		token := login(t, s, "ana", "d1", "i1").Token
		first := dial(t, srv.url, token)
		dial(t, srv.url, login(t, s, "ana", "d2", "i1").Token)
		resp, p := refused(t, srv.url, bearer(token), http.StatusTooManyRequests)
		if p.Code != parley.CodeRateLimited || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("third socket: code %s, Retry-After %q", p.Code, resp.Header.Get("Retry-After"))
		}
		if got := srv.hub.Stats().Refused.Load(); got != 1 {
			t.Errorf("refused = %d, want 1", got)
		}
		dial(t, srv.url, login(t, s, "ben", "d1", "i1").Token)
		first.ws.Close(websocket.StatusNormalClosure, "")
		waitFor(t, "the closed socket's slot", func() bool { return srv.hub.Stats().Conns.Load() == 2 })
		c := dial(t, srv.url, token)
		if f := c.do(map[string]any{"t": "convs"}); f.T != wire.TConvsReply {
			t.Fatalf("socket after a slot was freed: %+v", f)
		}
	})
}

// TestConvsFramePages: the convs frame takes limit and before and answers
// has_more and next; a frame without them (an old client's) gets the
// first page; bad ones are INVALID_ARGUMENT.
func TestConvsFramePages(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		for _, id := range []string{"g1", "g2", "g3"} {
			group(t, s, id, "ana")
		}
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		all := ana.do(map[string]any{"t": "convs"})
		if len(all.Convs) != 3 || all.HasMore == nil || *all.HasMore || all.Next != "" {
			t.Fatalf("convs without parameters: %+v", all)
		}
		first := ana.do(map[string]any{"t": "convs", "limit": 2})
		if len(first.Convs) != 2 || !*first.HasMore || first.Next == "" {
			t.Fatalf("first page of 2: %+v", first)
		}
		rest := ana.do(map[string]any{"t": "convs", "limit": 2, "before": first.Next})
		if len(rest.Convs) != 1 || *rest.HasMore || rest.Convs[0].Conv != all.Convs[2].Conv {
			t.Fatalf("second page: %+v, want %s", rest, all.Convs[2].Conv)
		}
		wantCode(t, ana.do(map[string]any{"t": "convs", "limit": 0}), parley.CodeInvalidArgument)
		wantCode(t, ana.do(map[string]any{"t": "convs", "before": "MTI"}), parley.CodeInvalidArgument)
	})
}
