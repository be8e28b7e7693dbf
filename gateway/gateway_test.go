package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/inmem"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// stores runs fn once per store: SQLite always, PostgreSQL when
// PARLEY_TEST_POSTGRES is set (pgtest skips that subtest otherwise).
func stores(t *testing.T, fn func(t *testing.T, s parley.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s, err := postgres.Open(context.Background(), pgtest.DSN(t), parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
}

// server is a hub behind a real listener on 127.0.0.1.
type server struct {
	hub   *gateway.Hub
	store parley.Store
	url   string // ws://…
	http  string // http://…
}

func newServer(t *testing.T, s parley.Store, o gateway.Options) *server {
	t.Helper()
	return newServerOn(t, s, o, nil)
}

// newServerOn is newServer whose listener is wrap(the listener) when wrap
// is not nil.
func newServerOn(t *testing.T, s parley.Store, o gateway.Options, wrap func(net.Listener) net.Listener) *server {
	t.Helper()
	o.Store = s
	if o.Bus == nil {
		o.Bus = inmem.NewBus()
	}
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	hub := gateway.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	srv := httptest.NewUnstartedServer(hub)
	if wrap != nil {
		srv.Listener = wrap(srv.Listener)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	return &server{hub: hub, store: s, url: "ws" + strings.TrimPrefix(srv.URL, "http"), http: srv.URL}
}

// user creates an account and returns a token for one of its devices.
func user(t *testing.T, s parley.Store, id string) {
	t.Helper()
	if _, err := s.CreateUser(context.Background(), parley.NewUser{ID: id, Password: "password-" + id}); err != nil && parley.ErrorCode(err) != parley.CodeAlreadyExists {
		t.Fatal(err)
	}
}

func login(t *testing.T, s parley.Store, id, device, install string) parley.Session {
	t.Helper()
	sess, err := s.Login(context.Background(), parley.LoginRequest{Login: id, Password: "password-" + id, DeviceID: device, InstallID: install})
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func group(t *testing.T, s parley.Store, id, owner string, members ...string) {
	t.Helper()
	_, err := s.CreateConversation(context.Background(), parley.Principal{User: owner}, parley.NewConversation{ID: id, Kind: parley.KindGroup, Title: id, Members: append([]string{owner}, members...)})
	if err != nil {
		t.Fatal(err)
	}
}

// client is a raw WebSocket peer that speaks frames by hand.
type client struct {
	t       *testing.T
	ws      *websocket.Conn
	n       int
	pending []wire.Frame // pushes read while waiting for a reply
	frames  chan wire.Frame
	err     chan error // why the socket ended
	// presence: keep presence pushes; by default read skips them, as
	// most tests are about other frames (presence_test.go sets it).
	presence bool
}

func dial(t *testing.T, url, token string) *client {
	t.Helper()
	return dialBuffered(t, url, token, 100000)
}

// dialBuffered dials a client that buffers at most n frames before it
// stops reading its socket (n small: a client that does not read).
func dialBuffered(t *testing.T, url, token string, n int) *client {
	t.Helper()
	return dialWith(t, url, &websocket.DialOptions{HTTPHeader: bearer(token)}, n)
}

// dialWith dials with opts a client that buffers at most n frames.
func dialWith(t *testing.T, url string, opts *websocket.DialOptions, n int) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	ws.SetReadLimit(1 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	c := &client{t: t, ws: ws, frames: make(chan wire.Frame, n), err: make(chan error, 1)}
	// One reader for the socket's life: coder/websocket closes a socket
	// whose Read context ends, so reads cannot time out individually.
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				c.err <- err
				close(c.frames)
				return
			}
			f, err := wire.DecodeFrame(b)
			if err != nil {
				f = wire.Frame{T: "undecodable:" + string(b)}
			}
			c.frames <- f
		}
	}()
	return c
}

func (c *client) raw(typ websocket.MessageType, b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, typ, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// do sends a request with a fresh rid and returns its reply, skipping
// pushes that arrive before it.
func (c *client) do(req map[string]any) wire.Frame {
	c.t.Helper()
	c.n++
	rid := fmt.Sprintf("r%d", c.n)
	req["rid"] = rid
	b, _ := json.Marshal(req)
	c.raw(websocket.MessageText, b)
	for {
		f, err := c.read(15 * time.Second)
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		if string(f.RID) == `"`+rid+`"` {
			return f
		}
		if f.RID != nil {
			c.t.Fatalf("reply for %s while waiting for %s", f.RID, rid)
		}
		c.pending = append(c.pending, f)
	}
}

// next returns the next frame (a push kept by do first) within 15 s.
func (c *client) next() wire.Frame {
	c.t.Helper()
	if len(c.pending) > 0 {
		f := c.pending[0]
		c.pending = c.pending[1:]
		return f
	}
	f, err := c.read(15 * time.Second)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

// read returns the next frame from the socket within d; after the socket
// ended, the reason it ended.
func (c *client) read(d time.Duration) (wire.Frame, error) {
	end := time.After(d)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				err := <-c.err
				c.err <- err
				return wire.Frame{}, err
			}
			if f.T == wire.TPresence && !c.presence {
				continue
			}
			return f, nil
		case <-end:
			return wire.Frame{}, context.DeadlineExceeded
		}
	}
}

// quiet asserts that no frame arrives within d.
func (c *client) quiet(d time.Duration) {
	c.t.Helper()
	if len(c.pending) > 0 {
		c.t.Fatalf("unexpected frame %+v", c.pending[0])
	}
	if f, err := c.read(d); err == nil {
		c.t.Fatalf("unexpected frame %+v", f)
	}
}

// push reads until a push of type typ arrives.
func (c *client) push(typ string) wire.Frame {
	c.t.Helper()
	for {
		f := c.next()
		if f.T == typ && f.RID == nil {
			return f
		}
	}
}

