package storetest

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of conversations: creation, membership periods, listing, cursors,
// retention and rollback.

// tombstoneTTL is the TTL of the tombstone_ttl check: long enough that two
// purges in a row fall inside it, short enough to wait out.
const tombstoneTTL = 2 * time.Second

// testFormerMemberCaps: nothing a former member reads carries a seq above
// their last visible one, even after a purge deleted everything
// up to after it: min_seq is capped at the capped head + 1 (the "nothing
// stored" value) in sync pages and convs entries, and cursors stay at most
// the cap. Members are unaffected.
func testFormerMemberCaps(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	cy := e.member(t, "cy")
	const c = "c-caps"
	e.group(t, ana, c, "cy")     // 1, 2
	e.send(t, cy, c, "k3", "m3") // 3
	if ch, err := e.st.RemoveMember(ctx(t), ana, c, "cy"); err != nil || ch.Seq != 4 {
		t.Fatalf("remove cy: %+v %v", ch, err)
	}
	for i := 5; i <= 9; i++ {
		e.send(t, ana, c, fmt.Sprint("k", i), fmt.Sprint("m", i))
	}
	if got, err := e.st.Read(ctx(t), cy, c, 4); err != nil || got != 4 {
		t.Fatalf("cy reads her removal: %d %v", got, err)
	}
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 2}), "keep last 2")
	if r, err := e.st.Purge(ctx(t), c); err != nil || r.MinSeq != 8 {
		t.Fatalf("purge: %+v %v", r, err)
	}

	pg := e.sync(t, cy, c, 0, 50)
	if pg.Head != 4 || pg.MinSeq != 5 || !pg.Trimmed || pg.NextAfter != 4 || len(pg.Events) != 0 {
		t.Errorf("cy's page: head %d, min_seq %d, trimmed %v, next_after %d, %d events; want head 4, min_seq 5 (not 8), trimmed, next_after 4, none",
			pg.Head, pg.MinSeq, pg.Trimmed, pg.NextAfter, len(pg.Events))
	}
	s := e.summary(t, cy, c)
	if s.Head != 4 || s.MinSeq != 5 || s.Read != 4 || s.Delivered > 4 || s.Unread != 0 || s.Last != nil {
		t.Errorf("cy's convs entry: %+v (last %v); want head 4, min_seq 5, read 4, nothing unread, no last", s, s.Last)
	}
	if got, err := e.st.Read(ctx(t), cy, c, 2); err != nil || got != 4 {
		t.Errorf("cy's lower read answers %d %v, want her cursor 4", got, err)
	}
	_, err := e.st.Read(ctx(t), cy, c, 5)
	wantCode(t, err, parley.CodeCursorAhead)

	// A member sees the conversation as it is.
	if pg := e.sync(t, ana, c, 0, 50); pg.Head != 9 || pg.MinSeq != 8 {
		t.Errorf("ana's page: head %d, min_seq %d; want 9, 8", pg.Head, pg.MinSeq)
	}
	if s := e.summary(t, ana, c); s.Head != 9 || s.MinSeq != 8 {
		t.Errorf("ana's convs entry: head %d, min_seq %d; want 9, 8", s.Head, s.MinSeq)
	}
}

// testMembershipPeriods: join, leave, rejoin. The user sees exactly the
// events inside their periods (their join, their own removal, the rejoin);
// a former member's head is capped at the end of their last period, after
// above it is CURSOR_AHEAD, Convs still lists the conversation, and
// NextAfter steps over the invisible range without skipping a visible
// event.
func testMembershipPeriods(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	cy := e.member(t, "cy")
	const c = "c-abc"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "m3")
	if ch, err := e.st.AddMember(ctx(t), ana, c, "cy"); err != nil || ch != (parley.MemberChange{Conv: c, User: "cy", Seq: 4, Changed: true}) {
		t.Fatalf("add cy: %+v %v", ch, err)
	}
	e.send(t, ana, c, "k5", "m5")
	e.send(t, cy, c, "k6", "m6")
	if ch, err := e.st.RemoveMember(ctx(t), ana, c, "cy"); err != nil || ch != (parley.MemberChange{Conv: c, User: "cy", Seq: 7, Changed: true}) {
		t.Fatalf("remove cy: %+v %v", ch, err)
	}
	e.send(t, ana, c, "k8", "m8")
	e.send(t, ben, c, "k9", "m9")

	former := []string{
		"4 member_joined ana: cy",
		`5 message ana/d1 "m5"`,
		`6 message cy/d1 "m6"`,
		"7 member_left ana: cy",
	}
	t.Run("former_member_reads_inside_period", func(t *testing.T) {
		pg := e.sync(t, cy, c, 0, 50)
		wantEvents(t, "cy's history", pg.Events, former...)
		wantPage(t, "after 0", pg, span(4, 7), 7, false, 7)
		wantPage(t, "after 0 limit 2", e.sync(t, cy, c, 0, 2), span(4, 5), 5, true, 7)
		wantPage(t, "after 5 limit 2", e.sync(t, cy, c, 5, 2), span(6, 7), 7, false, 7)
		wantPage(t, "after 2", e.sync(t, cy, c, 2, 50), span(4, 7), 7, false, 7)
		wantPage(t, "after 7", e.sync(t, cy, c, 7, 50), nil, 7, false, 7)
		if ev := e.fetch(t, cy, c, 7); ev.Kind != parley.EventMemberLeft || ev.User != "cy" || ev.Sender != "ana" || ev.Device != "" {
			t.Errorf("own removal: %s", describe(ev))
		}
	})
	t.Run("former_member_head_capped", func(t *testing.T) {
		before := e.snapshot(t, c)
		for _, after := range []int64{8, 9, 100} {
			_, err := e.st.Sync(ctx(t), cy, parley.SyncRequest{Conv: c, After: after, Limit: 10})
			wantCode(t, err, parley.CodeCursorAhead)
		}
		_, err := e.st.Fetch(ctx(t), cy, c, 8)
		wantCode(t, err, parley.CodeNotFound)
		_, err = e.st.Fetch(ctx(t), cy, c, 3)
		wantCode(t, err, parley.CodeNotMember)
		_, err = e.st.Ack(ctx(t), cy, c, 8)
		wantCode(t, err, parley.CodeCursorAhead)
		_, err = e.st.Read(ctx(t), cy, c, 8)
		wantCode(t, err, parley.CodeCursorAhead)
		e.unchanged(t, c, before)

		s := e.summary(t, cy, c)
		if s.Head != 7 || s.Member || s.Epoch != 1 || s.MinSeq != 1 || s.Unread != 1 || s.Last == nil || s.Last.Seq != 6 {
			t.Errorf("convs entry of the former member: %+v (last %v); want head 7, not a member, unread 1 (seq 5), last seq 6", s, s.Last)
		}
		if got, err := e.st.Ack(ctx(t), cy, c, 7); err != nil || got != 7 {
			t.Errorf("ack at the capped head: %d %v", got, err)
		}
	})
	t.Run("former_member_cannot_write", func(t *testing.T) {
		before := e.snapshot(t, c)
		_, err := e.st.Send(ctx(t), cy, parley.SendRequest{Conv: c, CMID: "k-new", Body: "let me in"})
		wantCode(t, err, parley.CodeNotMember)
		_, err = e.st.Recall(ctx(t), cy, parley.RecallRequest{Conv: c, Target: 6, CMID: "r6"})
		wantCode(t, err, parley.CodeNotMember)
		_, err = e.st.AddMember(ctx(t), cy, c, "cy")
		wantCode(t, err, parley.CodeNotMember)
		e.unchanged(t, c, before)
	})
	t.Run("rejoin", func(t *testing.T) {
		// A member who is not the owner may add.
		if ch, err := e.st.AddMember(ctx(t), ben, c, "cy"); err != nil || ch.Seq != 10 || !ch.Changed {
			t.Fatalf("re-add cy: %+v %v", ch, err)
		}
		e.send(t, ana, c, "k11", "m11")
		all := append(slices.Clone(former), "10 member_joined ben: cy", `11 message ana/d1 "m11"`)
		wantEvents(t, "cy's history after rejoining", e.syncAll(t, cy, c, 0), all...)
		wantPage(t, "page 1", e.sync(t, cy, c, 0, 2), span(4, 5), 5, true, 11)
		wantPage(t, "page 2", e.sync(t, cy, c, 5, 2), span(6, 7), 7, true, 11)
		wantPage(t, "page 3", e.sync(t, cy, c, 7, 2), span(10, 11), 11, false, 11)
		wantPage(t, "after 7 limit 1", e.sync(t, cy, c, 7, 1), []int64{10}, 10, true, 11)
		wantPage(t, "after 8 (between periods)", e.sync(t, cy, c, 8, 10), span(10, 11), 11, false, 11)
		_, err := e.st.Fetch(ctx(t), cy, c, 8)
		wantCode(t, err, parley.CodeNotMember)
		if s := e.summary(t, cy, c); !s.Member || s.Head != 11 {
			t.Errorf("convs entry after rejoining: %+v", s)
		}
		if n := e.db.Int(t, "SELECT count(*) FROM periods WHERE conv_id = ? AND user_id = ?", c, "cy"); n != 2 {
			t.Errorf("cy has %d periods, want 2", n)
		}
		if n := e.db.Int(t, "SELECT count(*) FROM periods WHERE conv_id = ? AND user_id = ? AND from_seq = 4 AND to_seq = 7", c, "cy"); n != 1 {
			t.Errorf("cy's first period is not [4, 7]")
		}
		if n := e.db.Int(t, "SELECT count(*) FROM periods WHERE conv_id = ? AND user_id = ? AND from_seq = 10 AND to_seq IS NULL", c, "cy"); n != 1 {
			t.Errorf("cy's second period is not [10, open)")
		}
	})
	t.Run("members_see_membership_events", func(t *testing.T) {
		wantEvents(t, "ben's history", e.syncAll(t, ben, c, 0),
			"1 member_joined ana: ana",
			"2 member_joined ana: ben",
			`3 message ana/d1 "m3"`,
			"4 member_joined ana: cy",
			`5 message ana/d1 "m5"`,
			`6 message cy/d1 "m6"`,
			"7 member_left ana: cy",
			`8 message ana/d1 "m8"`,
			`9 message ben/d1 "m9"`,
			"10 member_joined ben: cy",
			`11 message ana/d1 "m11"`)
	})
}

