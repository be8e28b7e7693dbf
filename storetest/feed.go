package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

// Checks of the Feeder part of the contract: what a gateway reads to push
// events, and the heads it watches.

// feed reads one Feed that must succeed.
func (e *env) feed(t *testing.T, conv string, after int64, limit int) parley.Feed {
	t.Helper()
	f, err := e.st.Feed(ctx(t), conv, after, limit)
	ok(t, err, fmt.Sprintf("feed %s after %d", conv, after))
	if f.Conv != conv {
		t.Errorf("feed %s: Conv %q", conv, f.Conv)
	}
	if len(f.Events) > min(limit, parley.MaxPage) {
		t.Fatalf("feed %s: %d events for limit %d", conv, len(f.Events), limit)
	}
	return f
}

// wantMembers compares a feed's periods, in order.
func wantMembers(t *testing.T, what string, got []parley.Membership, want ...parley.Membership) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: members\ngot  %v\nwant %v", what, got, want)
	}
}

// mem is a Membership for tables.
func mem(user string, from, to int64) parley.Membership {
	return parley.Membership{User: user, Period: parley.Period{From: from, To: to}}
}

// sameEvents reports events that differ from want in anything a reader
// sees (description, mid, time, conversation).
func sameEvents(t *testing.T, what string, got, want []parley.Event) {
	t.Helper()
	wantEvents(t, what, got, describeAll(want)...)
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.MID != w.MID || !g.At.Equal(w.At) || g.Conv != w.Conv {
			t.Errorf("%s: seq %d: mid %s at %v conv %q; want %s at %v conv %q", what, g.Seq, g.MID, g.At, g.Conv, w.MID, w.At, w.Conv)
		}
	}
}

