package parley_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/parleychat/parley"
)

// TestRosterFollow: what Roster.Follow refuses (storetest checks what it
// gives against the stores): another epoch, an epoch not known, events that
// do not run on from At, a leave of a user not in. A join of a user already
// in is the creation's (their period opened at 1) and changes nothing; with
// no membership event the periods are the roster's own, not a copy.
func TestRosterFollow(t *testing.T) {
	open := func(user string, from int64) parley.Membership {
		return parley.Membership{User: user, Period: parley.Period{From: from}}
	}
	r := parley.Roster{At: 3, Epoch: 1, Open: []parley.Membership{open("ana", 1), open("ben", 1)}}
	ev := func(seq int64, kind parley.EventKind, user string) parley.Event {
		return parley.Event{Seq: seq, Kind: kind, User: user}
	}
	msg := func(seq int64) parley.Event { return ev(seq, parley.EventMessage, "") }
	feed := func(epoch int64, evs ...parley.Event) parley.Feed {
		return parley.Feed{Conv: "c", Events: evs, Epoch: epoch, Head: evs[len(evs)-1].Seq}
	}
	for _, tc := range []struct {
		name string
		r    parley.Roster
		f    parley.Feed
	}{
		{"other_epoch", r, feed(2, msg(4))},
		{"no_epoch", parley.Roster{At: 3, Open: r.Open}, feed(0, msg(4))},
		{"gap_before", r, feed(1, msg(5))},
		{"gap_inside", r, feed(1, msg(4), msg(6))},
		{"behind", r, feed(1, msg(3), msg(4))},
		{"leave_of_a_stranger", r, feed(1, msg(4), ev(5, parley.EventMemberLeft, "cy"))},
		{"leave_twice", r, feed(1, ev(4, parley.EventMemberLeft, "ben"), ev(5, parley.EventMemberLeft, "ben"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ms, next, ok := tc.r.Follow(tc.f); ok {
				t.Errorf("followed: %v, %+v; want refused", ms, next)
			}
		})
	}

	ms, next, ok := r.Follow(feed(1, ev(4, parley.EventMemberJoined, "ben"), msg(5)))
	if !ok || !slices.Equal(ms, r.Open) || next.At != 5 || !slices.Equal(next.Open, r.Open) {
		t.Errorf("join of a member: %v %+v %v; want no change, at 5", ms, next, ok)
	}
	ms, next, ok = r.Follow(feed(1, msg(4), msg(5)))
	if !ok || &ms[0] != &r.Open[0] || &next.Open[0] != &r.Open[0] || next.At != 5 {
		t.Errorf("messages only: the periods were copied or changed: %v %+v %v", ms, next, ok)
	}
	ms, next, ok = r.Follow(feed(1,
		ev(4, parley.EventMemberLeft, "ben"), ev(5, parley.EventMemberJoined, "ben"),
		ev(6, parley.EventMemberJoined, "cy"), ev(7, parley.EventMemberLeft, "ana")))
	want := []parley.Membership{{User: "ana", Period: parley.Period{From: 1, To: 7}},
		{User: "ben", Period: parley.Period{From: 1, To: 4}}, open("ben", 5), open("cy", 6)}
	if !ok || !slices.Equal(ms, want) || fmt.Sprint(next.Open) != fmt.Sprint([]parley.Membership{open("ben", 5), open("cy", 6)}) || next.At != 7 {
		t.Errorf("changes: %v %+v %v; want %v", ms, next, ok, want)
	}
	if fmt.Sprint(r.Open) != fmt.Sprint([]parley.Membership{open("ana", 1), open("ben", 1)}) {
		t.Errorf("Follow changed the roster it followed: %v", r.Open)
	}
}
