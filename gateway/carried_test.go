package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/nats"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/wire"
)

// TestCarriedPush: on SQLite a send's notice carries its event
// (Sent.At is reported), and once the gateway has read the conversation
// once, the following messages are pushed from the notice, without a
// store read, exactly as the store serves them; a member who joins and
// one who leaves get what the store's visibility rules give them.
func TestCarriedPush(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	srv := newServer(t, s, gateway.Options{Backstop: time.Hour})
	ben := twoInG1(t, srv)
	user(t, s, "cy")
	ana := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
	cy := dial(t, srv.url, login(t, s, "cy", "d1", "i1").Token)
	cy.do(map[string]any{"t": "sub"})
	ctx := context.Background()
	benP := parley.Principal{User: "ben", DeviceID: "d1"}

	// pushed checks that ben's next push is seq, as a sync serves it.
	pushed := func(seq int64) {
		t.Helper()
		f := ben.push(wire.TEvent)
		page, err := s.Sync(ctx, benP, parley.SyncRequest{Conv: "g1", After: seq - 1, Limit: 1})
		if err != nil || len(page.Events) != 1 {
			t.Fatalf("sync of seq %d: %+v, %v", seq, page, err)
		}
		got, _ := json.Marshal(f.Ev)
		page.Events[0].Derived = nil // a push carries no derived state: the client folds what follows
		want, _ := json.Marshal(wire.EventPush(page.Events[0]).Ev)
		if string(got) != string(want) {
			t.Fatalf("push of seq %d:\n  %s\nthe store serves:\n  %s", seq, got, want)
		}
	}
	for i := range 4 {
		send(ana, "g1", fmt.Sprint("m", i), fmt.Sprint("carried ", i, " ✓"))
		pushed(int64(3 + i))
	}
	if n := srv.hub.Stats().Carried.Load(); n < 3 {
		t.Fatalf("%d events pushed from their notices, want at least 3 (all but the first)", n)
	}

	// cy joins: the join comes through the store, and so does the audience
	// of what follows.
	if _, err := s.AddMember(ctx, parley.Principal{User: "ana"}, "g1", "cy"); err != nil {
		t.Fatal(err)
	}
	srv.hub.Publish(parley.Notice{Conv: "g1", Seq: 7, User: "cy"})
	if f := cy.push(wire.TEvent); f.Ev.Kind != "member_joined" {
		t.Fatalf("cy's join push = %+v", f.Ev)
	}
	pushed(7)
	send(ana, "g1", "m-join", "hello cy")
	pushed(8)
	if f := cy.push(wire.TEvent); f.Ev.Seq != 8 || f.Ev.Body != "hello cy" {
		t.Fatalf("cy's push after joining = %+v", f.Ev)
	}
	// cy leaves: nothing after it reaches her.
	if _, err := s.RemoveMember(ctx, parley.Principal{User: "ana"}, "g1", "cy"); err != nil {
		t.Fatal(err)
	}
	srv.hub.Publish(parley.Notice{Conv: "g1", Seq: 9, User: "cy"})
	if f := cy.push(wire.TEvent); f.Ev.Kind != "member_left" {
		t.Fatalf("cy's leave push = %+v", f.Ev)
	}
	pushed(9)
	carried := srv.hub.Stats().Carried.Load()
	send(ana, "g1", "m-left", "cy is gone")
	pushed(10)
	if srv.hub.Stats().Carried.Load() != carried+1 {
		t.Errorf("the message after the leave was not pushed from its notice")
	}
	cy.quiet(200 * time.Millisecond)
}

// natsServer is PARLEY_TEST_NATS; the test skips without it.
func natsServer(t *testing.T) string {
	t.Helper()
	u := os.Getenv("PARLEY_TEST_NATS")
	if u == "" {
		t.Skip("PARLEY_TEST_NATS is not set (e.g. nats://127.0.0.1:4222): NATS tests skipped")
	}
	return u
}