// refused tries an upgrade that must be refused with status, and returns
// the answer and its problem body.
func refused(t *testing.T, url string, h http.Header, status int) (*http.Response, wire.Problem) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err == nil || resp == nil || resp.StatusCode != status {
		t.Fatalf("upgrade with %v answered %v, %v; want %d", h, resp, err, status)
	}
	var p wire.Problem
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("refused upgrade body %q: %v", body, err)
	}
	return resp, p
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

func wantCode(t *testing.T, f wire.Frame, code parley.Code) {
	t.Helper()
	if f.T != wire.TError || f.Code != code {
		t.Fatalf("got %s %s (%s), want error %s", f.T, f.Code, f.Msg, code)
	}
}

// twoInG1 creates ana and ben and their group g1, and returns a subscribed
// socket of ben's.
func twoInG1(t *testing.T, srv *server) *client {
	t.Helper()
	user(t, srv.store, "ana")
	user(t, srv.store, "ben")
	group(t, srv.store, "g1", "ana", "ben")
	ben := dial(t, srv.url, login(t, srv.store, "ben", "d1", "i1").Token)
	if f := ben.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
		t.Fatalf("sub: %+v", f)
	}
	return ben
}

func send(c *client, conv, cmid, body string) wire.Frame {
	c.t.Helper()
	f := c.do(map[string]any{"t": "send", "conv": conv, "cmid": cmid, "body": body})
	if f.T != wire.TSent {
		c.t.Fatalf("send: got %s %s %s", f.T, f.Code, f.Msg)
	}
	return f
}

func TestRequests(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		user(t, s, "ben")
		group(t, s, "g1", "ana", "ben")
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)

		sent := send(ana, "g1", "c1", "hello")
		if *sent.Seq != 3 || *sent.Dup || sent.MID == "" || *sent.Epoch != 1 || sent.Conv != "g1" {
			t.Fatalf("sent = %+v", sent)
		}
		again := send(ana, "g1", "c1", "hello")
		if *again.Seq != 3 || !*again.Dup || again.MID != sent.MID {
			t.Fatalf("replay = %+v, want seq 3 dup", again)
		}
		wantCode(t, ana.do(map[string]any{"t": "send", "conv": "g1", "cmid": "c1", "body": "other"}), parley.CodeIdempotencyMismatch)
		wantCode(t, ana.do(map[string]any{"t": "send", "conv": "nope", "cmid": "c1", "body": "x"}), parley.CodeNotMember)

		page := ana.do(map[string]any{"t": "sync", "conv": "g1", "after": 0})
		if page.T != wire.TPage || len(page.Events) != 3 || *page.NextAfter != 3 || *page.HasMore || *page.Head != 3 || *page.MinSeq != 1 || *page.Trimmed || *page.Epoch != 1 {
			t.Fatalf("page = %+v", page)
		}
		if ev := page.Events[2]; ev.Kind != "message" || ev.Body != "hello" || ev.Sender != "ana" || ev.Device != "d1" || !strings.HasSuffix(ev.At, "Z") {
			t.Fatalf("event = %+v", ev)
		}
		empty := ana.do(map[string]any{"t": "sync", "conv": "g1", "after": 3, "limit": 10})
		if empty.Events == nil || len(empty.Events) != 0 {
			t.Fatalf("empty page events = %#v, want []", empty.Events)
		}
		wantCode(t, ana.do(map[string]any{"t": "sync", "conv": "g1", "after": 9}), parley.CodeCursorAhead)
		wantCode(t, ana.do(map[string]any{"t": "sync", "conv": "g1", "after": 0, "epoch": 7}), parley.CodeEpochChanged)
		wantCode(t, ana.do(map[string]any{"t": "sync", "conv": "g1", "after": 0, "limit": 0}), parley.CodeInvalidArgument)

		if f := ana.do(map[string]any{"t": "ack", "conv": "g1", "seq": 3}); f.T != wire.TAcked || *f.Delivered != 3 || f.Conv != "g1" {
			t.Fatalf("ack = %+v", f)
		}
		if f := ana.do(map[string]any{"t": "read", "conv": "g1", "seq": 2}); f.T != wire.TReadOK || *f.Read != 2 {
			t.Fatalf("read = %+v", f)
		}
		if f := ana.do(map[string]any{"t": "fetch", "conv": "g1", "seq": 3}); f.T != wire.TFetched || f.Ev == nil || f.Ev.Body != "hello" {
			t.Fatalf("fetch = %+v", f)
		}
		wantCode(t, ana.do(map[string]any{"t": "fetch", "conv": "g1", "seq": 99}), parley.CodeNotFound)
		rec := ana.do(map[string]any{"t": "recall", "conv": "g1", "target": 3, "cmid": "r1"})
		if rec.T != wire.TRecalled || *rec.Seq != 4 || *rec.Dup {
			t.Fatalf("recall = %+v", rec)
		}
		if f := ana.do(map[string]any{"t": "fetch", "conv": "g1", "seq": 3}); f.Ev == nil || !f.Ev.Recalled || f.Ev.Body != "" {
			t.Fatalf("recalled fetch = %+v", f.Ev)
		}
		convs := ana.do(map[string]any{"t": "convs"})
		if convs.T != wire.TConvsReply || len(convs.Convs) != 1 || convs.Convs[0].Conv != "g1" || convs.Convs[0].Head != 4 || convs.Convs[0].Read != 2 {
			t.Fatalf("convs = %+v", convs)
		}
		if f := ana.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
			t.Fatalf("sub = %+v", f)
		}
		// A numeric rid is echoed as it came.
		ana.raw(websocket.MessageText, []byte(`{"t":"convs","rid":42}`))
		if f := ana.next(); string(f.RID) != "42" || f.T != wire.TConvsReply {
			t.Fatalf("numeric rid: %+v", f)
		}
	})
}

