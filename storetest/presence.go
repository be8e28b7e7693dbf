package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

func lease(user string, st parley.PresenceState) parley.PresenceLease {
	return parley.PresenceLease{User: user, State: st}
}

// changes renders presence changes as "user state".
func changes(ps []parley.Presence) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.User+" "+string(p.State))
	}
	return out
}

func wantChanges(t *testing.T, what string, got []parley.Presence, err error, want ...string) {
	t.Helper()
	ok(t, err, what)
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(changes(got), want) {
		t.Errorf("%s: changes %q, want %q", what, changes(got), want)
	}
	for _, p := range got {
		if p.LastSeen.IsZero() {
			t.Errorf("%s: %s changed without a last seen time", what, p.User)
		}
	}
}

// A user is online while any lease is online, away while all are away,
// offline with none; each put reports exactly the changes of the
// announced presence, with the last seen time moving forward.
func testPresenceLeases(t *testing.T, e *env) {
	for _, u := range []string{"ann", "ben"} {
		e.bystander(t, u)
	}
	put := func(gw string, ls ...parley.PresenceLease) ([]parley.Presence, error) {
		return e.st.PutPresence(ctx(t), gw, ls, time.Minute)
	}
	got, err := put("gw1", lease("ann", parley.PresenceOnline), lease("ben", parley.PresenceAway))
	wantChanges(t, "first leases", got, err, "ann online", "ben away")
	first := got[0].LastSeen
	got, err = put("gw1", lease("ann", parley.PresenceOnline), lease("ben", parley.PresenceAway))
	wantChanges(t, "renewal", got, err)
	got, err = put("gw2", lease("ann", parley.PresenceAway))
	wantChanges(t, "away on another gateway", got, err)
	got, err = put("gw1", lease("ann", parley.PresenceAway), lease("ben", parley.PresenceOnline))
	wantChanges(t, "all of ann's away, ben back", got, err, "ann away", "ben online")
	got, err = put("gw1", lease("ann", parley.PresenceOffline))
	wantChanges(t, "one lease given up", got, err)
	got, err = put("gw2", lease("ann", parley.PresenceOffline))
	wantChanges(t, "the last lease given up", got, err, "ann offline")
	if len(got) == 1 && got[0].LastSeen.Before(first) {
		t.Errorf("last seen went back: %v, then %v", first, got[0].LastSeen)
	}
	got, err = put("gw2", lease("ann", parley.PresenceOffline))
	wantChanges(t, "giving up no lease", got, err)
	got, err = put("gw3")
	wantChanges(t, "no leases", got, err)

	for _, c := range []struct {
		name string
		gw   string
		ls   []parley.PresenceLease
		ttl  time.Duration
	}{
		{"bad gateway", "gw 1", []parley.PresenceLease{lease("ann", parley.PresenceOnline)}, time.Minute},
		{"empty gateway", "", nil, time.Minute},
		{"bad state", "gw1", []parley.PresenceLease{lease("ann", "busy")}, time.Minute},
		{"bad user", "gw1", []parley.PresenceLease{lease("Ann!", parley.PresenceOnline)}, time.Minute},
		{"user twice", "gw1", []parley.PresenceLease{lease("ann", parley.PresenceOnline), lease("ann", parley.PresenceAway)}, time.Minute},
		{"no ttl", "gw1", []parley.PresenceLease{lease("ann", parley.PresenceOnline)}, 0},
	} {
		_, err := e.st.PutPresence(ctx(t), c.gw, c.ls, c.ttl)
		if !wantCode(t, err, parley.CodeInvalidArgument) {
			t.Errorf("(%s)", c.name)
		}
	}
	if n := e.db.Int(t, `SELECT count(*) FROM presence_leases`); n != 1 {
		t.Errorf("%d leases after the rejected puts, want ben's 1", n)
	}
	_, err = e.st.SweepPresence(ctx(t), 0)
	wantCode(t, err, parley.CodeInvalidArgument)
}