// testMemberRules: AddMember and RemoveMember check order, no-ops (Changed
// false, Seq 0, nothing stored), admins, self-leave, and direct
// conversations (no member changes at all).
func testMemberRules(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	e.bystander(t, "dan")
	e.user(t, "root", "", parley.RoleAdmin)
	root := e.login(t, "root", "d1", "i1").Principal
	if root.Role != parley.RoleAdmin {
		t.Fatalf("admin principal has role %q", root.Role)
	}
	const c = "c-ab"
	e.group(t, ana, c, "ben")

	type change func() (parley.MemberChange, error)
	add := func(p parley.Principal, conv, user string) change {
		return func() (parley.MemberChange, error) { return e.st.AddMember(ctx(t), p, conv, user) }
	}
	remove := func(p parley.Principal, conv, user string) change {
		return func() (parley.MemberChange, error) { return e.st.RemoveMember(ctx(t), p, conv, user) }
	}
	// noop and reject must leave storage as it was.
	noop := func(name, conv string, do change) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.snapshot(t, conv)
			ch, err := do()
			if wantCode(t, err, "") && (ch.Changed || ch.Seq != 0) {
				t.Errorf("got %+v, want a no-op (Changed false, Seq 0)", ch)
			}
			e.unchanged(t, conv, before)
		})
	}
	reject := func(name, conv string, do change, want parley.Code) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.snapshot(t, conv)
			_, err := do()
			wantCode(t, err, want)
			e.unchanged(t, conv, before)
		})
	}
	changed := func(name string, do change, seq int64) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			ch, err := do()
			if wantCode(t, err, "") && (!ch.Changed || ch.Seq != seq || ch.Conv != c) {
				t.Errorf("got %+v, want a change at seq %d", ch, seq)
			}
			if h := e.conv(t, c).Head; h != seq {
				t.Errorf("head %d, want %d", h, seq)
			}
		})
	}

	noop("add_member_already_in", c, add(ana, c, "ben"))
	noop("add_owner_already_in", c, add(ben, c, "ana"))
	noop("remove_user_not_in", c, remove(ana, c, "dan"))
	noop("remove_unknown_user", c, remove(ana, c, "ghost"))
	reject("add_unknown_user", c, add(ana, c, "ghost"), parley.CodeNotFound)
	reject("remove_other_as_plain_member", c, remove(ben, c, "ana"), parley.CodePermissionDenied)
	reject("remove_user_not_in_as_plain_member", c, remove(ben, c, "dan"), parley.CodePermissionDenied)
	reject("remove_unknown_conv", "c-nope", remove(ana, "c-nope", "ben"), parley.CodeNotMember)
	reject("add_unknown_conv_as_admin", "c-nope", add(root, "c-nope", "dan"), parley.CodeNotMember)

	changed("admin_not_member_adds", add(root, c, "dan"), 3)
	changed("admin_not_member_removes", remove(root, c, "dan"), 4)
	changed("plain_member_adds", add(ben, c, "dan"), 5)
	changed("self_leave", remove(ben, c, "ben"), 6)
	reject("former_member_adds", c, add(ben, c, "ben"), parley.CodeNotMember)
	reject("former_member_removes", c, remove(ben, c, "dan"), parley.CodeNotMember)
	changed("owner_removes", remove(ana, c, "dan"), 7)
	t.Run("self_leaver_cannot_send", func(t *testing.T) {
		before := e.snapshot(t, c)
		_, err := e.st.Send(ctx(t), ben, parley.SendRequest{Conv: c, CMID: "k", Body: "hi"})
		wantCode(t, err, parley.CodeNotMember)
		e.unchanged(t, c, before)
	})
	wantEvents(t, "history", e.syncAll(t, ana, c, 0),
		"1 member_joined ana: ana",
		"2 member_joined ana: ben",
		"3 member_joined root: dan",
		"4 member_left root: dan",
		"5 member_joined ben: dan",
		"6 member_left ben: ben",
		"7 member_left ana: dan")

	d, err := e.st.CreateConversation(ctx(t), ana, parley.NewConversation{ID: "d-ab", Kind: parley.KindDirect, Members: []string{"ben"}})
	ok(t, err, "create direct")
	if d.Owner != "" || d.Kind != parley.KindDirect || d.Head != 2 {
		t.Errorf("direct conversation %+v: want no owner, head 2", d)
	}
	reject("direct_add", "d-ab", add(ana, "d-ab", "dan"), parley.CodePermissionDenied)
	reject("direct_add_unknown_user", "d-ab", add(ana, "d-ab", "ghost"), parley.CodePermissionDenied)
	reject("direct_add_existing", "d-ab", add(ana, "d-ab", "ben"), parley.CodePermissionDenied)
	reject("direct_remove_other", "d-ab", remove(ana, "d-ab", "ben"), parley.CodePermissionDenied)
	reject("direct_leave", "d-ab", remove(ana, "d-ab", "ana"), parley.CodePermissionDenied)
	reject("direct_admin_add", "d-ab", add(root, "d-ab", "dan"), parley.CodePermissionDenied)
}