// TestPushes: events reach every subscribed socket of every member who may
// see them (the sender's other sockets included), never a socket before
// its sub, never a non-member or a former member; read-cursor moves reach
// the user's other devices as hints.
func TestPushes(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		for _, u := range []string{"ana", "ben", "cy", "dan"} {
			user(t, s, u)
		}
		group(t, s, "g1", "ana", "ben", "cy")
		ana1 := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		ana2 := dial(t, srv.url, login(t, s, "ana", "d2", "i1").Token)
		ben := dial(t, srv.url, login(t, s, "ben", "d1", "i1").Token)
		benNoSub := dial(t, srv.url, login(t, s, "ben", "d2", "i1").Token)
		cy := dial(t, srv.url, login(t, s, "cy", "d1", "i1").Token)
		dan := dial(t, srv.url, login(t, s, "dan", "d1", "i1").Token)
		for _, c := range []*client{ana1, ana2, ben, cy, dan} {
			if f := c.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
				t.Fatalf("sub: %+v", f)
			}
		}
		send(ana1, "g1", "m1", "one")
		for name, c := range map[string]*client{"ana2": ana2, "ben": ben, "cy": cy} {
			f := c.push(wire.TEvent)
			if f.Ev == nil || f.Ev.Seq != 4 || f.Ev.Body != "one" || f.Ev.Conv != "g1" {
				t.Fatalf("%s push = %+v", name, f.Ev)
			}
		}
		if f := ana1.push(wire.TEvent); f.Ev.Seq != 4 {
			t.Fatalf("sender's own socket push = %+v", f.Ev)
		}
		dan.quiet(200 * time.Millisecond)
		benNoSub.quiet(100 * time.Millisecond)

		// cy leaves: she gets her own member_left, then nothing more.
		if _, err := s.RemoveMember(context.Background(), parley.Principal{User: "ana"}, "g1", "cy"); err != nil {
			t.Fatal(err)
		}
		srv.hub.Notify([]parley.Notice{{Conv: "g1", Seq: 5}})
		if f := cy.push(wire.TEvent); f.Ev.Kind != "member_left" || f.Ev.User != "cy" {
			t.Fatalf("cy's removal push = %+v", f.Ev)
		}
		ben.push(wire.TEvent) // ben sees the removal too
		send(ana1, "g1", "m2", "after cy left")
		if f := ben.push(wire.TEvent); f.Ev.Seq != 6 {
			t.Fatalf("ben push = %+v", f.Ev)
		}
		cy.quiet(200 * time.Millisecond)

		// dan joins later: his join event is pushed to him, and what follows.
		if _, err := s.AddMember(context.Background(), parley.Principal{User: "ana"}, "g1", "dan"); err != nil {
			t.Fatal(err)
		}
		srv.hub.Notify([]parley.Notice{{Conv: "g1", Seq: 7}})
		if f := dan.push(wire.TEvent); f.Ev.Kind != "member_joined" || f.Ev.Seq != 7 {
			t.Fatalf("dan's join push = %+v", f.Ev)
		}
		send(ben, "g1", "m3", "welcome dan")
		if f := dan.push(wire.TEvent); f.Ev.Seq != 8 || f.Ev.Body != "welcome dan" {
			t.Fatalf("dan push = %+v", f.Ev)
		}

		// ana reads on d1: d2 gets a hint with read, d1 does not.
		ana1.do(map[string]any{"t": "read", "conv": "g1", "seq": 8})
		h := ana2.push(wire.THint)
		if h.Conv != "g1" || h.Read == nil || *h.Read != 8 || *h.Head < 8 {
			t.Fatalf("read hint = %+v", h)
		}
		for {
			f, err := ana1.read(200 * time.Millisecond)
			if err != nil {
				break
			}
			if f.T == wire.THint {
				t.Fatalf("the reading device got its own read hint: %+v", f)
			}
		}
	})
}