// testFeedEventsAndAudience: Feed returns every kind of event, as members
// read them, with the periods overlapping them, so that Audience(seq) is
// exactly the users whose Sync returns seq: a removed member up to their
// removal, a later joiner from their join, a member who left and came back
// in both periods but not between. Only overlapping periods are returned.
// Bad arguments are INVALID_ARGUMENT, an unknown conversation NOT_FOUND,
// and after a rollback Feed reports the new epoch and the periods cut back.
func testFeedEventsAndAudience(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	for _, u := range []string{"ben", "cy", "dan"} {
		e.bystander(t, u)
	}
	const c = "c-abc"
	e.group(t, ana, c, "ben", "cy") // 1..3
	e.send(t, ana, c, "k4", "m4")   // 4
	e.send(t, ana, c, "k5", "m5")   // 5
	change := func(ch parley.MemberChange, err error) {
		t.Helper()
		if err != nil || !ch.Changed {
			t.Fatalf("membership change: %+v %v", ch, err)
		}
	}
	change(e.st.RemoveMember(ctx(t), ana, c, "cy")) // 6
	e.send(t, ana, c, "k7", "m7")                   // 7
	change(e.st.AddMember(ctx(t), ana, c, "dan"))   // 8
	e.send(t, ana, c, "k9", "m9")                   // 9
	ben := parley.Principal{User: "ben", DeviceID: "d1", InstallID: "i1"}
	change(e.st.RemoveMember(ctx(t), ben, c, "ben")) // 10: ben leaves
	e.send(t, ana, c, "k11", "m11")                  // 11
	change(e.st.AddMember(ctx(t), ana, c, "ben"))    // 12: and is back
	e.send(t, ana, c, "k13", "m13")                  // 13

	f := e.feed(t, c, 0, 50)
	wantEvents(t, "feed", f.Events,
		"1 member_joined ana: ana",
		"2 member_joined ana: ben",
		"3 member_joined ana: cy",
		`4 message ana/d1 "m4"`,
		`5 message ana/d1 "m5"`,
		"6 member_left ana: cy",
		`7 message ana/d1 "m7"`,
		"8 member_joined ana: dan",
		`9 message ana/d1 "m9"`,
		"10 member_left ben: ben",
		`11 message ana/d1 "m11"`,
		"12 member_joined ana: ben",
		`13 message ana/d1 "m13"`)
	sameEvents(t, "feed against ana's sync", f.Events, e.syncAll(t, ana, c, 0))
	if f.Head != 13 || f.MinSeq != 1 || f.Epoch != 1 {
		t.Errorf("feed: head %d, min_seq %d, epoch %d; want 13, 1, 1", f.Head, f.MinSeq, f.Epoch)
	}
	wantMembers(t, "feed 1..13", f.Members,
		mem("ana", 1, 0), mem("ben", 1, 10), mem("ben", 12, 0), mem("cy", 1, 6), mem("dan", 8, 0))

	abc, ab, abd, ad := "ana ben cy", "ana ben", "ana ben dan", "ana dan"
	audience := map[int64]string{
		1: abc, 2: abc, 3: abc, 4: abc, 5: abc,
		6:  abc, // cy sees her removal
		7:  ab,
		8:  abd, // dan from his join
		9:  abd,
		10: abd, // ben sees his leaving
		11: ad,
		12: abd,
		13: abd,
	}
	for seq := int64(1); seq <= 13; seq++ {
		if got := strings.Join(f.Audience(seq), " "); got != audience[seq] {
			t.Errorf("Audience(%d) = %q, want %q", seq, got, audience[seq])
		}
	}
	// The audience is what each user's Sync returns, event for event.
	for _, u := range []string{"ana", "ben", "cy", "dan"} {
		var want []int64
		for _, ev := range f.Events {
			if slices.Contains(f.Audience(ev.Seq), u) {
				want = append(want, ev.Seq)
			}
		}
		if got := seqs(e.syncAll(t, parley.Principal{User: u, DeviceID: "d1", InstallID: "i1"}, c, 0)); !slices.Equal(got, want) {
			t.Errorf("%s: sync returns %v, the feed's audience %v", u, got, want)
		}
	}

	// Only the periods that overlap the events come back.
	t.Run("overlap", func(t *testing.T) {
		cases := []struct {
			after int64
			limit int
			seqs  []int64
			want  []parley.Membership
		}{
			{6, 1, []int64{7}, []parley.Membership{mem("ana", 1, 0), mem("ben", 1, 10)}},
			{10, 1, []int64{11}, []parley.Membership{mem("ana", 1, 0), mem("dan", 8, 0)}},
			{9, 3, []int64{10, 11, 12}, []parley.Membership{mem("ana", 1, 0), mem("ben", 1, 10), mem("ben", 12, 0), mem("dan", 8, 0)}},
			{5, 2, []int64{6, 7}, []parley.Membership{mem("ana", 1, 0), mem("ben", 1, 10), mem("cy", 1, 6)}},
			{12, 5, []int64{13}, []parley.Membership{mem("ana", 1, 0), mem("ben", 12, 0), mem("dan", 8, 0)}},
		}
		for _, tc := range cases {
			f := e.feed(t, c, tc.after, tc.limit)
			what := fmt.Sprintf("feed after %d limit %d", tc.after, tc.limit)
			if got := seqs(f.Events); !slices.Equal(got, tc.seqs) {
				t.Errorf("%s: seqs %v, want %v", what, got, tc.seqs)
			}
			wantMembers(t, what, f.Members, tc.want...)
			if f.Head != 13 || f.Epoch != 1 || f.MinSeq != 1 {
				t.Errorf("%s: head %d epoch %d min_seq %d", what, f.Head, f.Epoch, f.MinSeq)
			}
		}
		for _, after := range []int64{13, 99, 1 << 62} {
			f := e.feed(t, c, after, 10)
			if len(f.Events) != 0 || f.Head != 13 || f.Epoch != 1 {
				t.Errorf("feed after %d: %v, head %d, epoch %d; want nothing, 13, 1", after, seqs(f.Events), f.Head, f.Epoch)
			}
		}
	})

	t.Run("rejections", func(t *testing.T) {
		before := e.snapshot(t, c)
		cases := []struct {
			name  string
			conv  string
			after int64
			limit int
			want  parley.Code
		}{
			{"unknown_conv", "c-nope", 0, 10, parley.CodeNotFound},
			{"unknown_conv_after_head", "c-nope", 99, 10, parley.CodeNotFound},
			{"limit_0", c, 0, 0, parley.CodeInvalidArgument},
			{"limit_negative", c, 0, -1, parley.CodeInvalidArgument},
			{"after_negative", c, -1, 10, parley.CodeInvalidArgument},
			{"conv_empty", "", 0, 10, parley.CodeInvalidArgument},
			{"conv_malformed", "c abc", 0, 10, parley.CodeInvalidArgument},
			{"conv_too_long", "c-" + strings.Repeat("x", 63), 0, 10, parley.CodeInvalidArgument},
			{"bad_limit_unknown_conv", "c-nope", 0, 0, parley.CodeInvalidArgument},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := e.st.Feed(ctx(t), tc.conv, tc.after, tc.limit)
				wantCode(t, err, tc.want)
				_, err = e.st.FeedEvents(ctx(t), tc.conv, tc.after, tc.limit)
				wantCode(t, err, tc.want)
			})
		}
		e.unchanged(t, c, before)
	})

	// Rolled back to 9: ben's leaving and return are undone (one period
	// from 1 again), the epoch is 2, and the seqs after 9 are reused.
	t.Run("after_rollback", func(t *testing.T) {
		rr, err := e.st.Rollback(ctx(t), c, 9)
		ok(t, err, "rollback")
		if rr.Head != 9 || rr.Epoch != 2 {
			t.Fatalf("rollback: %+v, want head 9 epoch 2", rr)
		}
		f := e.feed(t, c, 0, 50)
		if got := seqs(f.Events); !slices.Equal(got, span(1, 9)) || f.Head != 9 || f.Epoch != 2 || f.MinSeq != 1 {
			t.Errorf("feed after rollback: seqs %v head %d epoch %d min_seq %d; want 1..9, 9, 2, 1", got, f.Head, f.Epoch, f.MinSeq)
		}
		wantMembers(t, "feed after rollback", f.Members,
			mem("ana", 1, 0), mem("ben", 1, 0), mem("cy", 1, 6), mem("dan", 8, 0))
		s := e.send(t, ana, c, "k13", "m13 again") // 10: the key was rolled back
		if s.Seq != 10 || s.Epoch != 2 {
			t.Fatalf("send after rollback: %+v, want seq 10 epoch 2", s)
		}
		f = e.feed(t, c, 9, 10)
		wantEvents(t, "feed of the reused seq", f.Events, `10 message ana/d1 "m13 again"`)
		if f.Epoch != 2 || f.Head != 10 || strings.Join(f.Audience(10), " ") != abd {
			t.Errorf("feed of the reused seq: epoch %d head %d audience %v; want 2, 10, [ana ben dan]", f.Epoch, f.Head, f.Audience(10))
		}
	})
}