// testCreateConversation: the creator is first and owner, every initial
// member gets a member_joined event and a period from seq 1; a taken id is
// ALREADY_EXISTS, an unknown member NOT_FOUND, a malformed request
// INVALID_ARGUMENT, and none of them creates anything.
func testCreateConversation(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.bystander(t, "cy")

	from := time.Now()
	c, err := e.st.CreateConversation(ctx(t), ana, parley.NewConversation{ID: "c-g", Kind: parley.KindGroup, Title: "Team ☕", Members: []string{"ben", "ana", "cy", "ben"}})
	ok(t, err, "create")
	want := parley.Conversation{ID: "c-g", Kind: parley.KindGroup, Title: "Team ☕", Owner: "ana", Head: 3, MinSeq: 1, Epoch: 1}
	got := c
	got.CreatedAt = time.Time{}
	if got != want {
		t.Errorf("created %+v, want %+v", got, want)
	}
	if !within(c.CreatedAt, from, time.Now()) {
		t.Errorf("created at %v", c.CreatedAt)
	}
	wantEvents(t, "initial events", e.syncAll(t, ana, "c-g", 0),
		"1 member_joined ana: ana", "2 member_joined ana: ben", "3 member_joined ana: cy")
	if n := e.db.Int(t, "SELECT count(*) FROM periods WHERE conv_id = ? AND from_seq = 1 AND to_seq IS NULL", "c-g"); n != 3 {
		t.Errorf("%d open periods from seq 1, want 3", n)
	}

	rejects := []struct {
		name string
		nc   parley.NewConversation
		want parley.Code
	}{
		{"id_taken", parley.NewConversation{ID: "c-g", Title: "Other", Members: []string{"ben"}}, parley.CodeAlreadyExists},
		{"unknown_member", parley.NewConversation{ID: "c-x", Members: []string{"ben", "ghost"}}, parley.CodeNotFound},
		{"direct_with_three", parley.NewConversation{ID: "d-3", Kind: parley.KindDirect, Members: []string{"ben", "cy"}}, parley.CodeInvalidArgument},
		{"direct_alone", parley.NewConversation{ID: "d-1", Kind: parley.KindDirect}, parley.CodeInvalidArgument},
		{"malformed_id", parley.NewConversation{ID: "c x", Members: []string{"ben"}}, parley.CodeInvalidArgument},
		{"unknown_kind", parley.NewConversation{ID: "c-k", Kind: "channel", Members: []string{"ben"}}, parley.CodeInvalidArgument},
		{"title_201", parley.NewConversation{ID: "c-t", Title: strings.Repeat("é", 201)}, parley.CodeInvalidArgument},
		{"malformed_member", parley.NewConversation{ID: "c-m", Members: []string{"Ben"}}, parley.CodeInvalidArgument},
	}
	for _, tc := range rejects {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot(t, tc.nc.ID)
			_, err := e.st.CreateConversation(ctx(t), ana, tc.nc)
			wantCode(t, err, tc.want)
			e.unchanged(t, tc.nc.ID, before)
		})
	}
	if c := e.conv(t, "c-g"); c.Title != "Team ☕" || c.Head != 3 {
		t.Errorf("c-g after the rejected creations: %+v", c)
	}

	t.Run("direct", func(t *testing.T) {
		d, err := e.st.CreateConversation(ctx(t), ana, parley.NewConversation{ID: "d-ab", Kind: parley.KindDirect, Members: []string{"ben"}})
		ok(t, err, "create direct")
		if d.Owner != "" || d.Kind != parley.KindDirect || d.Head != 2 {
			t.Errorf("direct: %+v, want no owner and head 2", d)
		}
	})
	t.Run("generated_id", func(t *testing.T) {
		g, err := e.st.CreateConversation(ctx(t), ana, parley.NewConversation{Title: strings.Repeat("é", 200), Members: []string{"ben"}})
		ok(t, err, "create without id")
		if !parley.ValidConvID(g.ID) || g.Kind != parley.KindGroup || g.Head != 2 {
			t.Errorf("generated: %+v", g)
		}
		if got := e.conv(t, g.ID); got.ID != g.ID || got.Title != strings.Repeat("é", 200) {
			t.Errorf("Conversation(%s) = %+v", g.ID, got)
		}
	})
	t.Run("conversation_lookup", func(t *testing.T) {
		_, err := e.st.Conversation(ctx(t), "c-nope")
		wantCode(t, err, parley.CodeNotFound)
		_, err = e.st.Conversation(ctx(t), "c nope")
		wantCode(t, err, parley.CodeInvalidArgument)
	})
}

// testConvsOrder: Convs lists the conversations the caller has a period
// in, latest activity first, where a former member's activity is their
// last visible event (later activity must not move it up).
func testConvsOrder(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	cy := e.member(t, "cy")
	for _, id := range []string{"c-a", "c-b", "c-c"} {
		e.group(t, ana, id, "cy")
	}
	e.group(t, ana, "c-x")
	pause := func() { time.Sleep(20 * time.Millisecond) }
	pause()
	if _, err := e.st.RemoveMember(ctx(t), ana, "c-b", "cy"); err != nil { // c-b 3: cy's last
		t.Fatal(err)
	}
	pause()
	e.send(t, ana, "c-a", "k", "a") // c-a 3
	pause()
	e.send(t, ana, "c-b", "k", "b") // c-b 4, invisible to cy
	pause()
	e.send(t, ana, "c-c", "k", "c") // c-c 3

	order := func(p parley.Principal) []string {
		return convIDs(allConvs(t, e.st, p))
	}
	if got, want := order(cy), []string{"c-c", "c-a", "c-b"}; !slices.Equal(got, want) {
		t.Errorf("cy's convs %v, want %v", got, want)
	}
	if got, want := order(ana), []string{"c-c", "c-b", "c-a", "c-x"}; !slices.Equal(got, want) {
		t.Errorf("ana's convs %v, want %v", got, want)
	}

	b := e.summary(t, cy, "c-b")
	if b.Member || b.Head != 3 || b.Last != nil || b.Unread != 0 || b.Title != "title of c-b" || b.Kind != parley.KindGroup || b.Epoch != 1 || b.MinSeq != 1 {
		t.Errorf("cy's c-b entry: %+v (last %v)", b, b.Last)
	}
	a := e.summary(t, cy, "c-a")
	if !a.Member || a.Head != 3 || a.Unread != 1 || a.Last == nil || a.Last.Seq != 3 || a.Last.Body != "a" || a.Last.Sender != "ana" {
		t.Errorf("cy's c-a entry: %+v (last %v)", a, a.Last)
	}
}

