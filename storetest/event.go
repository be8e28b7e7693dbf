package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of Send, Sync, Recall and Fetch: request keys, fingerprints,
// bounds, visibility and paging.

// testNormalHistory: a member's first message in a new group of two is seq
// 3, not a dup, and both members read the same history (joins, then
// messages) with the sent mid, device and a database-clock time.
func testNormalHistory(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	c := e.group(t, ana, "c-ab", "ben")
	if c.Kind != parley.KindGroup || c.Owner != "ana" || c.MinSeq != 1 || c.Epoch != 1 || c.Title != "title of c-ab" {
		t.Errorf("created conversation %+v: want group owned by ana, min_seq 1, epoch 1", c)
	}

	before := time.Now()
	s1 := e.send(t, ana, "c-ab", "k1", "hello ben")
	after := time.Now()
	if s1.Seq != 3 || s1.Dup || s1.MID == "" || s1.Epoch != 1 || s1.Conv != "c-ab" {
		t.Errorf("first message: got %+v, want seq 3, dup false, a mid, epoch 1", s1)
	}
	// The same cmid from another sender is another request key.
	s2 := e.send(t, ben, "c-ab", "k1", "hi ana")
	if s2.Seq != 4 || s2.MID == s1.MID {
		t.Errorf("second message: got %+v, want seq 4 and a new mid", s2)
	}

	want := []string{
		"1 member_joined ana: ana",
		"2 member_joined ana: ben",
		`3 message ana/d1 "hello ben"`,
		`4 message ben/d1 "hi ana"`,
	}
	for _, p := range []parley.Principal{ana, ben} {
		pg := e.sync(t, p, "c-ab", 0, 50)
		wantEvents(t, "history read by "+p.User, pg.Events, want...)
		wantPage(t, "history read by "+p.User, pg, span(1, 4), 4, false, 4)
		if pg.Conv != "c-ab" || pg.MinSeq != 1 || pg.Trimmed || pg.Epoch != 1 {
			t.Errorf("page for %s: conv %q, min_seq %d, trimmed %v, epoch %d; want c-ab, 1, false, 1", p.User, pg.Conv, pg.MinSeq, pg.Trimmed, pg.Epoch)
		}
		for _, ev := range pg.Events {
			if ev.Conv != "c-ab" || ev.MID == "" || ev.At.IsZero() || ev.At.Location() != time.UTC || !ev.At.Equal(ev.At.Truncate(time.Millisecond)) {
				t.Errorf("event %s: conv %q, mid %q, at %v (want UTC, whole milliseconds)", describe(ev), ev.Conv, ev.MID, ev.At)
			}
		}
		if len(pg.Events) == 4 {
			if pg.Events[2].MID != s1.MID || pg.Events[3].MID != s2.MID {
				t.Errorf("mids %s, %s; the sends answered %s, %s", pg.Events[2].MID, pg.Events[3].MID, s1.MID, s2.MID)
			}
			if at := pg.Events[2].At; !within(at, before, after) {
				t.Errorf("message at %v, sent between %v and %v", at, before, after)
			}
		}
	}

	// Fetch returns the same event.
	ev := e.fetch(t, ben, "c-ab", 3)
	if describe(ev) != want[2] || ev.MID != s1.MID || !within(ev.At, before, after) {
		t.Errorf("fetch 3: got %s mid %s at %v", describe(ev), ev.MID, ev.At)
	}
	if h := e.conv(t, "c-ab").Head; h != 4 {
		t.Errorf("head %d, want 4", h)
	}
	if n := e.rows(t, "c-ab"); n != 4 {
		t.Errorf("%d rows, want 4", n)
	}
}

// testLostReplyRetry: a resend with the same cmid and body, from the same
// or another device of the sender, answers the original seq and mid with
// Dup true and stores nothing.
func testLostReplyRetry(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	s := e.send(t, ana, "c-ab", "k1", "hello")
	before := e.snapshot(t, "c-ab")

	ana2 := e.login(t, "ana", "d2", "i2").Principal
	for i, p := range []parley.Principal{ana, ana, ana2} {
		r, err := e.st.Send(ctx(t), p, parley.SendRequest{Conv: "c-ab", CMID: "k1", Body: "hello"})
		if !wantCode(t, err, "") {
			continue
		}
		if !r.Dup || r.Seq != s.Seq || r.MID != s.MID || r.Epoch != s.Epoch || r.Conv != "c-ab" {
			t.Errorf("resend %d from %s: got %+v, want the original %+v with Dup true", i, p.DeviceID, r, s)
		}
	}
	e.unchanged(t, "c-ab", before)
	if n := e.keyRows(t, "c-ab", "ana", "k1"); n != 1 {
		t.Errorf("%d rows for the request key, want 1", n)
	}
	// Replays consumed no seq.
	if n := e.send(t, ana, "c-ab", "k2", "next"); n.Seq != s.Seq+1 {
		t.Errorf("next message seq %d, want %d", n.Seq, s.Seq+1)
	}
}

// accessOp is one request on a conversation, used to check that non-members
// and unknown conversations get the one NOT_MEMBER answer.
type accessOp struct {
	name string
	do   func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error
}