// testFeedRecalledAndPaging: a recalled message comes without its body and
// with Recalled set (the row keeps the body), the recall in its own seq;
// after and limit page through the log exactly once, the limit capped at
// MaxPage; after a purge Feed starts at MinSeq and reports it.
func testFeedRecalledAndPaging(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")       // 1, 2
	e.send(t, ana, c, "k3", "keep") // 3
	e.send(t, ana, c, "k4", "gone") // 4
	e.recall(t, ana, c, 4, "r4")    // 5

	f := e.feed(t, c, 2, 10)
	wantEvents(t, "feed with a recall", f.Events,
		`3 message ana/d1 "keep"`,
		`4 message ana/d1 recalled ""`,
		"5 recall ana/d1 -> 4")
	sameEvents(t, "feed against sync", f.Events, e.sync(t, ana, c, 2, 10).Events)
	if !e.bodyIs(t, c, 4, "gone") {
		t.Errorf("the recalled row lost its body")
	}
	wantMembers(t, "feed 3..5", f.Members, mem("ana", 1, 0), mem("ben", 1, 0))

	_, head := e.fill(t, ana, c, 250) // 6..255
	if head != 255 {
		t.Fatalf("head %d, want 255", head)
	}
	pages := []struct {
		after    int64
		limit    int
		from, to int64
	}{
		{0, 1000, 1, 200}, // capped at MaxPage
		{0, parley.MaxPage + 1, 1, 200},
		{0, parley.MaxPage, 1, 200},
		{200, 1000, 201, 255},
		{0, 1, 1, 1},
		{5, 7, 6, 12},
		{250, 7, 251, 255},
		{255, 7, 1, 0},
	}
	for _, p := range pages {
		f := e.feed(t, c, p.after, p.limit)
		if got := seqs(f.Events); !slices.Equal(got, span(p.from, p.to)) {
			t.Errorf("feed after %d limit %d: %d events %v..., want %d..%d", p.after, p.limit, len(got), got[:min(len(got), 3)], p.from, p.to)
		}
		if f.Head != 255 || f.MinSeq != 1 || f.Epoch != 1 {
			t.Errorf("feed after %d: head %d min_seq %d epoch %d", p.after, f.Head, f.MinSeq, f.Epoch)
		}
	}
	// Walking with limit 7 reads every seq once, in order.
	var walked []parley.Event
	for after := int64(0); ; {
		f := e.feed(t, c, after, 7)
		if len(f.Events) == 0 {
			break
		}
		walked = append(walked, f.Events...)
		after = f.Events[len(f.Events)-1].Seq
		if len(walked) > 1000 {
			t.Fatal("feed walk does not end")
		}
	}
	if got := seqs(walked); !slices.Equal(got, span(1, 255)) {
		t.Errorf("walked %d events, want 1..255 once each", len(got))
	}
	sameEvents(t, "walk against sync", walked, e.syncAll(t, ana, c, 0))

	// After a purge the feed starts at MinSeq.
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 100}), "set retention")
	pr, err := e.st.Purge(ctx(t), c)
	ok(t, err, "purge")
	if pr.MinSeq != 156 {
		t.Fatalf("purge: %+v, want min_seq 156", pr)
	}
	f = e.feed(t, c, 0, 5)
	if got := seqs(f.Events); !slices.Equal(got, span(156, 160)) || f.MinSeq != 156 || f.Head != 255 {
		t.Errorf("feed after purge: seqs %v min_seq %d head %d; want 156..160, 156, 255", got, f.MinSeq, f.Head)
	}
	wantMembers(t, "feed after purge", f.Members, mem("ana", 1, 0), mem("ben", 1, 0))
}