// testCursorAhead: ack, read and sync above the caller's head are
// CURSOR_AHEAD and move nothing.
func testCursorAhead(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "m3")
	if got, err := e.st.Ack(ctx(t), ben, c, 2); err != nil || got != 2 {
		t.Fatalf("ack 2: %d %v", got, err)
	}
	if got, err := e.st.Read(ctx(t), ben, c, 1); err != nil || got != 1 {
		t.Fatalf("read 1: %d %v", got, err)
	}
	before := e.snapshot(t, c)
	cases := []struct {
		name string
		do   func() error
	}{
		{"ack_head_plus_1", func() error { _, err := e.st.Ack(ctx(t), ben, c, 4); return err }},
		{"ack_far_above", func() error { _, err := e.st.Ack(ctx(t), ben, c, 1<<40); return err }},
		{"read_head_plus_1", func() error { _, err := e.st.Read(ctx(t), ben, c, 4); return err }},
		{"read_far_above", func() error { _, err := e.st.Read(ctx(t), ben, c, 1<<40); return err }},
		{"sync_head_plus_1", func() error {
			_, err := e.st.Sync(ctx(t), ben, parley.SyncRequest{Conv: c, After: 4, Limit: 10})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.do(), parley.CodeCursorAhead)
			e.unchanged(t, c, before)
			if s := e.summary(t, ben, c); s.Delivered != 2 || s.Read != 1 || s.Head != 3 {
				t.Errorf("after a rejected cursor: delivered %d, read %d, head %d; want 2, 1, 3", s.Delivered, s.Read, s.Head)
			}
		})
	}
	if got, err := e.st.Ack(ctx(t), ben, c, 3); err != nil || got != 3 {
		t.Errorf("ack at head: %d %v", got, err)
	}
	if got, err := e.st.Read(ctx(t), ben, c, 3); err != nil || got != 3 {
		t.Errorf("read at head: %d %v", got, err)
	}
}

// testAckReadMonotonic: cursors only move forward (a lower seq answers the
// current cursor and stores nothing); delivered is per device, read is
// shared by all of a user's devices.
func testAckReadMonotonic(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben1 := e.member(t, "ben")
	ben2 := e.login(t, "ben", "d2", "i2").Principal
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	for _, k := range []string{"k3", "k4", "k5"} {
		e.send(t, ana, c, k, "m"+k)
	}
	type step struct {
		name string
		read bool // Read, else Ack
		p    parley.Principal
		seq  int64
		want int64
		noop bool
	}
	steps := []step{
		{"ack_d1_4", false, ben1, 4, 4, false},
		{"ack_d1_lower_is_noop", false, ben1, 3, 4, true},
		{"ack_d1_zero_is_noop", false, ben1, 0, 4, true},
		{"ack_d1_same_is_noop", false, ben1, 4, 4, true},
		{"ack_d1_5", false, ben1, 5, 5, false},
		{"ack_d2_is_per_device", false, ben2, 2, 2, false},
		{"ack_d2_lower_is_noop", false, ben2, 1, 2, true},
		{"read_d1_4", true, ben1, 4, 4, false},
		{"read_d2_lower_is_shared_noop", true, ben2, 3, 4, true},
		{"read_d2_5", true, ben2, 5, 5, false},
		{"read_d1_lower_is_noop", true, ben1, 4, 5, true},
		{"read_d1_zero_is_noop", true, ben1, 0, 5, true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			before := e.snapshot(t, c)
			var got int64
			var err error
			if s.read {
				got, err = e.st.Read(ctx(t), s.p, c, s.seq)
			} else {
				got, err = e.st.Ack(ctx(t), s.p, c, s.seq)
			}
			if wantCode(t, err, "") && got != s.want {
				t.Errorf("got %d, want %d", got, s.want)
			}
			if s.noop {
				e.unchanged(t, c, before)
			}
		})
	}
	if s := e.summary(t, ben1, c); s.Delivered != 5 || s.Read != 5 {
		t.Errorf("d1: delivered %d, read %d; want 5, 5", s.Delivered, s.Read)
	}
	if s := e.summary(t, ben2, c); s.Delivered != 2 || s.Read != 5 {
		t.Errorf("d2: delivered %d, read %d; want 2, 5", s.Delivered, s.Read)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM delivered_cursors WHERE conv_id = ? AND user_id = ?", c, "ben"); n != 2 {
		t.Errorf("%d delivered cursors for ben, want 2 (one per device)", n)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM read_cursors WHERE conv_id = ? AND user_id = ?", c, "ben"); n != 1 {
		t.Errorf("%d read cursors for ben, want 1 (shared)", n)
	}
}

// testUnreadMultiDevice: unread counts visible messages by others after the
// user's read cursor that are not recalled; a read on one device lowers the
// count the other device sees; it is exact up to UnreadCap and then capped
// with UnreadCapped.
func testUnreadMultiDevice(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben1 := e.member(t, "ben")
	ben2 := e.login(t, "ben", "d2", "i2").Principal
	e.bystander(t, "dan")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	for _, k := range []string{"k3", "k4", "k5", "k6", "k7"} {
		e.send(t, ana, c, k, "m"+k)
	}
	e.send(t, ben1, c, "k8", "ben's own") // 8

	unread := func(p parley.Principal, want int64, capped bool) {
		t.Helper()
		s := e.summary(t, p, c)
		if s.Unread != want || s.UnreadCapped != capped {
			t.Errorf("%s/%s: unread %d (capped %v), want %d (capped %v)", p.User, p.DeviceID, s.Unread, s.UnreadCapped, want, capped)
		}
	}
	unread(ben2, 5, false)
	unread(ana, 1, false) // ana's own five never count
	if s := e.summary(t, ben2, c); s.Last == nil || s.Last.Seq != 8 || s.Last.Body != "ben's own" {
		t.Errorf("last: %v, want seq 8", s.Last)
	}

	if got, err := e.st.Read(ctx(t), ben1, c, 5); err != nil || got != 5 {
		t.Fatalf("read 5 on d1: %d %v", got, err)
	}
	unread(ben2, 2, false)
	unread(ben1, 2, false)

	e.recall(t, ana, c, 7, "r7") // 9
	unread(ben2, 1, false)

	if ch, err := e.st.AddMember(ctx(t), ana, c, "dan"); err != nil || ch.Seq != 10 {
		t.Fatalf("add dan: %+v %v", ch, err)
	}
	unread(ben2, 1, false) // membership events are not messages

	// 1000 more messages by ana: 11..1010. Unread is then 1001: capped.
	if _, last := e.fill(t, ana, c, parley.UnreadCap); last != 1010 {
		t.Fatalf("fill ended at %d, want 1010", last)
	}
	unread(ben2, parley.UnreadCap, true)
	unread(ben1, parley.UnreadCap, true)
	if got, err := e.st.Read(ctx(t), ben2, c, 6); err != nil || got != 6 {
		t.Fatalf("read 6 on d2: %d %v", got, err)
	}
	unread(ben1, parley.UnreadCap, false) // exactly 1000: 11..1010
	if got, err := e.st.Read(ctx(t), ben1, c, 11); err != nil || got != 11 {
		t.Fatalf("read 11 on d1: %d %v", got, err)
	}
	unread(ben2, parley.UnreadCap-1, false)
	if s := e.summary(t, ben2, c); s.Last == nil || s.Last.Seq != 1010 {
		t.Errorf("last: %v, want seq 1010", s.Last)
	}
}