var accessOps = []accessOp{
	{"send", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Send(ctx, p, parley.SendRequest{Conv: conv, CMID: "k-intruder", Body: "hi"})
		return err
	}},
	{"send_with_a_members_cmid", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		// ana's key and body: a replay only for ana, never a leak to others.
		_, err := st.Send(ctx, p, parley.SendRequest{Conv: conv, CMID: "k1", Body: "hello"})
		return err
	}},
	{"sync", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Sync(ctx, p, parley.SyncRequest{Conv: conv, After: 0, Limit: 50})
		return err
	}},
	{"sync_with_epoch", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Sync(ctx, p, parley.SyncRequest{Conv: conv, After: 0, Limit: 50, Epoch: 1})
		return err
	}},
	{"fetch", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Fetch(ctx, p, conv, 3)
		return err
	}},
	{"ack", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Ack(ctx, p, conv, 1)
		return err
	}},
	{"read", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Read(ctx, p, conv, 1)
		return err
	}},
	{"recall", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Recall(ctx, p, parley.RecallRequest{Conv: conv, Target: 3, CMID: "r-intruder"})
		return err
	}},
	{"edit", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Edit(ctx, p, parley.EditRequest{Conv: conv, Target: 3, CMID: "e-intruder", Body: "mine now"})
		return err
	}},
	{"react", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.React(ctx, p, parley.ReactRequest{Conv: conv, Target: 3, Emoji: "👍", On: true, CMID: "x-intruder"})
		return err
	}},
	{"unreact", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		// The state asked for holds already (nobody reacted): still refused.
		_, err := st.React(ctx, p, parley.ReactRequest{Conv: conv, Target: 3, Emoji: "👍", On: false, CMID: "x-intruder"})
		return err
	}},
	{"reply", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Send(ctx, p, parley.SendRequest{Conv: conv, CMID: "k-intruder", Body: "@ana hi", ReplyTo: 3})
		return err
	}},
	{"versions", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, _, err := st.Versions(ctx, p, conv, 3)
		return err
	}},
	{"sync_thread", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.Sync(ctx, p, parley.SyncRequest{Conv: conv, Limit: 50, Thread: 3})
		return err
	}},
	{"add_member", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.AddMember(ctx, p, conv, p.User)
		return err
	}},
	{"remove_member", func(ctx context.Context, st parley.Store, p parley.Principal, conv string) error {
		_, err := st.RemoveMember(ctx, p, conv, "ben")
		return err
	}},
}

// testNonMemberRejected: a user without a period in a conversation gets
// NOT_MEMBER for every request on it, and nothing changes (head stays 3).
func testNonMemberRejected(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	cy := e.member(t, "cy")
	e.group(t, ana, "c-ab", "ben")
	e.send(t, ana, "c-ab", "k1", "hello")
	before := e.snapshot(t, "c-ab")
	if before.Head != 3 {
		t.Fatalf("head %d, want 3", before.Head)
	}
	for _, op := range accessOps {
		t.Run(op.name, func(t *testing.T) {
			wantCode(t, op.do(ctx(t), e.st, cy, "c-ab"), parley.CodeNotMember)
			e.unchanged(t, "c-ab", before)
		})
	}
	list := allConvs(t, e.st, cy)
	if len(list) != 0 {
		t.Errorf("convs of a non-member: %v, want none", convIDs(list))
	}
}

// testUnknownConvSameError: a conversation that does not exist answers
// exactly as one the caller is not in: same code, same message, and
// nothing is created.
func testUnknownConvSameError(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	cy := e.member(t, "cy")
	e.group(t, ana, "c-ab", "ben")
	e.send(t, ana, "c-ab", "k1", "hello")
	before := e.snapshot(t, "c-nope")
	for _, op := range accessOps {
		t.Run(op.name, func(t *testing.T) {
			hidden := op.do(ctx(t), e.st, cy, "c-ab")
			missing := op.do(ctx(t), e.st, cy, "c-nope")
			missingForMember := op.do(ctx(t), e.st, ana, "c-nope")
			wantCode(t, hidden, parley.CodeNotMember)
			wantCode(t, missing, parley.CodeNotMember)
			wantCode(t, missingForMember, parley.CodeNotMember)
			if hidden != nil && missing != nil && parley.ErrorMessage(hidden) != parley.ErrorMessage(missing) {
				t.Errorf("messages differ: not a member %q, no such conversation %q", parley.ErrorMessage(hidden), parley.ErrorMessage(missing))
			}
			e.unchanged(t, "c-nope", before)
		})
	}
	if before.Exists != 0 || before.Rows != 0 {
		t.Errorf("c-nope exists before the test: %+v", before)
	}
}

// testIdempotencyMismatch: the same cmid with another body is
// IDEMPOTENCY_MISMATCH and the original row is untouched; the key is
// (conv, sender, cmid), so the same cmid and body in another conversation
// is a new message.
func testIdempotencyMismatch(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	e.group(t, ana, "c-other", "ben")
	s := e.send(t, ana, "c-ab", "k1", "hello")
	before := e.snapshot(t, "c-ab")

	for _, body := range []string{"hello!", "Hello", "hello ", "hellо" /* Cyrillic o */, strings.Repeat("hello", 800)} {
		t.Run(fmt.Sprintf("%.12q", body), func(t *testing.T) {
			_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: "c-ab", CMID: "k1", Body: body})
			wantCode(t, err, parley.CodeIdempotencyMismatch)
			e.unchanged(t, "c-ab", before)
			if !e.bodyIs(t, "c-ab", s.Seq, "hello") {
				t.Errorf("the original row's body changed")
			}
			if ev := e.fetch(t, ana, "c-ab", s.Seq); ev.Body != "hello" || ev.MID != s.MID {
				t.Errorf("fetch original: body %q mid %s, want %q %s", ev.Body, ev.MID, "hello", s.MID)
			}
		})
	}

	// The right body still replays after the mismatches.
	r, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: "c-ab", CMID: "k1", Body: "hello"})
	if wantCode(t, err, "") && (!r.Dup || r.Seq != s.Seq || r.MID != s.MID) {
		t.Errorf("replay after mismatches: %+v, want dup of %+v", r, s)
	}
	// Same cmid and body in another conversation: another key.
	o := e.send(t, ana, "c-other", "k1", "hello")
	if o.Seq != 3 || o.MID == s.MID {
		t.Errorf("same cmid in another conversation: %+v, want a new message at seq 3", o)
	}
	e.unchanged(t, "c-ab", before)
}