// TestPushGapFilled: a notice that skips seqs makes the gateway read the
// missing ones from the store, so nothing is skipped.
func TestPushGapFilled(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		ben := twoInG1(t, srv)
		p := parley.Principal{User: "ana", DeviceID: "d1"}
		for i := range 5 { // committed behind the gateway's back: no notices
			if _, err := s.Send(context.Background(), p, parley.SendRequest{Conv: "g1", CMID: fmt.Sprint("c", i), Body: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		srv.hub.Notify([]parley.Notice{{Conv: "g1", Seq: 7}})
		for want := int64(3); want <= 7; want++ {
			if f := ben.push(wire.TEvent); f.Ev.Seq != want {
				t.Fatalf("push seq %d, want %d", f.Ev.Seq, want)
			}
		}
	})
}

// TestPipelinedPushes: two sockets pipeline their sends (each writes all
// its send frames before reading a reply), so the fan-out worker takes
// notices while the writers of earlier pushes still run and holds writers
// across its wakes (waves). Every subscribed socket gets every event
// exactly once, in seq order, with its body; nothing is held back: with
// the backstop off, the last pushes arrive only if the worker released
// its last wave by itself (client.next fails after 15 s).
func TestPipelinedPushes(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{Backstop: time.Hour})
		for _, u := range []string{"ana", "ben", "cy", "dan"} {
			user(t, s, u)
		}
		group(t, s, "g1", "ana", "ben", "cy", "dan")
		var subs []*client
		for _, ud := range [][2]string{{"ana", "d2"}, {"ben", "d1"}, {"ben", "d2"}, {"cy", "d1"}, {"dan", "d1"}} {
			c := dial(t, srv.url, login(t, s, ud[0], ud[1], "i1").Token)
			if f := c.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
				t.Fatalf("sub: %+v", f)
			}
			subs = append(subs, c)
		}
		senders := []*client{ // not subscribed: they read only replies
			dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token),
			dial(t, srv.url, login(t, s, "ben", "d3", "i1").Token),
		}
		const n = 150 // per sender
		for i := range n {
			for k, c := range senders {
				b, _ := json.Marshal(map[string]any{"t": "send", "rid": fmt.Sprint(k, "-", i), "conv": "g1", "cmid": fmt.Sprint("p", k, "-", i), "body": fmt.Sprint("body ", k, "-", i)})
				c.raw(websocket.MessageText, b)
			}
		}
		body := map[int64]string{} // seq → body sent
		for k, c := range senders {
			for i := range n {
				f := c.next()
				if f.T != wire.TSent || string(f.RID) != fmt.Sprintf(`"%d-%d"`, k, i) || f.Seq == nil {
					t.Fatalf("sender %d, reply %d: %s %s %s %s", k, i, f.T, f.RID, f.Code, f.Msg)
				}
				body[*f.Seq] = fmt.Sprint("body ", k, "-", i)
			}
		}
		first := int64(math.MaxInt64)
		for seq := range body {
			first = min(first, seq)
		}
		last := first + int64(len(body)) - 1
		if _, ok := body[last]; !ok || len(body) != 2*n {
			t.Fatalf("%d sends got seqs %d.. but not %d", len(body), first, last)
		}
		for k, c := range subs {
			for want := first; want <= last; want++ {
				f := c.push(wire.TEvent)
				if f.Ev == nil || f.Ev.Seq != want || f.Ev.Body != body[want] {
					t.Fatalf("socket %d: push %+v, want seq %d %q", k, f.Ev, want, body[want])
				}
			}
		}
		for _, c := range subs {
			c.quiet(100 * time.Millisecond) // and no event twice
		}
	})
}

// TestBackstop: with no notice at all, the poll of watched heads pushes.
func TestBackstop(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{Backstop: 100 * time.Millisecond})
		ben := twoInG1(t, srv)
		if _, err := s.Send(context.Background(), parley.Principal{User: "ana", DeviceID: "d1"}, parley.SendRequest{Conv: "g1", CMID: "c1", Body: "quiet"}); err != nil {
			t.Fatal(err)
		}
		if f := ben.push(wire.TEvent); f.Ev.Seq != 3 || f.Ev.Body != "quiet" {
			t.Fatalf("backstop push = %+v", f.Ev)
		}
		if srv.hub.Stats().Backstops.Load() == 0 {
			t.Fatal("the backstop did not count the conversation it found behind")
		}
	})
}

// TestHintForLargeGroup: above the default member threshold (1000),
// members get a hint (conv, head) instead of the event; a group of exactly
// 1000 still gets events. The silent members are created through the store
// without passwords (no hashing), as the issue allows.
func TestHintForLargeGroup(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		user(t, s, "ben")
		ctx := context.Background()
		var others []string
		for i := range 999 {
			id := fmt.Sprintf("m%03d", i)
			if _, err := s.CreateUser(ctx, parley.NewUser{ID: id}); err != nil {
				t.Fatal(err)
			}
			others = append(others, id)
		}
		group(t, s, "crowd", "ana", append([]string{"ben"}, others...)...)      // 1001 members
		group(t, s, "full", "ana", append([]string{"ben"}, others[:998]...)...) // 1000 members
		ben := dial(t, srv.url, login(t, s, "ben", "d1", "i1").Token)
		ben.do(map[string]any{"t": "sub"})
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		send(ana, "crowd", "b1", "to many")
		h := ben.push(wire.THint)
		if h.Conv != "crowd" || *h.Head != 1002 || h.Read != nil {
			t.Fatalf("hint = %+v, want crowd at head 1002", h)
		}
		send(ana, "full", "s1", "to a thousand")
		if f := ben.push(wire.TEvent); f.Ev.Conv != "full" || f.Ev.Body != "to a thousand" {
			t.Fatalf("1000-member group push = %+v", f)
		}
	})
}

// TestHighWaterHints: above the high-water mark a socket's events become
// one hint per conversation.
func TestHighWaterHints(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{HighWater: 1})
		ben := twoInG1(t, srv)
		p := parley.Principal{User: "ana", DeviceID: "d1"}
		for i := range 50 {
			if _, err := s.Send(context.Background(), p, parley.SendRequest{Conv: "g1", CMID: fmt.Sprint("c", i), Body: strings.Repeat("y", 4000)}); err != nil {
				t.Fatal(err)
			}
		}
		srv.hub.Notify([]parley.Notice{{Conv: "g1", Seq: 52}})
		events, hints := 0, 0
		for {
			f, err := ben.read(300 * time.Millisecond)
			if err != nil {
				break
			}
			switch f.T {
			case wire.TEvent:
				events++
			case wire.THint:
				hints++
			}
		}
		if hints == 0 || events+hints >= 50 {
			t.Fatalf("events %d, hints %d: want hints to replace events above the high-water mark", events, hints)
		}
	})
}

func TestFrameLimits(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		c := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		frame := func(n int) []byte {
			b := []byte(`{"t":"convs","rid":"big"}`)
			return append(b, []byte(strings.Repeat(" ", n-len(b)))...)
		}
		c.raw(websocket.MessageText, frame(parley.MaxFrameBytes))
		if f := c.next(); f.T != wire.TConvsReply || string(f.RID) != `"big"` {
			t.Fatalf("a frame of exactly 64 KiB: %+v", f)
		}
		c.raw(websocket.MessageText, frame(parley.MaxFrameBytes+1))
		_, err := c.read(5 * time.Second)
		if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
			t.Fatalf("a frame over 64 KiB: %v, want close 1009", err)
		}
	})
}