// testRetentionPurge: a purge by age (database clock, via Backdate) and by
// keep-last-N deletes the longest prefix the policy no longer keeps, raises
// min_seq and writes a tombstone per deleted request key in one go; a late
// resend of a purged message is ORIGINAL_EXPIRED and stores nothing; a sync
// from an old cursor says trimmed; without a policy nothing is deleted.
func testRetentionPurge(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k1", "one")   // 3
	e.send(t, ana, c, "k2", "two")   // 4
	e.send(t, ana, c, "k3", "three") // 5
	e.send(t, ben, c, "k4", "four")  // 6

	purge := func(t *testing.T, want parley.PurgeResult) {
		t.Helper()
		got, err := e.st.Purge(ctx(t), c)
		if wantCode(t, err, "") && got != want {
			t.Errorf("purge: %+v, want %+v", got, want)
		}
		if h := e.conv(t, c); h.MinSeq != want.MinSeq {
			t.Errorf("conversation min_seq %d, want %d", h.MinSeq, want.MinSeq)
		}
		if n := e.db.Int(t, "SELECT count(*) FROM events WHERE conv_id = ? AND seq < ?", c, want.MinSeq); n != 0 {
			t.Errorf("%d events stored below min_seq %d", n, want.MinSeq)
		}
	}
	expired := func(t *testing.T, p parley.Principal, cmid, body string) {
		t.Helper()
		before := e.snapshot(t, c)
		_, err := e.st.Send(ctx(t), p, parley.SendRequest{Conv: c, CMID: cmid, Body: body})
		wantCode(t, err, parley.CodeOriginalExpired)
		e.unchanged(t, c, before)
		if n := e.keyRows(t, c, p.User, cmid); n != 0 {
			t.Errorf("%d rows for the purged key %s", n, cmid)
		}
	}
	tombstones := func(t *testing.T, want int64) {
		t.Helper()
		if n := e.db.Int(t, "SELECT count(*) FROM tombstones WHERE conv_id = ?", c); n != want {
			t.Errorf("%d tombstones, want %d", n, want)
		}
	}

	t.Run("no_policy", func(t *testing.T) {
		before := e.snapshot(t, c)
		purge(t, parley.PurgeResult{Conv: c, MinSeq: 1})
		ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{}), "set empty policy")
		e.db.Backdate(t, c, 6, 1000*24*time.Hour)
		purge(t, parley.PurgeResult{Conv: c, MinSeq: 1})
		e.unchanged(t, c, before)
	})
	t.Run("by_age", func(t *testing.T) {
		e.db.Backdate(t, c, 4, 48*time.Hour) // 1..4 are now two days older than 5, 6
		ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{MaxAge: 1001 * 24 * time.Hour}), "set max age")
		purge(t, parley.PurgeResult{Conv: c, Deleted: 4, Tombstones: 2, MinSeq: 5})
		tombstones(t, 2)
		if n := e.db.Int(t, "SELECT count(*) FROM tombstones WHERE conv_id = ? AND sender_user = ? AND cmid IN ('k1', 'k2')", c, "ana"); n != 2 {
			t.Errorf("tombstones of k1, k2: %d, want 2", n)
		}
		purge(t, parley.PurgeResult{Conv: c, MinSeq: 5}) // nothing more is old
		tombstones(t, 2)
		expired(t, ana, "k1", "one")
		expired(t, ana, "k2", "two")
		expired(t, ana, "k1", "another body") // a tombstone has one answer
		r, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k3", Body: "three"})
		if wantCode(t, err, "") && (!r.Dup || r.Seq != 5) {
			t.Errorf("resend of a kept message: %+v, want dup of 5", r)
		}
	})
	t.Run("sync_after_purge", func(t *testing.T) {
		for _, tc := range []struct {
			after   int64
			trimmed bool
			from    int64
		}{{0, true, 5}, {3, true, 5}, {4, false, 5}, {5, false, 6}} {
			pg := e.sync(t, ben, c, tc.after, 10)
			if pg.Trimmed != tc.trimmed || pg.MinSeq != 5 {
				t.Errorf("after %d: trimmed %v min_seq %d, want %v 5", tc.after, pg.Trimmed, pg.MinSeq, tc.trimmed)
			}
			wantPage(t, "after purge", pg, span(tc.from, 6), 6, false, 6)
		}
		_, err := e.st.Fetch(ctx(t), ben, c, 3)
		wantCode(t, err, parley.CodeNotFound)
		if s := e.summary(t, ben, c); s.MinSeq != 5 {
			t.Errorf("convs min_seq %d, want 5", s.MinSeq)
		}
	})
	t.Run("keep_last", func(t *testing.T) {
		ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 1}), "set keep last")
		purge(t, parley.PurgeResult{Conv: c, Deleted: 1, Tombstones: 1, MinSeq: 6})
		expired(t, ana, "k3", "three")
		e.send(t, ana, c, "k5", "five") // 7
		e.send(t, ana, c, "k6", "six")  // 8
		purge(t, parley.PurgeResult{Conv: c, Deleted: 2, Tombstones: 2, MinSeq: 8})
		expired(t, ben, "k4", "four")
		expired(t, ana, "k5", "five")
		tombstones(t, 5)
		if n := e.rows(t, c); n != 1 {
			t.Errorf("%d rows, want 1", n)
		}
	})
	t.Run("everything", func(t *testing.T) {
		// Both limits: the age limit deletes what the count would keep.
		ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{MaxAge: time.Hour, KeepLast: 100}), "set both")
		e.db.Backdate(t, c, 8, 2*time.Hour)
		purge(t, parley.PurgeResult{Conv: c, Deleted: 1, Tombstones: 1, MinSeq: 9})
		if h := e.conv(t, c); h.Head != 8 || h.MinSeq != h.Head+1 {
			t.Errorf("nothing stored: head %d min_seq %d, want 8 and 9", h.Head, h.MinSeq)
		}
		expired(t, ana, "k6", "six")
		tombstones(t, 6)
	})
	t.Run("rejected", func(t *testing.T) {
		before := e.snapshot(t, c)
		wantCode(t, e.st.SetRetention(ctx(t), c, parley.Retention{MaxAge: -time.Hour}), parley.CodeInvalidArgument)
		wantCode(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: -1}), parley.CodeInvalidArgument)
		wantCode(t, e.st.SetRetention(ctx(t), "c-nope", parley.Retention{KeepLast: 1}), parley.CodeNotFound)
		wantCode(t, e.st.SetRetention(ctx(t), "c nope", parley.Retention{KeepLast: 1}), parley.CodeInvalidArgument)
		_, err := e.st.Purge(ctx(t), "c-nope")
		wantCode(t, err, parley.CodeNotFound)
		_, err = e.st.Purge(ctx(t), "c nope")
		wantCode(t, err, parley.CodeInvalidArgument)
		e.unchanged(t, c, before)
		if h := e.conv(t, c); h.Retention != (parley.Retention{MaxAge: time.Hour, KeepLast: 100}) {
			t.Errorf("policy after rejected changes: %+v", h.Retention)
		}
	})
}