// testConcurrentReplayOneRow: 32 identical sends on 32 store handles
// (separate connections) race; exactly one is new, all answer the same
// seq and mid, and one row exists.
func testConcurrentReplayOneRow(t *testing.T, e *env) {
	const n = 32
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	stores := make([]parley.Store, n)
	for i := range stores {
		stores[i] = e.db.Open(t)
	}

	req := parley.SendRequest{Conv: "c-ab", CMID: "k-race", Body: "once"}
	results := make([]parley.Sent, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() {
			<-start
			results[i], errs[i] = st.Send(ctx(t), ana, req)
		})
	}
	close(start)
	wg.Wait()

	fresh := 0
	var mid string
	for i := range n {
		if !wantCode(t, errs[i], "") {
			continue
		}
		if !results[i].Dup {
			fresh++
		}
		if mid == "" {
			mid = results[i].MID
		}
		if results[i].Seq != 3 || results[i].MID != mid || mid == "" {
			t.Errorf("send %d: seq %d mid %q; want seq 3 and the mid of the others (%q)", i, results[i].Seq, results[i].MID, mid)
		}
	}
	if fresh != 1 {
		t.Errorf("%d sends answered Dup false, want exactly 1", fresh)
	}
	if k := e.keyRows(t, "c-ab", "ana", "k-race"); k != 1 {
		t.Errorf("%d rows for the key, want 1", k)
	}
	if r, h := e.rows(t, "c-ab"), e.conv(t, "c-ab").Head; r != 3 || h != 3 {
		t.Errorf("rows %d, head %d; want 3, 3", r, h)
	}
	if mids := e.db.Int(t, "SELECT count(DISTINCT mid) FROM events WHERE conv_id = ? AND kind = 'message'", "c-ab"); mids != 1 {
		t.Errorf("%d distinct message mids, want 1", mids)
	}
}

// testResendAfterRemoval (seed §6.2): a message was committed, its reply
// lost, its sender removed; the resend with the same cmid is still a
// replay (Dup true, original seq), not NOT_MEMBER, because the request key
// is looked up before membership. Likewise a mismatch, and a tombstone.
func testResendAfterRemoval(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	s := e.send(t, ben, "c-ab", "k1", "hello") // seq 3, reply "lost"
	rm, err := e.st.RemoveMember(ctx(t), ana, "c-ab", "ben")
	ok(t, err, "remove ben")
	if !rm.Changed || rm.Seq != 4 {
		t.Fatalf("remove ben: %+v, want changed at seq 4", rm)
	}
	before := e.snapshot(t, "c-ab")

	r, err := e.st.Send(ctx(t), ben, parley.SendRequest{Conv: "c-ab", CMID: "k1", Body: "hello"})
	if wantCode(t, err, "") && (!r.Dup || r.Seq != s.Seq || r.MID != s.MID) {
		t.Errorf("resend after removal: %+v, want the original %+v with Dup true", r, s)
	}
	e.unchanged(t, "c-ab", before)

	_, err = e.st.Send(ctx(t), ben, parley.SendRequest{Conv: "c-ab", CMID: "k1", Body: "changed"})
	wantCode(t, err, parley.CodeIdempotencyMismatch)
	e.unchanged(t, "c-ab", before)

	_, err = e.st.Send(ctx(t), ben, parley.SendRequest{Conv: "c-ab", CMID: "k2", Body: "new"})
	wantCode(t, err, parley.CodeNotMember)
	e.unchanged(t, "c-ab", before)

	// Once purged, the same resend is ORIGINAL_EXPIRED (tombstones are also
	// looked up before membership).
	ok(t, e.st.SetRetention(ctx(t), "c-ab", parley.Retention{KeepLast: 1}), "set retention")
	pr, err := e.st.Purge(ctx(t), "c-ab")
	ok(t, err, "purge")
	if pr.Deleted != 3 || pr.Tombstones != 1 || pr.MinSeq != 4 {
		t.Fatalf("purge: %+v, want 3 deleted, 1 tombstone, min_seq 4", pr)
	}
	before = e.snapshot(t, "c-ab")
	_, err = e.st.Send(ctx(t), ben, parley.SendRequest{Conv: "c-ab", CMID: "k1", Body: "hello"})
	wantCode(t, err, parley.CodeOriginalExpired)
	e.unchanged(t, "c-ab", before)
}

// runes returns n code points cycling through pattern.
func runes(pattern string, n int) string {
	p := []rune(pattern)
	out := make([]rune, n)
	for i := range out {
		out[i] = p[i%len(p)]
	}
	return string(out)
}