func TestBadFrames(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		group(t, s, "g1", "ana")
		c := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		tests := []struct {
			name  string
			typ   websocket.MessageType
			frame string
			rid   string
		}{
			{"invalid UTF-8", websocket.MessageText, "{\"t\":\"send\",\"rid\":\"u\",\"conv\":\"g1\",\"cmid\":\"x\",\"body\":\"\xff\xfe\"}", ""},
			{"not JSON", websocket.MessageText, "hello", ""},
			{"JSON array", websocket.MessageText, `[1,2]`, ""},
			{"empty object", websocket.MessageText, `{}`, ""},
			{"unknown type", websocket.MessageText, `{"t":"shout","rid":"a"}`, `"a"`},
			{"missing body", websocket.MessageText, `{"t":"send","rid":"b","conv":"g1","cmid":"x"}`, `"b"`},
			{"seq not a number", websocket.MessageText, `{"t":"ack","rid":"c","conv":"g1","seq":"3"}`, `"c"`},
			{"rid an object", websocket.MessageText, `{"t":"convs","rid":{"a":1}}`, ""},
			{"body too long", websocket.MessageText, `{"t":"send","rid":"d","conv":"g1","cmid":"x","body":"` + strings.Repeat("é", 4001) + `"}`, `"d"`},
			{"NUL in body", websocket.MessageText, `{"t":"send","rid":"e","conv":"g1","cmid":"x","body":"a\u0000b"}`, `"e"`},
			{"binary frame", websocket.MessageBinary, `{"t":"convs"}`, ""},
		}
		for _, tt := range tests {
			c.raw(tt.typ, []byte(tt.frame))
			f := c.next()
			if f.T != wire.TError || f.Code != parley.CodeInvalidArgument || string(f.RID) != tt.rid {
				t.Errorf("%s: got %s %s rid %s (%s), want INVALID_ARGUMENT rid %q", tt.name, f.T, f.Code, f.RID, f.Msg, tt.rid)
			}
			// The connection stays usable.
			if f := c.do(map[string]any{"t": "convs"}); f.T != wire.TConvsReply {
				t.Fatalf("after %s: %+v", tt.name, f)
			}
		}
		if n, err := s.Sync(context.Background(), parley.Principal{User: "ana"}, parley.SyncRequest{Conv: "g1", Limit: 10}); err != nil || n.Head != 1 {
			t.Fatalf("bad frames wrote something: head %d, %v", n.Head, err)
		}
	})
}

func TestUnauthenticated(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		loggedOut := login(t, s, "ana", "d1", "i1").Token
		if err := s.Logout(context.Background(), loggedOut); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name   string
			header http.Header
		}{
			{"no token", nil},
			{"garbage token", http.Header{"Authorization": {"Bearer nope"}}},
			{"logged-out token", http.Header{"Authorization": {"Bearer " + loggedOut}}},
			{"basic auth", http.Header{"Authorization": {"Basic YTpi"}}},
			{"bad cookie", http.Header{"Cookie": {wire.SessionCookie + "=nope"}}},
		}
		for _, tt := range tests {
			resp, p := refused(t, srv.url, tt.header, http.StatusUnauthorized)
			if resp.Header.Get("WWW-Authenticate") == "" || p.Code != parley.CodeUnauthenticated {
				t.Errorf("%s: 401 with WWW-Authenticate %q, code %s", tt.name, resp.Header.Get("WWW-Authenticate"), p.Code)
			}
		}
		// The cookie works like the bearer token.
		tok := login(t, s, "ana", "d2", "i1").Token
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, srv.url, &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {wire.SessionCookie + "=" + tok}}})
		if err != nil {
			t.Fatalf("cookie upgrade: %v", err)
		}
		ws.CloseNow()
	})
}

func TestStaleInstall(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		group(t, s, "g1", "ana")
		old := login(t, s, "ana", "d1", "install-1").Token
		open := dial(t, srv.url, old)
		login(t, s, "ana", "d1", "install-2") // the device was reinstalled
		// A new upgrade with the old install's token: 401 STALE_INSTALL.
		if _, p := refused(t, srv.url, bearer(old), http.StatusUnauthorized); p.Code != parley.CodeStaleInstall {
			t.Fatalf("stale upgrade code %s, want STALE_INSTALL", p.Code)
		}
		// A socket the old install still has open: ack says STALE_INSTALL.
		wantCode(t, open.do(map[string]any{"t": "ack", "conv": "g1", "seq": 1}), parley.CodeStaleInstall)
	})
}

// TestDrain: goaway to every socket, then new frames get UNAVAILABLE and
// new upgrades 503.
func TestDrain(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		group(t, s, "g1", "ana")
		tok := login(t, s, "ana", "d1", "i1").Token
		c := dial(t, srv.url, tok)
		send(c, "g1", "before", "accepted")
		srv.hub.Drain()
		if f := c.push(wire.TGoaway); f.T != wire.TGoaway {
			t.Fatal("no goaway")
		}
		wantCode(t, c.do(map[string]any{"t": "send", "conv": "g1", "cmid": "after", "body": "x"}), parley.CodeUnavailable)
		if resp, p := refused(t, srv.url, bearer(tok), http.StatusServiceUnavailable); resp.Header.Get("Retry-After") == "" || p.Code != parley.CodeUnavailable {
			t.Fatalf("upgrade while draining: Retry-After %q, code %s", resp.Header.Get("Retry-After"), p.Code)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := srv.hub.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		var rerr error
		for rerr == nil {
			_, rerr = c.read(5 * time.Second)
		}
		if websocket.CloseStatus(rerr) != websocket.StatusGoingAway {
			t.Fatalf("after shutdown: %v, want close 1001", rerr)
		}
		if errors.Is(rerr, context.DeadlineExceeded) {
			t.Fatal("socket not closed")
		}
	})
}