// feedEvents reads one FeedEvents that must succeed and checks it is Feed
// without the periods: the same events and header, Members nil.
func (e *env) feedEvents(t *testing.T, conv string, after int64, limit int) parley.Feed {
	t.Helper()
	f, err := e.st.FeedEvents(ctx(t), conv, after, limit)
	ok(t, err, fmt.Sprintf("feed events %s after %d", conv, after))
	what := fmt.Sprintf("feed events %s after %d limit %d", conv, after, limit)
	full := e.feed(t, conv, after, limit)
	sameEvents(t, what, f.Events, full.Events)
	if f.Conv != conv || f.Head != full.Head || f.MinSeq != full.MinSeq || f.Epoch != full.Epoch {
		t.Errorf("%s: conv %q head %d min_seq %d epoch %d; Feed says %q %d %d %d", what, f.Conv, f.Head, f.MinSeq, f.Epoch, full.Conv, full.Head, full.MinSeq, full.Epoch)
	}
	if f.Members != nil {
		t.Errorf("%s: members %v, want none", what, f.Members)
	}
	return f
}

// rosterAt learns the Roster at seq from a Feed whose last event is seq.
func (e *env) rosterAt(t *testing.T, conv string, seq int64) parley.Roster {
	t.Helper()
	r, found := parley.RosterOf(e.feed(t, conv, seq-1, 1))
	if !found || r.At != seq {
		t.Fatalf("roster at %d: %+v, found %v", seq, r, found)
	}
	return r
}