// Expired leases are swept once: concurrent sweeps of two store handles
// (two gateways) report each change exactly once, and a user with
// another live lease stays as it says.
func testPresenceSweep(t *testing.T, e *env) {
	const n = 40
	var users []string
	for i := range n {
		u := fmt.Sprintf("u%02d", i)
		e.bystander(t, u)
		users = append(users, u)
	}
	var short []parley.PresenceLease
	for _, u := range users {
		short = append(short, lease(u, parley.PresenceOnline))
	}
	got, err := e.st.PutPresence(ctx(t), "dead", short, 500*time.Millisecond)
	ok(t, err, "short leases")
	if len(got) != n {
		t.Fatalf("%d changes, want %d", len(got), n)
	}
	_, err = e.st.PutPresence(ctx(t), "alive", []parley.PresenceLease{lease("u00", parley.PresenceAway)}, time.Hour)
	ok(t, err, "a live lease")
	time.Sleep(700 * time.Millisecond) // the short leases expire

	other := e.db.Open(t)
	var mu sync.Mutex
	var all []parley.Presence
	var wg sync.WaitGroup
	for _, st := range []parley.Store{e.st, other, e.st, other} {
		wg.Go(func() {
			for {
				ps, err := st.SweepPresence(ctx(t), 7)
				if err != nil {
					t.Errorf("sweep: %v", err)
					return
				}
				mu.Lock()
				all = append(all, ps...)
				mu.Unlock()
				if len(ps) == 0 && e.db.Int(t, `SELECT count(*) FROM presence_leases WHERE gateway = 'dead'`) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]string{}
	for _, p := range all {
		if old, dup := seen[p.User]; dup {
			t.Errorf("%s reported twice: %s, then %s", p.User, old, p.State)
		}
		seen[p.User] = string(p.State)
	}
	for _, u := range users {
		want := "offline"
		if u == "u00" {
			want = "away"
		}
		if seen[u] != want {
			t.Errorf("%s: swept to %q, want %q", u, seen[u], want)
		}
	}
	again, err := e.st.SweepPresence(ctx(t), 100)
	wantChanges(t, "a second sweep", again, err)
}

// Presence reads only the caller and the users sharing an open
// conversation with the caller, unknown users left out; Sharing answers
// the same question for the fan-out.
func testPresenceRead(t *testing.T, e *env) {
	ann := e.member(t, "ann")
	for _, u := range []string{"ben", "cy", "dee"} {
		e.bystander(t, u)
	}
	e.group(t, ann, "g1", "ben", "dee")
	_, err := e.st.PutPresence(ctx(t), "gw1", []parley.PresenceLease{lease("ben", parley.PresenceAway), lease("cy", parley.PresenceOnline)}, time.Minute)
	ok(t, err, "leases")

	got, err := e.st.Presence(ctx(t), ann, []string{"zed", "cy", "ben", "ann", "ben", "dee"})
	ok(t, err, "presence")
	if s := changes(got); !slices.Equal(s, []string{"ann offline", "ben away", "dee offline"}) {
		t.Errorf("presence = %q, want ann, ben, dee (not cy, not zed)", s)
	}
	for _, p := range got {
		if (p.User == "ben") == p.LastSeen.IsZero() {
			t.Errorf("%s: last seen %v (only ben was ever seen)", p.User, p.LastSeen)
		}
	}
	sharing, err := e.st.Sharing(ctx(t), "ann", []string{"ann", "ben", "cy", "zed", "Bad!", "dee"})
	ok(t, err, "sharing")
	if !slices.Equal(sharing, []string{"ben", "dee"}) {
		t.Errorf("sharing = %q, want ben, dee", sharing)
	}

	// ben leaves: ann sees him no more, nor he her.
	_, err = e.st.RemoveMember(ctx(t), ann, "g1", "ben")
	ok(t, err, "remove ben")
	got, err = e.st.Presence(ctx(t), ann, []string{"ben"})
	ok(t, err, "presence of a former member")
	if len(got) != 0 {
		t.Errorf("a former member's presence is read: %q", changes(got))
	}
	sharing, err = e.st.Sharing(ctx(t), "ben", []string{"ann", "dee"})
	ok(t, err, "sharing of a former member")
	if len(sharing) != 0 {
		t.Errorf("a former member shares with %q", sharing)
	}

	many := make([]string, parley.MaxPresenceUsers+1)
	for i := range many {
		many[i] = fmt.Sprintf("u%d", i)
	}
	for _, users := range [][]string{nil, {}, many, {"ann", "Not A User"}} {
		_, err := e.st.Presence(ctx(t), ann, users)
		wantCode(t, err, parley.CodeInvalidArgument)
	}
}