// TestJoinUnwatched: a gateway skips conversations none of its sockets
// watch, until a membership notice names one of its users; then that user
// gets the join event and what follows.
func TestJoinUnwatched(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		user(t, s, "ana")
		user(t, s, "dan")
		group(t, s, "g2", "ana")
		dan := dial(t, srv.url, login(t, s, "dan", "d1", "i1").Token)
		dan.do(map[string]any{"t": "sub"})
		mc, err := s.AddMember(context.Background(), parley.Principal{User: "ana"}, "g2", "dan")
		if err != nil {
			t.Fatal(err)
		}
		srv.hub.Notify([]parley.Notice{{Conv: "g2", Seq: mc.Seq}}) // says nothing of dan
		dan.quiet(200 * time.Millisecond)
		srv.hub.Notify([]parley.Notice{{Conv: "g2", Seq: mc.Seq, User: "dan"}})
		if f := dan.push(wire.TEvent); f.Ev.Kind != "member_joined" || f.Ev.User != "dan" {
			t.Fatalf("join push = %+v", f.Ev)
		}
		pushedAfterJoin(t, s, srv, dan)
	})
}

// pushedAfterJoin: ana sends in g2, the hub hears of it, and dan, who
// joined g2, gets it pushed.
func pushedAfterJoin(t *testing.T, s parley.Store, srv *server, dan *client) {
	t.Helper()
	sent, err := s.Send(context.Background(), parley.Principal{User: "ana", DeviceID: "d1"}, parley.SendRequest{Conv: "g2", CMID: "c1", Body: "hi dan"})
	if err != nil {
		t.Fatal(err)
	}
	srv.hub.Notify([]parley.Notice{{Conv: "g2", Seq: sent.Seq}})
	if f := dan.push(wire.TEvent); f.Ev.Body != "hi dan" {
		t.Fatalf("push after the join = %+v", f.Ev)
	}
}

// fullStore is what a hub's store is when the hub builds its own
// application layer.
type fullStore interface {
	parley.Store
	app.Store
}

// heldJoined holds the first Joined read of user once armed, after it
// read the store, until release closes: the moment between a
// subscription's read of the user's conversations and its registration.
// calls counts the reads of user (presence announces read it too).
type heldJoined struct {
	fullStore
	user    string
	calls   atomic.Int32
	armed   atomic.Bool
	read    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *heldJoined) Joined(ctx context.Context, user string) ([]parley.Head, error) {
	heads, err := s.fullStore.Joined(ctx, user)
	if user == s.user {
		s.calls.Add(1)
		if s.armed.Load() {
			s.once.Do(func() {
				close(s.read)
				<-s.release
			})
		}
	}
	return heads, err
}

// TestJoinWhileSubscribing: a user added to a conversation nobody on the
// gateway watches, while their socket's subscription is reading the
// conversations they are in, gets that conversation's later events
// pushed: the join reaches the socket through the fan-out, as for any
// socket subscribed before its user joined.
func TestJoinWhileSubscribing(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		held := &heldJoined{fullStore: s.(fullStore), user: "dan", read: make(chan struct{}), release: make(chan struct{})}
		srv := newServer(t, held, gateway.Options{})
		user(t, s, "ana")
		user(t, s, "dan")
		group(t, s, "g2", "ana")
		dan := dial(t, srv.url, login(t, s, "dan", "d1", "i1").Token)
		for deadline := time.Now().Add(10 * time.Second); held.calls.Load() == 0; { // the presence announce of dan's socket
			if time.Now().After(deadline) {
				t.Fatal("dan's presence was not announced")
			}
			time.Sleep(5 * time.Millisecond)
		}
		held.armed.Store(true)
		dan.raw(websocket.MessageText, []byte(`{"t":"sub","rid":"s1"}`))
		<-held.read
		mc, err := s.AddMember(context.Background(), parley.Principal{User: "ana"}, "g2", "dan")
		if err != nil {
			t.Fatal(err)
		}
		srv.hub.Notify([]parley.Notice{{Conv: "g2", Seq: mc.Seq, User: "dan"}})
		time.Sleep(200 * time.Millisecond) // the fan-out handles the join
		close(held.release)
		for f := dan.next(); f.T != wire.TSubscribed; f = dan.next() {
			if f.T != wire.TEvent { // the join may come first
				t.Fatalf("waiting for the sub reply: %+v", f)
			}
		}
		pushedAfterJoin(t, s, srv, dan)
	})
}

// TestRollbackResync: after an operator rollback the seqs are reused, so
// the sockets watching the conversation get resync and their next sync of
// it answers EPOCH_CHANGED. A rollback may leave the head below what was
// pushed, so no notice reveals it: the backstop sees the epoch move.
func TestRollbackResync(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{Backstop: 100 * time.Millisecond})
		ben := twoInG1(t, srv)
		ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
		send(ana, "g1", "c1", "kept")
		send(ana, "g1", "c2", "rolled back")
		ben.push(wire.TEvent)
		ben.push(wire.TEvent)
		if _, err := s.Rollback(context.Background(), "g1", 3); err != nil {
			t.Fatal(err)
		}
		ben.push(wire.TResync)
		wantCode(t, ben.do(map[string]any{"t": "sync", "conv": "g1", "after": 0, "epoch": 1}), parley.CodeEpochChanged)
	})
}