// TestNATSInterest: two gateways on one store joined by NATS. A gateway
// subscribes to what its sockets need (the shard of a watched
// conversation, its users) and nothing else; pushes cross with the event
// carried; a user added to a conversation the gateway does not watch
// still gets the join (the notice names them), and the gateway starts
// watching it; when the last socket goes, the subscriptions go.
func TestNATSInterest(t *testing.T) {
	url := natsServer(t)
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	prefix := "t" + parley.NewID()[:12]
	newBus := func() *nats.Bus {
		b, err := nats.NewBus(url, nats.Options{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	busA, busB := newBus(), newBus()
	a := newServer(t, s, gateway.Options{Bus: busA, Backstop: time.Hour})
	b := newServer(t, s, gateway.Options{Bus: busB, Backstop: time.Hour})
	subs := func(bus *nats.Bus, want int, what string) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); bus.Subscriptions() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: %d subscriptions, want %d", what, bus.Subscriptions(), want)
			}
		}
	}
	subs(busB, 1, "no sockets") // PREFIX.lost only

	for _, u := range []string{"ana", "ben", "cy"} {
		user(t, s, u)
	}
	group(t, s, "g1", "ana", "ben")
	group(t, s, "other", "ana", "cy")
	ben := dial(t, b.url, login(t, s, "ben", "d1", "i1").Token)
	subs(busB, 2, "ben connected") // + ben's user subject
	ben.do(map[string]any{"t": "sub"})
	subs(busB, 3, "ben subscribed") // + g1's shard

	ana := dial(t, a.url, login(t, s, "ana", "d1", "i1").Token)
	ana.do(map[string]any{"t": "sub"})
	received := b.hub.Stats().NoticesReceived.Load()
	for i := range 3 {
		send(ana, "g1", fmt.Sprint("m", i), fmt.Sprint("across ", i))
		if f := ben.push(wire.TEvent); f.Ev.Body != fmt.Sprint("across ", i) {
			t.Fatalf("push across gateways = %+v", f.Ev)
		}
	}
	if n := b.hub.Stats().Carried.Load(); n < 2 {
		t.Errorf("%d events pushed on gateway b from their notices, want at least 2", n)
	}
	// Sends in a conversation nobody on b watches never reach b (unless
	// it shares g1's shard: then the bus filters them out).
	for i := range 20 {
		send(ana, "other", fmt.Sprint("o", i), "not for b")
	}
	send(ana, "g1", "last", "last")
	ben.push(wire.TEvent)
	if got := b.hub.Stats().NoticesReceived.Load() - received; got != 4 {
		t.Errorf("gateway b received %d notices, want 4 (the sends in g1 only)", got)
	}

	// ben is added to "other": the notice names him, so b hears it, pushes
	// the join and watches "other" from then on.
	mc, err := s.AddMember(context.Background(), parley.Principal{User: "ana"}, "other", "ben")
	if err != nil {
		t.Fatal(err)
	}
	a.hub.Publish(parley.Notice{Conv: mc.Conv, Seq: mc.Seq, User: mc.User})
	if f := ben.push(wire.TEvent); f.Ev.Conv != "other" || f.Ev.Kind != "member_joined" {
		t.Fatalf("join push = %+v", f.Ev)
	}
	send(ana, "other", "o-after", "welcome ben")
	if f := ben.push(wire.TEvent); f.Ev.Body != "welcome ben" {
		t.Fatalf("push after joining = %+v", f.Ev)
	}

	ben.ws.CloseNow()
	subs(busB, 1, "ben gone")
}

// TestNATSLossRecovers: a gateway whose NATS server dies and comes back
// (SIGKILL, restart on the same port) gets Lost from the bus, polls the
// store for what it missed and pushes it, without resync, like a lost
// PostgreSQL listener; pushes from the other gateway flow again.
func TestNATSLossRecovers(t *testing.T) {
	const bin = "/usr/sbin/nats-server"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("PARLEY_TEST_NATS") != "" {
			t.Fatalf("%s is missing (required: PARLEY_TEST_NATS is set)", bin)
		}
		t.Skipf("needs %s (Debian package nats-server)", bin)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var srvCmd *exec.Cmd
	start := func() {
		t.Helper()
		srvCmd = exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
		if err := srvCmd.Start(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				c.Close()
				return
			}
			if time.Now().After(end) {
				t.Fatal("nats-server not listening after 10s")
			}
		}
	}
	kill := func() {
		if srvCmd != nil {
			srvCmd.Process.Kill()
			srvCmd.Wait()
			srvCmd = nil
		}
	}
	t.Cleanup(kill)
	start()

	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	newBus := func() *nats.Bus {
		b, err := nats.NewBus("nats://127.0.0.1:"+strconv.Itoa(port), nats.Options{PingEvery: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := newServer(t, s, gateway.Options{Bus: newBus(), Backstop: time.Hour})
	b := newServer(t, s, gateway.Options{Bus: newBus(), Backstop: time.Hour})
	user(t, s, "ana")
	user(t, s, "ben")
	group(t, s, "g1", "ana", "ben")
	ben := dial(t, b.url, login(t, s, "ben", "d1", "i1").Token)
	ben.do(map[string]any{"t": "sub"})
	ana := dial(t, a.url, login(t, s, "ana", "d1", "i1").Token)
	for body := ""; body != "before"; {
		// The subscription may still be on its way: send until one crosses.
		send(ana, "g1", parley.NewID(), "probe")
		f, err := ben.read(500 * time.Millisecond)
		if err == nil && f.T == wire.TEvent && f.Ev.Body == "probe" {
			send(ana, "g1", "c1", "before")
			body = ben.push(wire.TEvent).Ev.Body
		}
	}

	kill()
	// Committed while the bus is down, with no notice at all: only the
	// recovery's store poll can push it (the backstop is an hour away).
	if _, err := s.Send(context.Background(), parley.Principal{User: "ana", DeviceID: "d1"}, parley.SendRequest{Conv: "g1", CMID: "c2", Body: "during"}); err != nil {
		t.Fatal(err)
	}
	start()
	if f := ben.push(wire.TEvent); f.Ev.Body != "during" {
		t.Fatalf("after the reconnect ben got %+v, want the event sent while the bus was down", f.Ev)
	}
	for end := time.Now().Add(15 * time.Second); b.hub.Stats().Recovered.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the gateway did not count a recovery")
		}
	}
	send(ana, "g1", "c3", "after")
	for {
		f := ben.next()
		if f.T == wire.TResync {
			t.Fatal("ben got resync; the store poll should have covered the loss")
		}
		if f.T == wire.TEvent && f.Ev.Body == "after" {
			break
		}
	}
	if n := a.hub.Stats().Resyncs.Load() + b.hub.Stats().Resyncs.Load(); n != 0 {
		t.Fatalf("%d resync frames, want none", n)
	}
}