// testControlNoTombstone is the negative control of retention_purge: the
// same history purged by a broken purge (raw SQL deletes the events and
// raises min_seq but writes no tombstones) lets a late resend create a new
// message with a new seq. That this bad outcome happens proves the
// retention check can fail; next to it, the real Purge answers
// ORIGINAL_EXPIRED.
func testControlNoTombstone(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	for _, c := range []string{"c-good", "c-broken"} {
		e.group(t, ana, c, "ben")
		for i := range 8 { // 3..10
			e.send(t, ana, c, "k"+string(rune('1'+i)), "message "+string(rune('1'+i)))
		}
	}

	ok(t, e.st.SetRetention(ctx(t), "c-good", parley.Retention{KeepLast: 5}), "set retention")
	if pr, err := e.st.Purge(ctx(t), "c-good"); err != nil || pr.MinSeq != 6 || pr.Tombstones != 3 {
		t.Fatalf("purge: %+v %v", pr, err)
	}
	e.db.Exec(t, "DELETE FROM events WHERE conv_id = ? AND seq < ?", "c-broken", 6)
	e.db.Exec(t, "UPDATE conversations SET min_seq = ? WHERE id = ?", 6, "c-broken")
	if n := e.db.Int(t, "SELECT count(*) FROM tombstones WHERE conv_id = ?", "c-broken"); n != 0 {
		t.Fatalf("the broken purge has %d tombstones", n)
	}

	req := func(c string) parley.SendRequest { return parley.SendRequest{Conv: c, CMID: "k1", Body: "message 1"} }
	before := e.snapshot(t, "c-good")
	_, err := e.st.Send(ctx(t), ana, req("c-good"))
	wantCode(t, err, parley.CodeOriginalExpired)
	e.unchanged(t, "c-good", before)

	// The control: the resend lands again, a duplicate of message 1.
	s, err := e.st.Send(ctx(t), ana, req("c-broken"))
	ok(t, err, "late resend without tombstone")
	if s.Dup || s.Seq != 11 {
		t.Errorf("control: got %+v, want the bad outcome: a new message at seq 11, dup false", s)
	}
	if n := e.db.Int(t, "SELECT max(seq) FROM events WHERE conv_id = ? AND sender_user = ? AND cmid = ?", "c-broken", "ana", "k1"); n != 11 {
		t.Errorf("control: the resent key is stored at seq %d, want 11", n)
	}
	if h := e.conv(t, "c-broken").Head; h != 11 {
		t.Errorf("control: head %d, want 11", h)
	}
}

// testTombstoneTTL: purges drop tombstones older than Options.TombstoneTTL
// and keep younger ones; from then on a late resend is new again (the
// documented end of the guarantee).
func testTombstoneTTL(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k1", "one") // 3
	e.send(t, ana, c, "k2", "two") // 4
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 1}), "set retention")
	if pr, err := e.st.Purge(ctx(t), c); err != nil || pr.Tombstones != 1 || pr.MinSeq != 4 {
		t.Fatalf("purge: %+v %v", pr, err)
	}
	count := func() int64 { return e.db.Int(t, "SELECT count(*) FROM tombstones WHERE conv_id = ?", c) }
	if _, err := e.st.Purge(ctx(t), c); err != nil || count() != 1 {
		t.Fatalf("a purge inside the TTL dropped the tombstone (err %v, %d left)", err, count())
	}
	_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k1", Body: "one"})
	wantCode(t, err, parley.CodeOriginalExpired)

	time.Sleep(tombstoneTTL + 500*time.Millisecond)
	if _, err := e.st.Purge(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("%d tombstones after the TTL, want 0", n)
	}
	s, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k1", Body: "one"})
	if wantCode(t, err, "") && (s.Dup || s.Seq != 5) {
		t.Errorf("resend after the TTL: %+v, want a new message at 5", s)
	}
}

// testTrimmed: Trimmed is true exactly when After < MinSeq-1; with nothing
// stored MinSeq is head+1 and an empty page still moves NextAfter to the
// head.
func testTrimmed(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	for i := range 8 { // 3..10
		e.send(t, ana, c, "k"+string(rune('a'+i)), "m")
	}
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 3}), "set retention")
	if pr, err := e.st.Purge(ctx(t), c); err != nil || pr.MinSeq != 8 {
		t.Fatalf("purge: %+v %v", pr, err)
	}
	for _, tc := range []struct {
		after   int64
		trimmed bool
		from    int64
	}{{0, true, 8}, {6, true, 8}, {7, false, 8}, {8, false, 9}, {10, false, 11}} {
		pg := e.sync(t, ben, c, tc.after, 10)
		if pg.Trimmed != tc.trimmed || pg.MinSeq != 8 {
			t.Errorf("after %d: trimmed %v, min_seq %d; want %v, 8", tc.after, pg.Trimmed, pg.MinSeq, tc.trimmed)
		}
		wantPage(t, "partly purged", pg, span(tc.from, 10), 10, false, 10)
	}

	// Purge everything.
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{MaxAge: time.Hour}), "set retention")
	e.db.Backdate(t, c, 10, 2*time.Hour)
	if pr, err := e.st.Purge(ctx(t), c); err != nil || pr.MinSeq != 11 || pr.Deleted != 3 {
		t.Fatalf("purge: %+v %v", pr, err)
	}
	if h := e.conv(t, c); h.MinSeq != 11 || h.Head != 10 {
		t.Errorf("header: min_seq %d head %d, want 11 10", h.MinSeq, h.Head)
	}
	for _, tc := range []struct {
		after   int64
		trimmed bool
	}{{0, true}, {9, true}, {10, false}} {
		pg := e.sync(t, ben, c, tc.after, 10)
		if pg.Trimmed != tc.trimmed || pg.MinSeq != 11 {
			t.Errorf("nothing stored, after %d: trimmed %v, min_seq %d; want %v, 11", tc.after, pg.Trimmed, pg.MinSeq, tc.trimmed)
		}
		wantPage(t, "nothing stored", pg, nil, 10, false, 10)
	}
	e.send(t, ana, c, "k-new", "new") // 11
	pg := e.sync(t, ben, c, 10, 10)
	if pg.Trimmed || pg.MinSeq != 11 {
		t.Errorf("after a new message: trimmed %v min_seq %d", pg.Trimmed, pg.MinSeq)
	}
	wantPage(t, "after a new message", pg, []int64{11}, 11, false, 11)
}