// testBounds: every input bound at and past its edge, counted in
// code points (multi-byte runes included), invalid UTF-8, malformed ids;
// validation comes before any storage work (a bad request to an unknown
// conversation is INVALID_ARGUMENT, not NOT_MEMBER).
func testBounds(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	const inv = parley.CodeInvalidArgument
	mixed := "é键😀a" // 2, 3, 4 and 1 bytes

	t.Run("send", func(t *testing.T) {
		cases := []struct {
			name, conv, cmid, body string
			want                   parley.Code
		}{
			{"cmid_empty", "c-ab", "", "hi", inv},
			{"cmid_64_ascii", "c-ab", strings.Repeat("k", 64), "hi", ""},
			{"cmid_64_multibyte", "c-ab", runes(mixed, 64), "hi", ""},
			{"cmid_65_ascii", "c-ab", strings.Repeat("k", 65), "hi", inv},
			{"cmid_65_multibyte", "c-ab", runes(mixed, 65), "hi", inv},
			{"cmid_invalid_utf8", "c-ab", "k\xff", "hi", inv},
			{"body_empty", "c-ab", "b-empty", "", inv},
			{"body_1", "c-ab", "b-1", "x", ""},
			{"body_4000_ascii", "c-ab", "b-4000a", strings.Repeat("a", 4000), ""},
			{"body_4000_multibyte", "c-ab", "b-4000m", runes(mixed, 4000), ""},
			{"body_4000_four_byte", "c-ab", "b-4000e", strings.Repeat("😀", 4000), ""},
			{"body_4001_ascii", "c-ab", "b-4001a", strings.Repeat("a", 4001), inv},
			{"body_4001_multibyte", "c-ab", "b-4001m", runes(mixed, 4001), inv},
			{"body_invalid_utf8", "c-ab", "b-bad", "\xff\xfe", inv},
			{"body_3999_and_a_cut_rune", "c-ab", "b-cut", strings.Repeat("a", 3999) + "\xc3", inv},
			{"body_encoded_surrogate", "c-ab", "b-surr", "a\xed\xa0\x80", inv},
			{"body_with_nul", "c-ab", "b-nul", "a\x00b", inv},
			{"cmid_with_nul", "c-ab", "k\x00nul", "hi", inv},
			{"conv_empty", "", "k", "hi", inv},
			{"conv_space", "c ab", "k", "hi", inv},
			{"conv_slash", "c/ab", "k", "hi", inv},
			{"conv_non_ascii", "c-é", "k", "hi", inv},
			{"conv_65", "c-" + strings.Repeat("x", 63), "k", "hi", inv},
			{"conv_64_unknown", "c-" + strings.Repeat("x", 62), "k", "hi", parley.CodeNotMember},
			{"bad_body_to_unknown_conv", "c-nope", "k", "", inv},
			{"bad_cmid_to_unknown_conv", "c-nope", strings.Repeat("k", 65), "hi", inv},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := e.snapshot(t, "c-ab")
				s, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: tc.conv, CMID: tc.cmid, Body: tc.body})
				if !wantCode(t, err, tc.want) {
					return
				}
				if tc.want != "" {
					e.unchanged(t, "c-ab", before)
					if tc.conv != "c-ab" {
						if n := e.db.Int(t, "SELECT count(*) FROM conversations WHERE id = ?", tc.conv); n != 0 {
							t.Errorf("a rejected send created conversation %q", tc.conv)
						}
						if n := e.rows(t, tc.conv); n != 0 {
							t.Errorf("a rejected send stored %d events in %q", n, tc.conv)
						}
					}
					return
				}
				if s.Seq != before.Head+1 || s.Dup {
					t.Errorf("got %+v, want a new message at seq %d", s, before.Head+1)
				}
				if ev := e.fetch(t, ana, "c-ab", s.Seq); ev.Body != tc.body {
					t.Errorf("body read back differs: %d bytes, want %d", len(ev.Body), len(tc.body))
				}
				if !e.bodyIs(t, "c-ab", s.Seq, tc.body) {
					t.Errorf("stored body differs")
				}
				if n := e.keyRows(t, "c-ab", "ana", tc.cmid); n != 1 {
					t.Errorf("%d rows for the cmid, want 1 (cmid stored as sent)", n)
				}
				// The same request again is a replay: the stored key and body
				// compare equal to what was sent.
				r, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: tc.conv, CMID: tc.cmid, Body: tc.body})
				if wantCode(t, err, "") && (!r.Dup || r.Seq != s.Seq) {
					t.Errorf("replay: %+v, want dup of seq %d", r, s.Seq)
				}
			})
		}
	})

	// A conversation with more than MaxPage events: 1, 2, then 250 messages.
	e.group(t, ana, "c-sync", "ben")
	_, head := e.fill(t, ana, "c-sync", 250)
	if head != 252 {
		t.Fatalf("head %d, want 252", head)
	}
	t.Run("sync", func(t *testing.T) {
		cases := []struct {
			name         string
			conv         string
			after        int64
			limit        int
			epoch        int64
			want         parley.Code
			from, to     int64 // expected seqs (to < from: none)
			nextAfter    int64
			hasMore      bool
			wantHeadPage int64
		}{
			{name: "limit_0", conv: "c-sync", limit: 0, want: inv},
			{name: "limit_negative", conv: "c-sync", limit: -1, want: inv},
			{name: "limit_1", conv: "c-sync", limit: 1, from: 1, to: 1, nextAfter: 1, hasMore: true},
			{name: "limit_200", conv: "c-sync", limit: 200, from: 1, to: 200, nextAfter: 200, hasMore: true},
			{name: "limit_1000_capped_at_200", conv: "c-sync", limit: 1000, from: 1, to: 200, nextAfter: 200, hasMore: true},
			{name: "limit_1000_rest", conv: "c-sync", after: 200, limit: 1000, from: 201, to: 252, nextAfter: 252},
			{name: "after_negative", conv: "c-sync", after: -1, limit: 10, want: inv},
			{name: "after_head", conv: "c-sync", after: 252, limit: 10, from: 1, to: 0, nextAfter: 252},
			{name: "after_head_plus_1", conv: "c-sync", after: 253, limit: 10, want: parley.CodeCursorAhead},
			{name: "after_far_above", conv: "c-sync", after: 1 << 40, limit: 10, want: parley.CodeCursorAhead},
			{name: "epoch_negative", conv: "c-sync", limit: 10, epoch: -1, want: inv},
			{name: "epoch_current", conv: "c-sync", limit: 10, epoch: 1, from: 1, to: 10, nextAfter: 10, hasMore: true},
			{name: "conv_malformed", conv: "c sync", limit: 10, want: inv},
			{name: "conv_too_long", conv: "c-" + strings.Repeat("s", 63), limit: 10, want: inv},
			{name: "unknown_conv_limit_0", conv: "c-nope", limit: 0, want: inv},
			{name: "unknown_conv_after_negative", conv: "c-nope", after: -1, limit: 10, want: inv},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := e.snapshot(t, "c-sync")
				pg, err := e.st.Sync(ctx(t), ana, parley.SyncRequest{Conv: tc.conv, After: tc.after, Limit: tc.limit, Epoch: tc.epoch})
				if !wantCode(t, err, tc.want) {
					return
				}
				e.unchanged(t, "c-sync", before)
				if tc.want != "" {
					return
				}
				wantPage(t, tc.name, pg, span(tc.from, tc.to), tc.nextAfter, tc.hasMore, 252)
				if pg.MinSeq != 1 || pg.Trimmed || pg.Epoch != 1 || pg.Conv != "c-sync" {
					t.Errorf("page: conv %q, min_seq %d, trimmed %v, epoch %d", pg.Conv, pg.MinSeq, pg.Trimmed, pg.Epoch)
				}
			})
		}
	})

	t.Run("other_requests", func(t *testing.T) {
		cases := []struct {
			name string
			do   func(context.Context) error
		}{
			{"fetch_seq_0", func(c context.Context) error { _, err := e.st.Fetch(c, ana, "c-sync", 0); return err }},
			{"fetch_seq_negative", func(c context.Context) error { _, err := e.st.Fetch(c, ana, "c-sync", -1); return err }},
			{"fetch_conv_malformed", func(c context.Context) error { _, err := e.st.Fetch(c, ana, "c sync", 1); return err }},
			{"ack_negative", func(c context.Context) error { _, err := e.st.Ack(c, ana, "c-sync", -1); return err }},
			{"ack_conv_malformed", func(c context.Context) error { _, err := e.st.Ack(c, ana, "c sync", 1); return err }},
			{"read_negative", func(c context.Context) error { _, err := e.st.Read(c, ana, "c-sync", -1); return err }},
			{"read_conv_malformed", func(c context.Context) error { _, err := e.st.Read(c, ana, "", 1); return err }},
			{"recall_target_0", func(c context.Context) error {
				_, err := e.st.Recall(c, ana, parley.RecallRequest{Conv: "c-sync", Target: 0, CMID: "r"})
				return err
			}},
			{"recall_target_negative", func(c context.Context) error {
				_, err := e.st.Recall(c, ana, parley.RecallRequest{Conv: "c-sync", Target: -3, CMID: "r"})
				return err
			}},
			{"recall_cmid_empty", func(c context.Context) error {
				_, err := e.st.Recall(c, ana, parley.RecallRequest{Conv: "c-sync", Target: 3, CMID: ""})
				return err
			}},
			{"recall_cmid_65_multibyte", func(c context.Context) error {
				_, err := e.st.Recall(c, ana, parley.RecallRequest{Conv: "c-sync", Target: 3, CMID: runes(mixed, 65)})
				return err
			}},
			{"recall_cmid_invalid_utf8", func(c context.Context) error {
				_, err := e.st.Recall(c, ana, parley.RecallRequest{Conv: "c-sync", Target: 3, CMID: "r\xff"})
				return err
			}},
			{"recall_conv_malformed", func(c context.Context) error {
				_, err := e.st.Recall(c, ana, parley.RecallRequest{Conv: "c#sync", Target: 3, CMID: "r"})
				return err
			}},
			{"add_member_malformed_user", func(c context.Context) error { _, err := e.st.AddMember(c, ana, "c-sync", "Not Valid"); return err }},
			{"remove_member_malformed_user", func(c context.Context) error { _, err := e.st.RemoveMember(c, ana, "c-sync", "BEN"); return err }},
			{"add_member_conv_malformed", func(c context.Context) error { _, err := e.st.AddMember(c, ana, "c sync", "ben"); return err }},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := e.snapshot(t, "c-sync")
				wantCode(t, tc.do(ctx(t)), inv)
				e.unchanged(t, "c-sync", before)
			})
		}
	})
}