// testFeedEventsFollowRoster: FeedEvents is Feed without the periods, and
// the membership events it returns are enough to keep the audience: a
// Roster learned at any seq, followed over any FeedEvents after it, gives
// the periods Feed returns for those events (but open where their end is
// after the events) and the Roster Feed would teach after them — through the creation's joins, a removal, a
// leave and re-join inside one read, and a re-join after a while. Follow
// refuses what it cannot explain: a gap, a purged prefix, a new epoch.
func testFeedEventsFollowRoster(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	for _, u := range []string{"ben", "cy", "dan"} {
		e.bystander(t, u)
	}
	const c = "c-follow"
	change := func(ch parley.MemberChange, err error) {
		t.Helper()
		if err != nil || !ch.Changed {
			t.Fatalf("membership change: %+v %v", ch, err)
		}
	}
	ben := parley.Principal{User: "ben", DeviceID: "d1", InstallID: "i1"}
	e.group(t, ana, c, "ben", "cy")                  // 1..3
	e.send(t, ana, c, "k4", "m4")                    // 4
	change(e.st.RemoveMember(ctx(t), ana, c, "cy"))  // 5
	change(e.st.AddMember(ctx(t), ana, c, "dan"))    // 6
	e.send(t, ana, c, "k7", "m7")                    // 7
	change(e.st.RemoveMember(ctx(t), ben, c, "ben")) // 8: ben leaves
	change(e.st.AddMember(ctx(t), ana, c, "ben"))    // 9: and is back
	e.send(t, ana, c, "k10", "m10")                  // 10
	change(e.st.RemoveMember(ctx(t), ana, c, "dan")) // 11
	change(e.st.AddMember(ctx(t), ana, c, "cy"))     // 12: cy again, after a while
	e.send(t, ana, c, "k13", "m13")                  // 13
	const head = 13

	for at := int64(1); at <= head; at++ {
		for _, limit := range []int{1, 2, 3, 5, 50} {
			what := fmt.Sprintf("roster at %d, feed events limit %d", at, limit)
			r := e.rosterAt(t, c, at)
			fe := e.feedEvents(t, c, at, limit)
			members, next, followed := r.Follow(fe)
			if !followed {
				t.Errorf("%s: not followed", what)
				continue
			}
			if at == head {
				if len(fe.Events) != 0 || next.At != r.At || !slices.Equal(next.Open, r.Open) {
					t.Errorf("%s: events %v, next %+v; want none and the roster as it was", what, seqs(fe.Events), next)
				}
				continue
			}
			full := e.feed(t, c, at, limit)
			wantMembers(t, what, members, endsIn(full)...)
			want, _ := parley.RosterOf(full)
			if next.At != want.At || next.Epoch != want.Epoch || !slices.Equal(next.Open, want.Open) {
				t.Errorf("%s: next %+v, want %+v", what, next, want)
			}
		}
	}

	// Walking the log by FeedEvents from the roster at 1 ends with the
	// roster Feed teaches at the head.
	r := e.rosterAt(t, c, 1)
	for r.At < head {
		var followed bool
		if _, r, followed = r.Follow(e.feedEvents(t, c, r.At, 2)); !followed {
			t.Fatalf("walk: not followed at %d", r.At)
		}
	}
	wantMembers(t, "walked roster", r.Open, mem("ana", 1, 0), mem("ben", 9, 0), mem("cy", 12, 0))

	refused := func(what string, r parley.Roster, f parley.Feed) {
		t.Helper()
		if _, _, followed := r.Follow(f); followed {
			t.Errorf("%s: followed, want refused", what)
		}
	}
	refused("a gap", e.rosterAt(t, c, 4), e.feedEvents(t, c, 5, 10))

	t.Run("after_purge", func(t *testing.T) {
		const p = "c-follow-purge"
		e.group(t, ana, p, "ben") // 1, 2
		e.fill(t, ana, p, 8)      // 3..10
		r := e.rosterAt(t, p, 2)
		ok(t, e.st.SetRetention(ctx(t), p, parley.Retention{KeepLast: 4}), "set retention")
		_, err := e.st.Purge(ctx(t), p)
		ok(t, err, "purge")
		refused("a purged prefix", r, e.feedEvents(t, p, 2, 10))
	})

	t.Run("after_rollback", func(t *testing.T) {
		r := e.rosterAt(t, c, 7)
		_, err := e.st.Rollback(ctx(t), c, 7)
		ok(t, err, "rollback")
		refused("a new epoch", r, e.feedEvents(t, c, 7, 10))
		// A roster of the new epoch follows again.
		e.send(t, ana, c, "k14", "m14") // 8
		r = e.rosterAt(t, c, 7)
		members, _, followed := r.Follow(e.feedEvents(t, c, 7, 10))
		if !followed || r.Epoch != 2 {
			t.Fatalf("new epoch: followed %v, roster %+v", followed, r)
		}
		wantMembers(t, "after rollback", members, endsIn(e.feed(t, c, 7, 10))...)
	})
}

// endsIn returns f's periods as the events of f tell them: one that ends
// after f's last event is open (its end is not in f).
func endsIn(f parley.Feed) []parley.Membership {
	last := f.Events[len(f.Events)-1].Seq
	ms := slices.Clone(f.Members)
	for i := range ms {
		if ms[i].To > last {
			ms[i].To = 0
		}
	}
	return ms
}