// testEpochChanged: Rollback removes the events after the restore point
// without tombstones (undoing a recall among them), appends system
// membership events that restore the current membership (the removed
// member stays removed, the added one stays added), clamps cursors and
// bumps the epoch. A sync with the old epoch is EPOCH_CHANGED (before the
// cursor check), the seqs after the restore point are reused, and
// messages the rollback lost land again when resent.
func testEpochChanged(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	cy := e.member(t, "cy")
	e.bystander(t, "dan")
	const c = "c-abc"
	e.group(t, ana, c, "ben", "cy")                                    // 1..3
	e.send(t, ana, c, "k4", "m4")                                      // 4
	e.send(t, ana, c, "k5", "m5")                                      // 5: the restore point
	e.recall(t, ana, c, 5, "r5")                                       // 6
	if _, err := e.st.RemoveMember(ctx(t), ana, c, "cy"); err != nil { // 7
		t.Fatal(err)
	}
	if _, err := e.st.AddMember(ctx(t), ana, c, "dan"); err != nil { // 8
		t.Fatal(err)
	}
	e.send(t, ana, c, "k9", "m9") // 9
	for _, f := range []func(parley.Principal, string, int64) (int64, error){
		func(p parley.Principal, c string, s int64) (int64, error) { return e.st.Read(ctx(t), p, c, s) },
		func(p parley.Principal, c string, s int64) (int64, error) { return e.st.Ack(ctx(t), p, c, s) },
	} {
		if got, err := f(ben, c, 9); err != nil || got != 9 {
			t.Fatalf("cursor to 9: %d %v", got, err)
		}
	}
	old := e.syncAll(t, ben, c, 0)

	rr, err := e.st.Rollback(ctx(t), c, 5)
	ok(t, err, "rollback")
	if want := (parley.RollbackResult{Conv: c, Removed: 4, Head: 7, Epoch: 2}); rr != want {
		t.Errorf("rollback: %+v, want %+v", rr, want)
	}
	if h := e.conv(t, c); h.Head != 7 || h.Epoch != 2 || h.MinSeq != 1 {
		t.Errorf("header: %+v, want head 7, epoch 2, min_seq 1", h)
	}
	if n := e.rows(t, c); n != 7 {
		t.Errorf("%d rows, want 7", n)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM tombstones WHERE conv_id = ?", c); n != 0 {
		t.Errorf("rollback wrote %d tombstones", n)
	}

	t.Run("old_epoch", func(t *testing.T) {
		for _, after := range []int64{0, 5, 9} {
			_, err := e.st.Sync(ctx(t), ben, parley.SyncRequest{Conv: c, After: after, Limit: 10, Epoch: 1})
			wantCode(t, err, parley.CodeEpochChanged)
		}
	})
	t.Run("new_epoch", func(t *testing.T) {
		for _, epoch := range []int64{2, 0} {
			pg, err := e.st.Sync(ctx(t), ben, parley.SyncRequest{Conv: c, After: 0, Limit: 50, Epoch: epoch})
			if !wantCode(t, err, "") {
				continue
			}
			wantEvents(t, "history after rollback", pg.Events,
				"1 member_joined ana: ana",
				"2 member_joined ana: ben",
				"3 member_joined ana: cy",
				`4 message ana/d1 "m4"`,
				`5 message ana/d1 "m5"`,
				"6 member_left : cy",
				"7 member_joined : dan")
			if pg.Epoch != 2 || pg.Head != 7 || pg.NextAfter != 7 || pg.HasMore {
				t.Errorf("page: epoch %d head %d next_after %d has_more %v", pg.Epoch, pg.Head, pg.NextAfter, pg.HasMore)
			}
			for i := 5; i < min(len(pg.Events), len(old)); i++ {
				if pg.Events[i].MID == old[i].MID {
					t.Errorf("seq %d kept the mid of the removed event", pg.Events[i].Seq)
				}
			}
		}
		_, err := e.st.Sync(ctx(t), ben, parley.SyncRequest{Conv: c, After: 9, Limit: 10, Epoch: 2})
		wantCode(t, err, parley.CodeCursorAhead)
	})
	t.Run("recall_undone", func(t *testing.T) {
		if ev := e.fetch(t, ben, c, 5); ev.Recalled || ev.Body != "m5" {
			t.Errorf("seq 5 after rollback: %s", describe(ev))
		}
	})
	t.Run("cursors_clamped", func(t *testing.T) {
		s := e.summary(t, ben, c)
		if s.Read < 5 || s.Read > 7 || s.Delivered < 5 || s.Delivered > 7 || s.Epoch != 2 || s.Head != 7 {
			t.Errorf("ben's entry: read %d delivered %d epoch %d head %d; want cursors in [5, 7], epoch 2, head 7", s.Read, s.Delivered, s.Epoch, s.Head)
		}
		for _, table := range []string{"read_cursors", "delivered_cursors"} {
			if n := e.db.Int(t, "SELECT max(seq) FROM "+table+" WHERE conv_id = ?", c); n > 7 {
				t.Errorf("%s: a cursor at %d above the new head 7", table, n)
			}
		}
		_, err := e.st.Read(ctx(t), ben, c, 8)
		wantCode(t, err, parley.CodeCursorAhead)
		if got, err := e.st.Read(ctx(t), ben, c, 7); err != nil || got != 7 {
			t.Errorf("read 7: %d %v", got, err)
		}
	})
	t.Run("removed_member_stays_removed", func(t *testing.T) {
		before := e.snapshot(t, c)
		_, err := e.st.Send(ctx(t), cy, parley.SendRequest{Conv: c, CMID: "k-cy", Body: "back?"})
		wantCode(t, err, parley.CodeNotMember)
		e.unchanged(t, c, before)
		pg := e.sync(t, cy, c, 0, 50)
		wantPage(t, "cy after rollback", pg, span(1, 6), 6, false, 6)
		if n := e.db.Int(t, "SELECT count(*) FROM periods WHERE conv_id = ? AND user_id = ? AND to_seq IS NULL", c, "cy"); n != 0 {
			t.Errorf("cy has %d open periods", n)
		}
		if s := e.summary(t, cy, c); s.Member || s.Head != 6 {
			t.Errorf("cy's entry: member %v head %d, want false 6", s.Member, s.Head)
		}
	})
	t.Run("added_member_stays_added", func(t *testing.T) {
		if n := e.db.Int(t, "SELECT count(*) FROM periods WHERE conv_id = ? AND user_id = ?", c, "dan"); n != 1 {
			t.Errorf("dan has %d periods, want 1", n)
		}
		if n := e.db.Int(t, "SELECT count(*) FROM periods WHERE conv_id = ? AND user_id = ? AND from_seq = 7 AND to_seq IS NULL", c, "dan"); n != 1 {
			t.Errorf("dan's period is not [7, open)")
		}
	})
	t.Run("lost_requests_land_again", func(t *testing.T) {
		s, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k9", Body: "m9"})
		if wantCode(t, err, "") && (s.Dup || s.Seq != 8 || s.Epoch != 2) {
			t.Errorf("resend of a rolled-back message: %+v, want new at seq 8, epoch 2", s)
		}
		s, err = e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k5", Body: "m5"})
		if wantCode(t, err, "") && (!s.Dup || s.Seq != 5 || s.Epoch != 2) {
			t.Errorf("resend of a kept message: %+v, want dup of 5, epoch 2", s)
		}
		r, err := e.st.Recall(ctx(t), ana, parley.RecallRequest{Conv: c, Target: 5, CMID: "r5"})
		if wantCode(t, err, "") && (r.Dup || r.Seq != 9) {
			t.Errorf("resend of a rolled-back recall: %+v, want new at seq 9", r)
		}
	})
}

// testRollbackRules: Rollback's bounds (between MinSeq-1 and the head),
// NOT_FOUND for an unknown conversation, nothing changed when rejected;
// rolling back to MinSeq-1 empties the log, and every rollback bumps the
// epoch.
func testRollbackRules(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	for _, k := range []string{"k3", "k4", "k5", "k6"} {
		e.send(t, ana, c, k, "m"+k)
	}
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 2}), "set retention")
	if pr, err := e.st.Purge(ctx(t), c); err != nil || pr.MinSeq != 5 || pr.Tombstones != 2 {
		t.Fatalf("purge: %+v %v", pr, err)
	}
	for _, tc := range []struct {
		name string
		conv string
		to   int64
		want parley.Code
	}{
		{"above_head", c, 7, parley.CodeInvalidArgument},
		{"negative", c, -1, parley.CodeInvalidArgument},
		{"below_min_seq_minus_1", c, 3, parley.CodeInvalidArgument},
		{"unknown_conv", "c-nope", 0, parley.CodeNotFound},
		{"malformed_conv", "c nope", 0, parley.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot(t, c)
			_, err := e.st.Rollback(ctx(t), tc.conv, tc.to)
			wantCode(t, err, tc.want)
			e.unchanged(t, c, before)
		})
	}

	rr, err := e.st.Rollback(ctx(t), c, 4)
	ok(t, err, "rollback to min_seq-1")
	if want := (parley.RollbackResult{Conv: c, Removed: 2, Head: 4, Epoch: 2}); rr != want {
		t.Errorf("rollback: %+v, want %+v", rr, want)
	}
	if h := e.conv(t, c); h.Head != 4 || h.MinSeq != 5 || h.Epoch != 2 {
		t.Errorf("header: %+v, want head 4, min_seq 5, epoch 2", h)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM tombstones WHERE conv_id = ?", c); n != 2 {
		t.Errorf("%d tombstones, want the purge's 2", n)
	}
	rr, err = e.st.Rollback(ctx(t), c, 4)
	ok(t, err, "rollback to head")
	if want := (parley.RollbackResult{Conv: c, Removed: 0, Head: 4, Epoch: 3}); rr != want {
		t.Errorf("rollback to head: %+v, want %+v", rr, want)
	}
	// Purged keys stay expired; rolled-back keys are free again.
	_, err = e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k3", Body: "mk3"})
	wantCode(t, err, parley.CodeOriginalExpired)
	s, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k5", Body: "mk5"})
	if wantCode(t, err, "") && (s.Dup || s.Seq != 5 || s.Epoch != 3) {
		t.Errorf("resend after rollback: %+v, want new at 5 in epoch 3", s)
	}
}