// testRecallRejections: NOT_SENDER, ALREADY_RECALLED, RECALL_WINDOW_EXPIRED
// and NOT_FOUND (missing, purged, not a message), in the documented check
// order, each leaving storage as it was.
func testRecallRejections(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "ana's first") // 3
	e.send(t, ben, c, "k4", "ben's")       // 4

	reject := func(name string, p parley.Principal, target int64, want parley.Code) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.snapshot(t, c)
			_, err := e.st.Recall(ctx(t), p, parley.RecallRequest{Conv: c, Target: target, CMID: "r-" + name})
			wantCode(t, err, want)
			e.unchanged(t, c, before)
		})
	}
	reject("other_senders_message", ben, 3, parley.CodeNotSender)
	reject("other_senders_message_2", ana, 4, parley.CodeNotSender)
	reject("membership_event", ana, 1, parley.CodeNotFound)
	reject("missing_above_head", ana, 99, parley.CodeNotFound)

	r := e.recall(t, ana, c, 3, "r1") // 5
	if r.Seq != 5 {
		t.Fatalf("recall seq %d, want 5", r.Seq)
	}
	reject("already_recalled_other_cmid", ana, 3, parley.CodeAlreadyRecalled)
	reject("not_sender_before_already_recalled", ben, 3, parley.CodeNotSender)
	reject("recall_event", ana, 5, parley.CodeNotFound)

	e.send(t, ana, c, "k6", "ana's second") // 6
	e.db.Backdate(t, c, 6, parley.DefaultRecallWindow+time.Minute)
	reject("window_expired", ana, 6, parley.CodeRecallWindowExpired)
	reject("not_sender_before_window", ben, 6, parley.CodeNotSender)
	reject("already_recalled_before_window", ana, 3, parley.CodeAlreadyRecalled)
	if ev := e.fetch(t, ben, c, 6); ev.Recalled || ev.Body != "ana's second" {
		t.Errorf("after rejected recalls: %s", describe(ev))
	}

	// Purged targets are NOT_FOUND.
	e.send(t, ana, c, "k7", "ana's third") // 7
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 1}), "set retention")
	pr, err := e.st.Purge(ctx(t), c)
	ok(t, err, "purge")
	if pr.MinSeq != 7 {
		t.Fatalf("purge: %+v, want min_seq 7", pr)
	}
	reject("purged_message", ana, 6, parley.CodeNotFound)
	reject("purged_recalled_message", ana, 3, parley.CodeNotFound)
	t.Run("replay_of_purged_recall", func(t *testing.T) {
		// The recall event (seq 5, key r1) was purged: its key is a
		// tombstone, looked up before the target.
		before := e.snapshot(t, c)
		_, err := e.st.Recall(ctx(t), ana, parley.RecallRequest{Conv: c, Target: 3, CMID: "r1"})
		wantCode(t, err, parley.CodeOriginalExpired)
		e.unchanged(t, c, before)
	})
}

