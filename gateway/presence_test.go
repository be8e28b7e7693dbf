package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// wantPresence reads c's next presence push and checks it.
func wantPresence(t *testing.T, c *client, user string, state parley.PresenceState) {
	t.Helper()
	f := c.push(wire.TPresence)
	if f.User != user || f.State != string(state) || f.LastSeen == "" {
		t.Fatalf("presence push = %+v, want %s %s with last_seen", f, user, state)
	}
}

// TestPresence: a user's presence changes (connect, away, online, the last
// socket closed) reach the subscribed sockets of users who share an open
// conversation with them, not strangers', not their own; a lease left by a
// gateway that stopped renewing is swept and announced offline; GET-like
// reads see the same.
func TestPresence(t *testing.T) {
	stores(t, func(t *testing.T, s parley.Store) {
		srv := newServer(t, s, gateway.Options{PresenceTTL: 600 * time.Millisecond})
		for _, u := range []string{"ana", "ben", "cy", "dee"} {
			user(t, s, u)
		}
		group(t, s, "g1", "ana", "ben", "dee")
		group(t, s, "g2", "ana", "cy") // cy shares nothing with ben
		ben, cy := subscribed(t, srv, s, "ben", "d1"), subscribed(t, srv, s, "cy", "d1")
		ben.presence, cy.presence = true, true

		ana := subscribed(t, srv, s, "ana", "d1")
		ana.presence = true
		wantPresence(t, ben, "ana", parley.PresenceOnline)
		wantPresence(t, cy, "ana", parley.PresenceOnline) // they share g2
		noPush(t, ana, wire.TPresence, 0)

		ana.raw(websocket.MessageText, []byte(`{"t":"presence","state":"away"}`))
		wantPresence(t, ben, "ana", parley.PresenceAway)
		ana2 := subscribed(t, srv, s, "ana", "d2") // a new socket is online
		wantPresence(t, ben, "ana", parley.PresenceOnline)
		ana2.ws.Close(websocket.StatusNormalClosure, "")
		wantPresence(t, ben, "ana", parley.PresenceAway)
		wantCode(t, ana.do(map[string]any{"t": "presence", "state": "gone"}), parley.CodeInvalidArgument)
		ana.ws.Close(websocket.StatusNormalClosure, "")
		wantPresence(t, ben, "ana", parley.PresenceOffline)
		noPush(t, ben, wire.TPresence, 300*time.Millisecond) // ben's own changes are not his to hear

		// dee's lease, held by a gateway that died: swept, offline.
		if _, err := s.PutPresence(context.Background(), "dead-gateway", []parley.PresenceLease{{User: "dee", State: parley.PresenceOnline}}, 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		wantPresence(t, ben, "dee", parley.PresenceOffline)
		// cy shares nothing with dee: she hears only of ana.
		for f, err := cy.read(300 * time.Millisecond); err == nil; f, err = cy.read(300 * time.Millisecond) {
			if f.T == wire.TPresence && f.User != "ana" {
				t.Errorf("cy heard of %s: %+v", f.User, f)
			}
		}

		got, err := s.Presence(context.Background(), parley.Principal{User: "ben"}, []string{"ana", "cy", "dee"})
		if err != nil || len(got) != 2 || got[0].State != parley.PresenceOffline || got[1].State != parley.PresenceOffline {
			t.Errorf("presence read by ben = %+v, %v", got, err)
		}
	})
}