// twoGateways starts two hubs, each with its own PostgreSQL bus, on one
// fresh database.
func twoGateways(t *testing.T) (dsn string, s parley.Store, a, b *server) {
	t.Helper()
	dsn = pgtest.DSN(t)
	s, err := postgres.Open(context.Background(), dsn, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	newBus := func() parley.Bus {
		bus, err := postgres.NewBus(dsn, postgres.BusOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return bus
	}
	return dsn, s, newServer(t, s, gateway.Options{Bus: newBus()}), newServer(t, s, gateway.Options{Bus: newBus()})
}

// TestCrossGatewayReadHint: a read on one gateway reaches the user's other
// device on another gateway as a hint carrying the read cursor.
func TestCrossGatewayReadHint(t *testing.T) {
	_, s, a, b := twoGateways(t)
	user(t, s, "ana")
	user(t, s, "ben")
	group(t, s, "g1", "ana", "ben")
	phone := dial(t, a.url, login(t, s, "ana", "phone", "i1").Token)
	laptop := dial(t, b.url, login(t, s, "ana", "laptop", "i1").Token)
	laptop.do(map[string]any{"t": "sub"})
	if f := phone.do(map[string]any{"t": "read", "conv": "g1", "seq": 2}); f.T != wire.TReadOK {
		t.Fatalf("read: %+v", f)
	}
	h := laptop.push(wire.THint)
	if h.Conv != "g1" || h.Read == nil || *h.Read != 2 {
		t.Fatalf("hint on the other gateway = %+v", h)
	}
}

// TestListenerDropRecovers: two gateways on one PostgreSQL; when a
// gateway's listening connection is killed, it reconnects, polls the store
// for what it may have missed instead of making its sockets resync, and
// pushes from the other gateway flow again.
func TestListenerDropRecovers(t *testing.T) {
	dsn, s, a, b := twoGateways(t)
	ctx := context.Background()
	user(t, s, "ana")
	user(t, s, "ben")
	group(t, s, "g1", "ana", "ben")
	ben := dial(t, b.url, login(t, s, "ben", "d1", "i1").Token)
	ben.do(map[string]any{"t": "sub"})
	ana := dial(t, a.url, login(t, s, "ana", "d1", "i1").Token)
	send(ana, "g1", "c1", "before")
	if f := ben.push(wire.TEvent); f.Ev.Body != "before" {
		t.Fatalf("cross-gateway push = %+v", f.Ev)
	}

	admin, err := pgx.Connect(ctx, pgtest.Libpq(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// Both gateways' listeners share this database; kill them all: each
	// gateway must notice, reconnect and resync its own sockets.
	var killed int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, postgres.BusListenApp).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 2 {
		t.Fatalf("killed %d listeners, want 2", killed)
	}
	deadline := time.Now().Add(15 * time.Second)
	for b.hub.Stats().Recovered.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if b.hub.Stats().Recovered.Load() == 0 {
		t.Fatal("the gateway did not recover from its listener's loss")
	}
	send(ana, "g1", "c2", "after")
	if f := ben.next(); f.T != wire.TEvent || f.Ev.Body != "after" {
		t.Fatalf("after the reconnect ben got %s %+v, want the event (and no resync)", f.T, f.Ev)
	}
	if n := a.hub.Stats().Resyncs.Load() + b.hub.Stats().Resyncs.Load(); n != 0 {
		t.Fatalf("%d resync frames, want none", n)
	}
}

// TestKeepalive: a peer that stops answering pings is dropped.
func TestKeepalive(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	srv := newServer(t, s, gateway.Options{PingEvery: 100 * time.Millisecond, PongTimeout: 3 * time.Second})
	user(t, s, "ana")
	tok := login(t, s, "ana", "d1", "i1").Token
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A socket nobody reads never answers a ping (pongs are sent by Read).
	mute, _, err := websocket.Dial(ctx, srv.url, &websocket.DialOptions{HTTPHeader: bearer(tok)})
	if err != nil {
		t.Fatal(err)
	}
	defer mute.CloseNow()
	live := dial(t, srv.url, tok) // reads, so it answers pings
	deadline := time.Now().Add(20 * time.Second)
	for srv.hub.Stats().Conns.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := srv.hub.Stats().Conns.Load(); n != 1 {
		t.Fatalf("%d sockets open, want only the one answering pings", n)
	}
	if f := live.do(map[string]any{"t": "convs"}); f.T != wire.TConvsReply {
		t.Fatalf("live socket: %+v", f)
	}
}

// TestOrigin: a browser from another origin may not open /ws unless
// allowed; clients without an Origin header are not checked.
func TestOrigin(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	srv := newServer(t, s, gateway.Options{OriginPatterns: []string{"app.example.com"}})
	user(t, s, "ana")
	tok := login(t, s, "ana", "d1", "i1").Token
	host := strings.TrimPrefix(srv.http, "http://")
	tests := []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{"http://" + host, true},
		{"https://app.example.com", true},
		{"https://evil.example.com", false},
	}
	for _, tt := range tests {
		h := http.Header{"Authorization": {"Bearer " + tok}}
		if tt.origin != "" {
			h.Set("Origin", tt.origin)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ws, resp, err := websocket.Dial(ctx, srv.url, &websocket.DialOptions{HTTPHeader: h})
		cancel()
		if tt.ok != (err == nil) {
			t.Errorf("origin %q: %v (%v), want allowed %v", tt.origin, err, resp, tt.ok)
		}
		if err == nil {
			ws.CloseNow()
		} else if !tt.ok && (resp == nil || resp.StatusCode != http.StatusForbidden) {
			t.Errorf("origin %q: %v, want 403", tt.origin, resp)
		}
	}
}

// TestRevoke: a socket whose token stops working gets an error frame with
// the code, is closed with 1008, and gets no more pushes: at once for a
// logout through this gateway, within Reauth for a disabled account or a
// replaced install.
func TestRevoke(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{Reauth: 100 * time.Millisecond})
		ben := twoInG1(t, srv)
		user(t, s, "cy")
		anaTok := login(t, s, "ana", "d1", "i1").Token
		ana := dial(t, srv.url, anaTok)
		ana.do(map[string]any{"t": "sub"})
		cy := dial(t, srv.url, login(t, s, "cy", "d1", "i1").Token)
		benOld := dial(t, srv.url, login(t, s, "ben", "d2", "install-1").Token)

		ended := func(c *client, code parley.Code) {
			t.Helper()
			f := c.push(wire.TError)
			if f.Code != code {
				t.Fatalf("revocation frame %+v, want %s", f, code)
			}
			var err error
			for err == nil {
				_, err = c.read(10 * time.Second)
			}
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("revoked socket ended with %v, want close 1008", err)
			}
		}

		srv.hub.RevokeToken(anaTok) // what the HTTP logout does
		ended(ana, parley.CodeUnauthenticated)

		if err := s.SetUserDisabled(context.Background(), "cy", true); err != nil {
			t.Fatal(err)
		}
		ended(cy, parley.CodeUnauthenticated)

		login(t, s, "ben", "d2", "install-2") // ben's device d2 was reinstalled
		ended(benOld, parley.CodeStaleInstall)

		if n := srv.hub.Stats().Revoked.Load(); n != 3 {
			t.Fatalf("revoked = %d, want 3", n)
		}
		// ben's other device is untouched and still gets pushes.
		if _, err := s.Send(context.Background(), parley.Principal{User: "ana", DeviceID: "d9"}, parley.SendRequest{Conv: "g1", CMID: "x", Body: "still here"}); err != nil {
			t.Fatal(err)
		}
		srv.hub.Notify([]parley.Notice{{Conv: "g1", Seq: 3}})
		if f := ben.push(wire.TEvent); f.Ev.Body != "still here" {
			t.Fatalf("ben push = %+v", f.Ev)
		}
	})
}