// testRecallIdempotent: the same recall request replays with the original
// recall seq and Dup true, even after the window has passed; its cmid on
// another target, or a cmid already used by a message, is
// IDEMPOTENCY_MISMATCH (one key space per sender and conversation).
func testRecallIdempotent(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k1", "first") // 3
	r := e.recall(t, ana, c, 3, "r1")
	if r.Seq != 4 || r.Conv != c {
		t.Fatalf("recall: %+v, want seq 4", r)
	}
	e.send(t, ana, c, "k2", "second") // 5
	before := e.snapshot(t, c)

	replay := func(t *testing.T) {
		t.Helper()
		got, err := e.st.Recall(ctx(t), ana, parley.RecallRequest{Conv: c, Target: 3, CMID: "r1"})
		if wantCode(t, err, "") && (!got.Dup || got.Seq != 4) {
			t.Errorf("replay: %+v, want seq 4 Dup true", got)
		}
		e.unchanged(t, c, before)
	}
	t.Run("replay", replay)

	mismatch := []struct {
		name, cmid string
		target     int64
	}{
		{"same_cmid_other_target", "r1", 5},
		{"message_cmid_as_recall", "k2", 3},
	}
	for _, tc := range mismatch {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.st.Recall(ctx(t), ana, parley.RecallRequest{Conv: c, Target: tc.target, CMID: tc.cmid})
			wantCode(t, err, parley.CodeIdempotencyMismatch)
			e.unchanged(t, c, before)
		})
	}
	t.Run("recall_cmid_as_message", func(t *testing.T) {
		_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "r1", Body: "first"})
		wantCode(t, err, parley.CodeIdempotencyMismatch)
		e.unchanged(t, c, before)
	})
	// A message whose body reads "recall:3" has the fingerprint of a recall
	// of seq 3; the kind tells them apart.
	t.Run("recall_cmid_as_message_with_recall_fingerprint", func(t *testing.T) {
		_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "r1", Body: "recall:3"})
		wantCode(t, err, parley.CodeIdempotencyMismatch)
		e.unchanged(t, c, before)
	})
	t.Run("message_cmid_with_recall_fingerprint_as_recall", func(t *testing.T) {
		s := e.send(t, ana, c, "k-fp", "recall:5")
		after := e.snapshot(t, c)
		_, err := e.st.Recall(ctx(t), ana, parley.RecallRequest{Conv: c, Target: 5, CMID: "k-fp"})
		wantCode(t, err, parley.CodeIdempotencyMismatch)
		e.unchanged(t, c, after)
		if ev := e.fetch(t, ana, c, s.Seq); ev.Kind != parley.EventMessage || ev.Body != "recall:5" {
			t.Errorf("the message was changed: %s", describe(ev))
		}
		before = after
	})
	if ev := e.fetch(t, ana, c, 5); ev.Recalled || ev.Body != "second" {
		t.Errorf("seq 5 after mismatches: %s", describe(ev))
	}

	// The key is looked up before the window.
	e.db.Backdate(t, c, 5, 2*parley.DefaultRecallWindow)
	t.Run("replay_after_window", replay)

	pg := e.sync(t, ana, c, 2, 10)
	wantEvents(t, "history", pg.Events,
		`3 message ana/d1 recalled ""`,
		"4 recall ana/d1 -> 3",
		`5 message ana/d1 "second"`,
		`6 message ana/d1 "recall:5"`)
	ev := e.fetch(t, ana, c, 3)
	if !ev.Recalled || ev.Body != "" || ev.Kind != parley.EventMessage {
		t.Errorf("fetch recalled message: %s", describe(ev))
	}
}

