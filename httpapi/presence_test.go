package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// GET /api/presence answers the caller's own presence and that of users
// sharing an open conversation, leaving strangers and unknown users out;
// bad lists are 400 INVALID_ARGUMENT.
func TestPresenceRoute(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		store := open(t, parley.Options{})
		c := startChat(t, store, "") // ana and bob share g, ana and carl h; bob and carl nothing
		if _, err := store.PutPresence(context.Background(), "gw1", []parley.PresenceLease{{User: "ana", State: parley.PresenceAway}}, time.Minute); err != nil {
			t.Fatal(err)
		}
		var got wire.PresenceList
		c.do("GET", "/api/presence?users=carl,ana,zed,bob", c.bob, nil).want(200).decode(&got)
		if len(got.Presence) != 2 || got.Presence[0].User != "ana" || got.Presence[0].State != "away" || got.Presence[0].LastSeen == "" ||
			got.Presence[1].User != "bob" || got.Presence[1].State != "offline" || got.Presence[1].LastSeen != "" {
			t.Errorf("presence for bob = %+v, want ana away (seen) and bob offline (never seen)", got.Presence)
		}
		for _, q := range []string{"", "users=", "users=ana&users=bob", "users=Not%20One", "users=" + strings.Repeat("u,", 100) + "u"} {
			c.do("GET", "/api/presence?"+q, c.bob, nil).want(400, parley.CodeInvalidArgument)
		}
	})
}
