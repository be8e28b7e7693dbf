package main

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres/pgtest"
)

// pushLog collects the frames one raw socket receives.
type pushLog struct {
	mu  sync.Mutex
	got []map[string]any
}

// listen subscribes ws and records every frame it receives until it closes.
func listen(t *testing.T, ws *websocket.Conn) *pushLog {
	t.Helper()
	if err := rawSub(ws); err != nil {
		t.Fatal(err)
	}
	f := &pushLog{}
	go func() {
		for {
			_, m, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			var v map[string]any
			if json.Unmarshal(m, &v) == nil {
				f.mu.Lock()
				f.got = append(f.got, v)
				f.mu.Unlock()
			}
		}
	}()
	return f
}

// match returns the pushLog for which ok holds.
func (f *pushLog) match(ok func(map[string]any) bool) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, v := range f.got {
		if ok(v) {
			out = append(out, v)
		}
	}
	return out
}

// wait waits up to d for a frame for which ok holds.
func (f *pushLog) wait(t *testing.T, d time.Duration, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if m := f.match(ok); len(m) > 0 {
			return m[0]
		}
		if time.Now().After(end) {
			t.Fatalf("no %s within %v", what, d)
		}
	}
}

// about matches a push of type typ about user.
func about(typ, user string) func(map[string]any) bool {
	return func(v map[string]any) bool { return v["t"] == typ && v["user"] == user }
}

// TestSignalsAcrossGateways: three gateways on PostgreSQL, on each bus that
// joins gateways. ana, ben and dan each on a gateway of their own; dan was
// a member of g1 with them and was removed. ben's typing in g1 reaches ana
// through the bus and never dan; ben's presence reaches ana and never dan;
// and when ben's gateway is killed with SIGKILL, ana reads him offline
// within the lease (--presence-ttl 2s) from another gateway's sweep, by a
// push and from GET /api/presence.
func TestSignalsAcrossGateways(t *testing.T) {
	t.Run("listen_notify", func(t *testing.T) { testSignalsAcrossGateways(t) })
	t.Run("nats", func(t *testing.T) {
		url := os.Getenv("PARLEY_TEST_NATS")
		if url == "" {
			t.Skip("PARLEY_TEST_NATS is not set (e.g. nats://127.0.0.1:4222): the NATS bus is not tested")
		}
		testSignalsAcrossGateways(t, "PARLEY_BUS="+url)
	})
}

func testSignalsAcrossGateways(t *testing.T, env ...string) {
	b := backend{name: "postgres", db: pgtest.DSN(t), dir: t.TempDir()}
	s := b.store(t)
	tok := seed(t, s, "ana/d1", "ben/d1")
	ctx := context.Background()
	if _, err := s.CreateUser(ctx, parley.NewUser{ID: "dan", Password: "password-dan"}); err != nil {
		t.Fatal(err)
	}
	owner := parley.Principal{User: "ana"}
	if _, err := s.AddMember(ctx, owner, "g1", "dan"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveMember(ctx, owner, "g1", "dan"); err != nil {
		t.Fatal(err)
	}
	dan, err := s.Login(ctx, parley.LoginRequest{Login: "dan", Password: "password-dan", DeviceID: "d1", InstallID: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	env = append(env, "PARLEY_PRESENCE_TTL=2s")
	var gws []*proc
	for range 3 {
		gws = append(gws, serve(t, b.db, b.dir, env...))
	}
	socket := func(gw *proc, token string) (*websocket.Conn, *pushLog) {
		ws, err := rawDial(gw.ws, token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		return ws, listen(t, ws)
	}
	_, anaF := socket(gws[0], tok["ana/d1"])
	_, danF := socket(gws[1], dan.Token)
	benWS, benF := socket(gws[2], tok["ben/d1"])

	online := anaF.wait(t, 10*time.Second, "presence of ben online at ana", about("presence", "ben"))
	if online["state"] != "online" {
		t.Fatalf("ben's first presence at ana: %v, want online", online)
	}
	if err := benWS.Write(ctx, websocket.MessageText, []byte(`{"t":"typing","conv":"g1"}`)); err != nil {
		t.Fatal(err)
	}
	typing := anaF.wait(t, 10*time.Second, "ben's typing at ana", about("typing", "ben"))
	if typing["conv"] != "g1" || typing["until"] == nil {
		t.Fatalf("typing push %v, want conv g1 with until", typing)
	}

	gws[2].kill()
	began := time.Now()
	anaF.wait(t, 15*time.Second, "ben offline at ana after his gateway died", func(v map[string]any) bool {
		return about("presence", "ben")(v) && v["state"] == "offline"
	})
	t.Logf("ben read offline %v after his gateway was killed (lease 2s)", time.Since(began).Round(10*time.Millisecond))
	var page struct {
		Presence []struct{ User, State string } `json:"presence"`
	}
	if st := callAPI(t, gws[0].http, tok["ana/d1"], "GET", "/api/presence?users=ben,dan", nil, &page); st != 200 ||
		len(page.Presence) != 1 || page.Presence[0].User != "ben" || page.Presence[0].State != "offline" {
		t.Fatalf("GET /api/presence as ana: %d %+v, want ben offline and dan left out (they share no open conversation)", st, page)
	}

	// dan, a former member of g1, learned nothing of ben: no typing, no
	// presence, though his gateway heard both.
	if got := danF.match(func(v map[string]any) bool { return v["t"] == "typing" || about("presence", "ben")(v) }); len(got) > 0 {
		t.Fatalf("former member dan received %v", got)
	}
	if got := benF.match(about("typing", "ben")); len(got) > 0 {
		t.Fatalf("ben received his own typing: %v", got)
	}
}