// TestCrossGatewayDisable: disabling a user through one gateway ends the
// user's sockets on another gateway at once (an account notice on the bus),
// not at the next reauth round, which is an hour away here; the other
// gateway also forgets the user's cached token lookups.
func TestCrossGatewayDisable(t *testing.T) {
	dsn, s, _, _ := twoGateways(t)
	newBus := func() parley.Bus {
		bus, err := postgres.NewBus(dsn, postgres.BusOptions{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return bus
	}
	forgot := make(chan string, 4)
	a := newServer(t, s, gateway.Options{Bus: newBus(), Reauth: time.Hour})
	b := newServer(t, s, gateway.Options{Bus: newBus(), Reauth: time.Hour, OnAccount: func(u string) { forgot <- u }})
	user(t, s, "ana")
	user(t, s, "ben")
	phone := dial(t, b.url, login(t, s, "ana", "phone", "i1").Token)
	other := dial(t, b.url, login(t, s, "ben", "phone", "i1").Token)
	phone.do(map[string]any{"t": "sub"})
	other.do(map[string]any{"t": "sub"})
	if err := s.SetUserDisabled(context.Background(), "ana", true); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	a.hub.RevokeUser("ana")
	if f := phone.push(wire.TError); f.Code != parley.CodeUnauthenticated {
		t.Fatalf("disabled user's socket got %+v", f)
	}
	if _, err := phone.read(5 * time.Second); err == nil {
		t.Fatal("disabled user's socket still open")
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("socket ended after %v", d)
	}
	select {
	case u := <-forgot:
		if u != "ana" {
			t.Errorf("OnAccount(%q), want ana", u)
		}
	case <-time.After(5 * time.Second):
		t.Error("the other gateway never heard the account notice")
	}
	other.quiet(200 * time.Millisecond) // ben is untouched
	if f := other.do(map[string]any{"t": "convs"}); f.T != wire.TConvsReply {
		t.Errorf("another user's socket: %+v", f)
	}
}

// TestUpgradeRacingRevocation: an upgrade whose token was looked up (by the
// HTTP chain) before a logout, and that registers after the logout's sweep
// of the open sockets, is checked again when it registers and ended; an
// upgrade looked up after the revocation is not asked again.
func TestUpgradeRacingRevocation(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		user(t, s, "ana")
		hub := gateway.New(gateway.Options{Store: s, Bus: inmem.NewBus(), Log: slog.New(slog.DiscardHandler), Reauth: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { hub.Run(ctx); close(done) }()
		var looked atomic.Value // the Looked time the "chain" reports
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok := wire.BearerToken(r)
			p, err := s.Authenticate(r.Context(), tok)
			if err != nil {
				p, err = parley.Principal{User: "ana"}, nil // the stale principal a cache could hold
			}
			c := parley.Caller{Principal: p, Known: true, Token: tok, Looked: looked.Load().(time.Time)}
			hub.ServeHTTP(w, r.WithContext(parley.NewContextWithCaller(r.Context(), c)))
		}))
		t.Cleanup(func() {
			srv.CloseClientConnections()
			srv.Close()
			cancel()
			<-done
		})
		url := "ws" + strings.TrimPrefix(srv.URL, "http")

		sess := login(t, s, "ana", "d1", "i1")
		before := time.Now()
		if err := s.Logout(context.Background(), sess.Token); err != nil {
			t.Fatal(err)
		}
		hub.RevokeToken(sess.Token) // finds no socket: the upgrade is not registered yet

		looked.Store(before) // looked up before the logout
		stale := dial(t, url, sess.Token)
		if f := stale.push(wire.TError); f.Code != parley.CodeUnauthenticated {
			t.Fatalf("a socket upgraded across the logout got %+v", f)
		}

		fresh := login(t, s, "ana", "d2", "i1")
		looked.Store(time.Now()) // looked up after the revocation: nothing to re-check
		ok := dial(t, url, fresh.Token)
		if f := ok.do(map[string]any{"t": "convs"}); f.T != wire.TConvsReply {
			t.Errorf("a socket looked up after the revocation: %+v", f)
		}
	})
}