// headsOf renders heads sorted by conversation: "c1:4@1 c3:5@1".
func headsOf(hs []parley.Head) string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("%s:%d@%d", h.Conv, h.Seq, h.Epoch)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// testHeadsAndJoined: Heads answers the existing conversations named
// (unknown and malformed ids left out, none for none); Joined lists the
// conversations where the user has an open period — not the ones they
// left, again the ones they rejoined — with heads and epochs that follow
// sends and rollbacks. OpenPeriods gives the same for many users at once,
// with the seq each open period started at.
func testHeadsAndJoined(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	for _, u := range []string{"cy", "dan"} {
		e.bystander(t, u)
	}
	e.group(t, ana, "c1", "ben")       // 1, 2
	e.send(t, ana, "c1", "k3", "m3")   // 3
	e.send(t, ben, "c1", "k4", "m4")   // 4
	e.group(t, ana, "c2", "cy")        // 1, 2
	e.send(t, ana, "c2", "k3", "m3")   // 3
	e.group(t, ana, "c3", "ben", "cy") // 1..3
	if ch, err := e.st.RemoveMember(ctx(t), ben, "c3", "ben"); err != nil || ch.Seq != 4 {
		t.Fatalf("ben leaves c3: %+v %v", ch, err)
	}
	e.send(t, ana, "c3", "k5", "m5") // 5
	e.group(t, ben, "c4", "cy")      // 1, 2

	heads := func(ids ...string) string {
		t.Helper()
		hs, err := e.st.Heads(ctx(t), ids)
		ok(t, err, fmt.Sprintf("heads %v", ids))
		return headsOf(hs)
	}
	joined := func(user string) string {
		t.Helper()
		hs, err := e.st.Joined(ctx(t), user)
		ok(t, err, "joined "+user)
		return headsOf(hs)
	}
	// open lists OpenPeriods in the order returned (by user, then conv).
	open := func(users ...string) string {
		t.Helper()
		ps, err := e.st.OpenPeriods(ctx(t), users)
		ok(t, err, fmt.Sprintf("open periods %v", users))
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = fmt.Sprintf("%s/%s:%d-%d@%d", p.User, p.Conv, p.From, p.Seq, p.Epoch)
		}
		return strings.Join(out, " ")
	}
	check := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %q, want %q", what, got, want)
		}
	}

	check("Heads(c1, c-nope, c3, bad id)", heads("c1", "c-nope", "c3", "bad id"), "c1:4@1 c3:5@1")
	check("Heads(all)", heads("c4", "c3", "c2", "c1"), "c1:4@1 c2:3@1 c3:5@1 c4:2@1")
	check("Heads(c-nope)", heads("c-nope"), "")
	check("Heads()", heads(), "")

	check("Joined(ana)", joined("ana"), "c1:4@1 c2:3@1 c3:5@1")
	check("Joined(ben)", joined("ben"), "c1:4@1 c4:2@1") // not c3: he left
	check("Joined(cy)", joined("cy"), "c2:3@1 c3:5@1 c4:2@1")
	check("Joined(dan)", joined("dan"), "")       // in nothing
	check("Joined(nobody)", joined("nobody"), "") // no such user

	check("OpenPeriods(cy, ben, dan, nobody, bad id)", open("cy", "ben", "dan", "nobody", "Bad Id"),
		"ben/c1:1-4@1 ben/c4:1-2@1 cy/c2:1-3@1 cy/c3:1-5@1 cy/c4:1-2@1")
	check("OpenPeriods()", open(), "")

	// Back in c3, ben watches it again; a rollback shows in heads and epochs.
	if ch, err := e.st.AddMember(ctx(t), ana, "c3", "ben"); err != nil || ch.Seq != 6 {
		t.Fatalf("ben back in c3: %+v %v", ch, err)
	}
	if rr, err := e.st.Rollback(ctx(t), "c2", 2); err != nil || rr.Head != 2 || rr.Epoch != 2 {
		t.Fatalf("rollback c2: %+v %v", rr, err)
	}
	check("Joined(ben) after rejoining", joined("ben"), "c1:4@1 c3:6@1 c4:2@1")
	check("OpenPeriods(ben) after rejoining", open("ben"), "ben/c1:1-4@1 ben/c3:6-6@1 ben/c4:1-2@1")
	check("Joined(cy) after the rollback", joined("cy"), "c2:2@2 c3:6@1 c4:2@1")
	check("Heads after both", heads("c2", "c3"), "c2:2@2 c3:6@1")

	// Removed from c4 by its owner, cy no longer watches it.
	if ch, err := e.st.RemoveMember(ctx(t), ben, "c4", "cy"); err != nil || ch.Seq != 3 {
		t.Fatalf("remove cy from c4: %+v %v", ch, err)
	}
	check("Joined(cy) after removal", joined("cy"), "c2:2@2 c3:6@1")
	check("OpenPeriods(cy) after the rollback and removal", open("cy"), "cy/c2:1-2@2 cy/c3:1-6@1")
	check("Joined(ben) after removing cy", joined("ben"), "c1:4@1 c3:6@1 c4:3@1")
}