// testRecallWindowDBClock: the window comes from Options.RecallWindow (one
// hour here, so the default ten minutes would fail) and is judged against
// the database clock: a bit less than the window ago is recallable, more is
// not. Event times are the database clock.
func testRecallWindowDBClock(t *testing.T, e *env) {
	const window = time.Hour
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")

	e.send(t, ana, c, "k3", "old") // 3
	e.db.Backdate(t, c, 3, window+time.Minute)
	sentFrom := time.Now()
	e.send(t, ana, c, "k4", "recent") // 4
	sentTo := time.Now()
	e.db.Backdate(t, c, 4, window-time.Minute) // 3 is now 2h-ish old, 4 59 minutes

	if ev := e.fetch(t, ana, c, 4); !within(ev.At, sentFrom.Add(-(window - time.Minute)), sentTo.Add(-(window - time.Minute))) {
		t.Errorf("backdated event at %v, want about %v", ev.At, sentFrom.Add(-(window - time.Minute)))
	}

	before := e.snapshot(t, c)
	_, err := e.st.Recall(ctx(t), ana, parley.RecallRequest{Conv: c, Target: 3, CMID: "r3"})
	wantCode(t, err, parley.CodeRecallWindowExpired)
	e.unchanged(t, c, before)

	from := time.Now()
	r := e.recall(t, ana, c, 4, "r4")
	to := time.Now()
	if r.Seq != 5 {
		t.Errorf("recall seq %d, want 5", r.Seq)
	}
	ev := e.fetch(t, ana, c, r.Seq)
	if ev.Kind != parley.EventRecall || ev.Target != 4 || !within(ev.At, from, to) {
		t.Errorf("recall event %s at %v, want between %v and %v", describe(ev), ev.At, from, to)
	}
}

// testPagingUnderWrites (C7): one goroutine sends while a reader pages with
// limit 7, storing NextAfter only after each whole page. The reader ends up
// with every event exactly once, in order, no gaps, equal to a final full
// read.
func testPagingUnderWrites(t *testing.T, e *env) {
	const n = 150
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	writer := e.db.Open(t)

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for i := range n {
			_, err := writer.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: fmt.Sprintf("w%03d", i), Body: fmt.Sprintf("message %d", i)})
			if err != nil {
				t.Errorf("writer send %d: %v", i, err)
				return
			}
		}
	})
	defer wg.Wait()

	var applied []parley.Event
	var cursor int64
	writerDone := false
	for pages := 0; ; pages++ {
		if pages > 400*n { // at least a millisecond per empty page: a minute
			t.Fatalf("reader did not finish after %d pages", pages)
		}
		if !writerDone {
			select {
			case <-done:
				writerDone = true
			default:
			}
		}
		pg, err := e.st.Sync(ctx(t), ben, parley.SyncRequest{Conv: c, After: cursor, Limit: 7})
		if err != nil {
			t.Fatalf("sync after %d: %v", cursor, err)
		}
		if len(pg.Events) > 7 {
			t.Fatalf("sync after %d: %d events for limit 7", cursor, len(pg.Events))
		}
		for _, ev := range pg.Events {
			last := cursor
			if len(applied) > 0 {
				last = max(last, applied[len(applied)-1].Seq)
			}
			if ev.Seq != last+1 {
				t.Fatalf("after %d the reader got seq %d (gap, repeat or disorder)", last, ev.Seq)
			}
			applied = append(applied, ev)
		}
		if len(pg.Events) > 0 && pg.NextAfter != pg.Events[len(pg.Events)-1].Seq {
			t.Fatalf("NextAfter %d, last event %d", pg.NextAfter, pg.Events[len(pg.Events)-1].Seq)
		}
		if pg.NextAfter < cursor || pg.NextAfter > pg.Head {
			t.Fatalf("NextAfter %d outside [cursor %d, head %d]", pg.NextAfter, cursor, pg.Head)
		}
		cursor = pg.NextAfter // the whole page is applied
		if writerDone && len(pg.Events) == 0 && !pg.HasMore {
			break
		}
		if len(pg.Events) == 0 && !writerDone {
			// Caught up: give the writer a moment rather than spinning
			// (on a loaded machine a spinning reader starves it).
			select {
			case <-done:
				writerDone = true
			case <-time.After(time.Millisecond):
			}
		}
	}
	wg.Wait()

	final := e.syncAll(t, ben, c, 0)
	if got, want := seqs(final), span(1, n+2); !slices.Equal(got, want) {
		t.Fatalf("final read: seqs %v, want 1..%d", got, n+2)
	}
	if !slices.Equal(describeAll(applied), describeAll(final)) {
		t.Errorf("paged read differs from the final read:\npaged %v\nfinal %v", describeAll(applied), describeAll(final))
	}
	for i := range min(len(applied), len(final)) {
		if applied[i].MID != final[i].MID {
			t.Errorf("seq %d: paged mid %s, final mid %s", applied[i].Seq, applied[i].MID, final[i].MID)
		}
	}
	if h := e.conv(t, c).Head; h != n+2 || cursor != h {
		t.Errorf("head %d, reader cursor %d; want both %d", h, cursor, n+2)
	}
}

