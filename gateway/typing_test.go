package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// subscribed dials a subscribed socket of user's device.
func subscribed(t *testing.T, srv *server, s parley.Store, user, device string) *client {
	t.Helper()
	c := dial(t, srv.url, login(t, s, user, device, "i1").Token)
	if f := c.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
		t.Fatalf("sub of %s: %+v", user, f)
	}
	return c
}

// noPush reads c's frames for d and fails on a push of type typ.
func noPush(t *testing.T, c *client, typ string, d time.Duration) {
	t.Helper()
	for _, f := range c.pending {
		if f.T == typ {
			t.Fatalf("unexpected %s push %+v", typ, f)
		}
	}
	c.pending = nil
	end := time.Now().Add(d)
	for {
		f, err := c.read(time.Until(end))
		if err != nil {
			return
		}
		if f.T == typ {
			t.Fatalf("unexpected %s push %+v", typ, f)
		}
	}
}

// typed sends a typing frame, without a rid.
func typed(c *client, conv string) {
	c.t.Helper()
	c.raw(1, fmt.Appendf(nil, `{"t":"typing","conv":%q}`, conv))
}

// wantTyping reads c's next typing push and checks it.
func wantTyping(t *testing.T, c *client, conv, user string, sent time.Time) {
	t.Helper()
	f := c.push(wire.TTyping)
	until, err := time.Parse(wire.TimeFormat, f.Until)
	if f.Conv != conv || f.User != user || err != nil {
		t.Fatalf("typing push = %+v (until: %v), want conv %s user %s", f, err, conv, user)
	}
	if d := until.Sub(sent); d < parley.TypingFor-time.Second || d > parley.TypingFor+10*time.Second {
		t.Errorf("until %s is %v after the frame was sent, want about %v", f.Until, d, parley.TypingFor)
	}
}

// TestTyping: a typing frame reaches the subscribed sockets of the
// conversation's members with an open period, not the typist's own nor a
// former member's nor anyone else's; a repeat within TypingEvery is
// dropped silently; a non-member gets NOT_MEMBER only when it asked with a
// rid; a conversation over MaxTypingMembers members gets nothing.
func TestTyping(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{})
		for _, u := range []string{"ana", "ben", "cy", "dee"} {
			user(t, s, u)
		}
		group(t, s, "g1", "ana", "ben", "cy")
		ana1, ana2 := subscribed(t, srv, s, "ana", "d1"), subscribed(t, srv, s, "ana", "d2")
		ben, cy, dee := subscribed(t, srv, s, "ben", "d1"), subscribed(t, srv, s, "cy", "d1"), subscribed(t, srv, s, "dee", "d1")

		sent := time.Now()
		typed(ana1, "g1")
		wantTyping(t, ben, "g1", "ana", sent)
		wantTyping(t, cy, "g1", "ana", sent)
		// A repeat at once, even with a rid, is dropped: no reply, no push.
		ana1.raw(1, []byte(`{"t":"typing","conv":"g1","rid":"again"}`))
		noPush(t, ben, wire.TTyping, 300*time.Millisecond)
		ana1.quiet(100 * time.Millisecond)
		noPush(t, ana2, wire.TTyping, 0)
		noPush(t, dee, wire.TTyping, 0)

		// Not a member: NOT_MEMBER to a frame with a rid, as for an
		// unknown conversation; nothing to one without.
		wantCode(t, dee.do(map[string]any{"t": "typing", "conv": "g1"}), parley.CodeNotMember)
		wantCode(t, dee.do(map[string]any{"t": "typing", "conv": "nowhere"}), parley.CodeNotMember)
		typed(dee, "g2")
		dee.quiet(200 * time.Millisecond)
		wantCode(t, dee.do(map[string]any{"t": "typing"}), parley.CodeInvalidArgument)

		// cy leaves: her socket still watches g1, and hears no typing.
		rm, err := s.RemoveMember(context.Background(), parley.Principal{User: "ana", DeviceID: "d1"}, "g1", "cy")
		if err != nil {
			t.Fatal(err)
		}
		srv.hub.Publish(parley.Notice{Conv: "g1", Seq: rm.Seq, User: "cy"})
		if f := cy.push(wire.TEvent); f.Ev.Kind != "member_left" {
			t.Fatalf("cy's removal = %+v", f.Ev)
		}
		sent = time.Now()
		typed(ben, "g1")
		wantTyping(t, ana1, "g1", "ben", sent)
		wantTyping(t, ana2, "g1", "ben", sent)
		noPush(t, cy, wire.TTyping, 300*time.Millisecond)
		wantCode(t, cy.do(map[string]any{"t": "typing", "conv": "g1"}), parley.CodeNotMember)

		// Above MaxTypingMembers: accepted, pushed to nobody.
		var many []string
		for i := range parley.MaxTypingMembers {
			u := fmt.Sprintf("m%03d", i)
			if _, err := s.CreateUser(context.Background(), parley.NewUser{ID: u}); err != nil {
				t.Fatal(err)
			}
			many = append(many, u)
		}
		group(t, s, "big", "ana", append(many, "ben")...)
		// ben's join, announced: his socket watches big from then on.
		bigConv, err := s.Conversation(context.Background(), "big")
		if err != nil {
			t.Fatal(err)
		}
		srv.hub.Publish(parley.Notice{Conv: "big", Seq: bigConv.Head, User: "ben"})
		for f := ben.next(); f.T != wire.TEvent || f.Ev.Conv != "big"; f = ben.next() {
			// g1's events before it
		}
		typed(ana1, "big")
		noPush(t, ben, wire.TTyping, 300*time.Millisecond)
	})
}

// TestTypingCrossGateway: a typing frame on one gateway reaches a member's
// socket on another over the PostgreSQL bus.
func TestTypingCrossGateway(t *testing.T) {
	_, s, a, b := twoGateways(t)
	user(t, s, "ana")
	user(t, s, "ben")
	group(t, s, "g1", "ana", "ben")
	ana := subscribed(t, a, s, "ana", "d1")
	ben := subscribed(t, b, s, "ben", "d1")
	// The other gateway's listener may not be up yet: the first frames
	// could be missed, so type until one arrives (each 3 s apart: the
	// throttle).
	deadline := time.Now().Add(20 * time.Second)
	for {
		typed(ana, "g1")
		if f, err := ben.read(parley.TypingEvery + 100*time.Millisecond); err == nil && f.T == wire.TTyping {
			if f.User != "ana" || f.Conv != "g1" {
				t.Fatalf("typing push = %+v", f)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no typing push crossed the gateways")
		}
	}
}