// walkConvs walks p's conversation list in pages of limit from before,
// checking each page's shape, and returns the ids in order.
func walkConvs(t *testing.T, st parley.Store, p parley.Principal, limit int, before string) []string {
	t.Helper()
	var ids []string
	r := parley.ConvsRequest{Limit: limit, Before: before}
	for range 1000 {
		page, err := st.Convs(ctx(t), p, r)
		ok(t, err, "convs page")
		if len(page.Convs) > limit {
			t.Fatalf("page of %d entries, limit %d", len(page.Convs), limit)
		}
		ids = append(ids, convIDs(page.Convs)...)
		if !page.HasMore {
			if page.Next != "" {
				t.Errorf("last page has next %q", page.Next)
			}
			return ids
		}
		if len(page.Convs) != limit || page.Next == "" {
			t.Fatalf("page with has_more: %d entries (limit %d), next %q", len(page.Convs), limit, page.Next)
		}
		r.Before = page.Next
	}
	t.Fatal("convs walk does not end")
	return nil
}

// testConvsPaging: pages of any size, walked with next, give the whole
// list exactly once in its order (latest activity first, ties by id), and
// a first page without a cursor is the head of that list.
func testConvsPaging(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	for i := range 7 {
		e.group(t, ana, fmt.Sprintf("c-%d", i))
	}
	// Four of them share one activity time: the order among them, and a
	// page boundary between them, go by id.
	for _, id := range []string{"c-5", "c-1", "c-3", "c-6"} {
		e.db.Exec(t, "UPDATE conversations SET last_at = (SELECT last_at FROM conversations WHERE id = ?) WHERE id = ?", "c-0", id)
	}
	time.Sleep(20 * time.Millisecond)
	e.send(t, ana, "c-4", "k", "newest")

	page, err := e.st.Convs(ctx(t), ana, parley.ConvsRequest{Limit: parley.MaxConvsPage})
	ok(t, err, "convs")
	full := convIDs(page.Convs)
	if len(full) != 7 || page.HasMore || page.Next != "" {
		t.Fatalf("one page of everything: %v (more %v, next %q)", full, page.HasMore, page.Next)
	}
	if full[0] != "c-4" {
		t.Errorf("first entry %s, want c-4 (latest activity)", full[0])
	}
	pos := map[string]int{}
	for i, id := range full {
		pos[id] = i
	}
	tied := []string{"c-0", "c-1", "c-3", "c-5", "c-6"}
	for i := 1; i < len(tied); i++ {
		if pos[tied[i-1]] > pos[tied[i]] {
			t.Errorf("same activity: %s after %s in %v, want by id", tied[i-1], tied[i], full)
		}
	}
	for _, limit := range []int{1, 2, 3, 6, 7, 8} {
		if got := walkConvs(t, e.st, ana, limit, ""); !slices.Equal(got, full) {
			t.Errorf("walk in pages of %d: %v, want %v", limit, got, full)
		}
	}
	first, err := e.st.Convs(ctx(t), ana, parley.ConvsRequest{Limit: 2})
	ok(t, err, "first page")
	if got := convIDs(first.Convs); !slices.Equal(got, full[:2]) || !first.HasMore {
		t.Errorf("first page of 2: %v (more %v), want %v", got, first.HasMore, full[:2])
	}
}

// testConvsPagingStable: a page's cursor is a position, not an offset: a
// conversation created, or one already listed moving to the top, while a
// walk is under way neither repeats nor hides the entries still to come.
func testConvsPagingStable(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	for i := range 6 {
		e.group(t, ana, fmt.Sprintf("c-%d", i))
		time.Sleep(5 * time.Millisecond)
	}
	full := convIDs(allConvs(t, e.st, ana))
	first, err := e.st.Convs(ctx(t), ana, parley.ConvsRequest{Limit: 2})
	ok(t, err, "first page")
	if got := convIDs(first.Convs); !slices.Equal(got, full[:2]) || first.Next == "" {
		t.Fatalf("first page: %v next %q, want %v", got, first.Next, full[:2])
	}
	time.Sleep(20 * time.Millisecond)
	e.group(t, ana, "c-new")
	e.send(t, ana, first.Convs[1].Conv, "k", "moved up")
	if got := walkConvs(t, e.st, ana, 2, first.Next); !slices.Equal(got, full[2:]) {
		t.Errorf("rest of the walk after changes: %v, want %v", got, full[2:])
	}
	// The same cursor reads the same rest again.
	if got := walkConvs(t, e.st, ana, 3, first.Next); !slices.Equal(got, full[2:]) {
		t.Errorf("rest of the walk again: %v, want %v", got, full[2:])
	}
}

// testConvsPageBounds: a limit below 1 or a cursor that no convs reply
// gave is INVALID_ARGUMENT; a limit above MaxConvsPage is capped.
func testConvsPageBounds(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	for i := range parley.MaxConvsPage + 1 {
		e.group(t, ana, fmt.Sprintf("c-%03d", i))
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name string
		r    parley.ConvsRequest
	}{
		{"limit 0", parley.ConvsRequest{}},
		{"limit -1", parley.ConvsRequest{Limit: -1}},
		{"not base64", parley.ConvsRequest{Limit: 1, Before: "!!!"}},
		{"no separator", parley.ConvsRequest{Limit: 1, Before: b64("12345")}},
		{"activity not a number", parley.ConvsRequest{Limit: 1, Before: b64("x.c-001")}},
		{"negative activity", parley.ConvsRequest{Limit: 1, Before: b64("-5.c-001")}},
		{"bad conversation id", parley.ConvsRequest{Limit: 1, Before: b64("5.c 001")}},
		{"too long", parley.ConvsRequest{Limit: 1, Before: b64("5." + strings.Repeat("c", 200))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, err := e.st.Convs(ctx(t), ana, tc.r)
			if wantCode(t, err, parley.CodeInvalidArgument) && len(page.Convs) != 0 {
				t.Errorf("refused request returned %d entries", len(page.Convs))
			}
		})
	}
	page, err := e.st.Convs(ctx(t), ana, parley.ConvsRequest{Limit: 10 * parley.MaxConvsPage})
	ok(t, err, "convs with a large limit")
	if len(page.Convs) != parley.MaxConvsPage || !page.HasMore {
		t.Errorf("limit above the cap: %d entries (more %v), want %d and more", len(page.Convs), page.HasMore, parley.MaxConvsPage)
	}
	rest, err := e.st.Convs(ctx(t), ana, parley.ConvsRequest{Limit: 10, Before: page.Next})
	ok(t, err, "convs after the cap")
	if len(rest.Convs) != 1 || rest.HasMore {
		t.Errorf("after a capped page: %v (more %v), want the one left", convIDs(rest.Convs), rest.HasMore)
	}
}