// testFetchRules: Fetch's check order — INVALID_ARGUMENT → NOT_MEMBER (no
// period) → NOT_FOUND (above the capped head) → NOT_MEMBER (outside the
// periods) → NOT_FOUND (purged) — and recalled messages come without body.
func testFetchRules(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	cy := e.member(t, "cy")
	e.bystander(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "before cy") // 3
	if ch, err := e.st.AddMember(ctx(t), ana, c, "cy"); err != nil || ch.Seq != 4 {
		t.Fatalf("add cy: %+v %v", ch, err)
	}
	e.send(t, ana, c, "k5", "with cy")  // 5
	e.send(t, ana, c, "k6", "recalled") // 6
	e.recall(t, ana, c, 6, "r6")        // 7
	if ch, err := e.st.RemoveMember(ctx(t), ana, c, "cy"); err != nil || ch.Seq != 8 {
		t.Fatalf("remove cy: %+v %v", ch, err)
	}
	e.send(t, ana, c, "k9", "after cy") // 9

	if ev := e.fetch(t, cy, c, 6); !ev.Recalled || ev.Body != "" || ev.Sender != "ana" {
		t.Errorf("recalled message: %s", describe(ev))
	}
	if ev := e.fetch(t, cy, c, 7); ev.Kind != parley.EventRecall || ev.Target != 6 {
		t.Errorf("recall event: %s", describe(ev))
	}
	if ev := e.fetch(t, cy, c, 8); ev.Kind != parley.EventMemberLeft || ev.User != "cy" || ev.Sender != "ana" {
		t.Errorf("own removal: %s", describe(ev))
	}

	check := func(name string, p parley.Principal, conv string, seq int64, want parley.Code) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.snapshot(t, c)
			_, err := e.st.Fetch(ctx(t), p, conv, seq)
			wantCode(t, err, want)
			e.unchanged(t, c, before)
		})
	}
	check("seq_0", cy, c, 0, parley.CodeInvalidArgument)
	check("unknown_conv", cy, "c-nope", 1, parley.CodeNotMember)
	check("before_period", cy, c, 3, parley.CodeNotMember)
	check("above_capped_head", cy, c, 9, parley.CodeNotFound)
	check("above_head", ana, c, 10, parley.CodeNotFound)
	check("far_above_head", cy, c, 1<<40, parley.CodeNotFound)

	// Purge 1..5: seq 5 was inside cy's period (NOT_FOUND), seq 3 outside
	// (NOT_MEMBER comes first).
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 4}), "set retention")
	pr, err := e.st.Purge(ctx(t), c)
	ok(t, err, "purge")
	if pr.MinSeq != 6 || pr.Deleted != 5 {
		t.Fatalf("purge: %+v, want 5 deleted, min_seq 6", pr)
	}
	check("purged_inside_period", cy, c, 5, parley.CodeNotFound)
	check("purged_outside_period", cy, c, 3, parley.CodeNotMember)
	check("purged_for_member", ana, c, 3, parley.CodeNotFound)
}

// testCancelledIsUnavailable: a call whose context is already cancelled (a
// client gone, a deadline passed) fails without a protocol code, which
// clients read as UNAVAILABLE: retry with the same key. It writes nothing,
// and the store serves the next call.
func testCancelledIsUnavailable(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k1", "first") // 3
	before := e.snapshot(t, c)

	dead, cancel := context.WithCancel(ctx(t))
	cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{"send", func() error {
			_, err := e.st.Send(dead, ana, parley.SendRequest{Conv: c, CMID: "k2", Body: "second"})
			return err
		}},
		{"recall", func() error {
			_, err := e.st.Recall(dead, ana, parley.RecallRequest{Conv: c, Target: 3, CMID: "r1"})
			return err
		}},
		{"sync", func() error {
			_, err := e.st.Sync(dead, ana, parley.SyncRequest{Conv: c, Limit: 10})
			return err
		}},
		{"ack", func() error { _, err := e.st.Ack(dead, ana, c, 3); return err }},
		{"convs", func() error { _, err := e.st.Convs(dead, ana, parley.ConvsRequest{Limit: 1}); return err }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("a call with a cancelled context succeeded")
			}
			wantCode(t, err, parley.CodeUnavailable)
			if msg := parley.ErrorMessage(err); msg != parley.InternalMessage {
				t.Errorf("client message %q, want the generic %q", msg, parley.InternalMessage)
			}
			e.unchanged(t, c, before)
		})
	}
	// The key was never used: the retry lands as new.
	if s := e.send(t, ana, c, "k2", "second"); s.Dup || s.Seq != 4 {
		t.Errorf("retry after the failed call: %+v, want seq 4 dup false", s)
	}
}

// testSentAtReadBack: a new send's Sent.At is exactly the At its event is
// read back with (Fetch and Sync: UTC, whole milliseconds), so a gateway
// can hand the event out without reading it; a replay's At is zero.
func testSentAtReadBack(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	var sent []parley.Sent
	for i := range 5 {
		sent = append(sent, e.send(t, ana, "c-ab", fmt.Sprintf("k%d", i), fmt.Sprintf("m%d", i)))
	}
	byseq := map[int64]parley.Event{}
	for _, ev := range e.syncAll(t, ana, "c-ab", 2) {
		byseq[ev.Seq] = ev
	}
	for _, s := range sent {
		ev := e.fetch(t, ana, "c-ab", s.Seq)
		if s.At.IsZero() || s.At.Location() != time.UTC || !s.At.Equal(ev.At) || !s.At.Equal(byseq[s.Seq].At) {
			t.Errorf("seq %d: Sent.At %v, read back %v (fetch) and %v (sync)", s.Seq, s.At, ev.At, byseq[s.Seq].At)
		}
	}
	again, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: "c-ab", CMID: "k0", Body: "m0"})
	if wantCode(t, err, "") && (!again.Dup || !again.At.IsZero()) {
		t.Errorf("replay: %+v, want Dup and a zero At", again)
	}
}
