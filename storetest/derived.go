package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of derived state (derived.go in the root package): edits,
// versions, reactions, replies and threads, mentions, and how retention,
// rollback, the former-member cap and the gateways' feed treat them.

// derivedSnapshot is what a rejected request must leave as it was in the
// derived tables, next to snapshot.
type derivedSnapshot struct {
	Reactions    int64 // reactions rows
	ReactionsOn  int64 // of them in state on
	ReactionSeqs int64 // sum of their seqs: catches a row set to another event
	Mentions     int64 // mentions rows
	MentionSeqs  int64
	Edits        int64 // edit events
	ReactEvents  int64 // reaction events
	ReplyEvents  int64 // messages with reply_to
}

// fullSnapshot is snapshot and derivedSnapshot together.
type fullSnapshot struct {
	snapshot
	derivedSnapshot
}

func (e *env) full(t *testing.T, conv string) fullSnapshot {
	t.Helper()
	q := func(query string) int64 { t.Helper(); return e.db.Int(t, query, conv) }
	return fullSnapshot{e.snapshot(t, conv), derivedSnapshot{
		Reactions:    q("SELECT count(*) FROM reactions WHERE conv_id = ?"),
		ReactionsOn:  q("SELECT count(*) FROM reactions WHERE conv_id = ? AND react_on"),
		ReactionSeqs: q("SELECT CAST(sum(seq) AS BIGINT) FROM reactions WHERE conv_id = ?"),
		Mentions:     q("SELECT count(*) FROM mentions WHERE conv_id = ?"),
		MentionSeqs:  q("SELECT CAST(sum(seq) AS BIGINT) FROM mentions WHERE conv_id = ?"),
		Edits:        q("SELECT count(*) FROM events WHERE conv_id = ? AND kind = 'edit'"),
		ReactEvents:  q("SELECT count(*) FROM events WHERE conv_id = ? AND kind = 'reaction'"),
		ReplyEvents:  q("SELECT count(*) FROM events WHERE conv_id = ? AND reply_to IS NOT NULL"),
	}}
}

// fullUnchanged records a failure when conv's storage, derived tables
// included, differs from before.
func (e *env) fullUnchanged(t *testing.T, conv string, before fullSnapshot) {
	t.Helper()
	if after := e.full(t, conv); after != before {
		t.Errorf("a rejected request changed storage of %s:\nbefore %+v\nafter  %+v", conv, before, after)
	}
}

// edit edits a message; the edit must be new.
func (e *env) edit(t *testing.T, p parley.Principal, conv string, target int64, cmid, body string) parley.Edited {
	t.Helper()
	r, err := e.st.Edit(ctx(t), p, parley.EditRequest{Conv: conv, Target: target, CMID: cmid, Body: body})
	ok(t, err, fmt.Sprintf("edit %s/%d by %s", conv, target, p.User))
	if r.Dup || r.Conv != conv || r.Seq < 1 {
		t.Fatalf("edit %s/%d by %s: %+v, want a new edit", conv, target, p.User, r)
	}
	return r
}

// react sets or removes a reaction; it must make a new event.
func (e *env) react(t *testing.T, p parley.Principal, conv string, target int64, emoji string, on bool, cmid string) parley.Reacted {
	t.Helper()
	r, err := e.st.React(ctx(t), p, parley.ReactRequest{Conv: conv, Target: target, Emoji: emoji, On: on, CMID: cmid})
	ok(t, err, fmt.Sprintf("react %s/%d %s %v by %s", conv, target, emoji, on, p.User))
	if r.Dup || r.Conv != conv || r.Seq < 1 {
		t.Fatalf("react %s/%d %s %v by %s: %+v, want a new event", conv, target, emoji, on, p.User, r)
	}
	return r
}

// reply sends a message replying to replyTo; it must be new.
func (e *env) reply(t *testing.T, p parley.Principal, conv, cmid, body string, replyTo int64) parley.Sent {
	t.Helper()
	s, err := e.st.Send(ctx(t), p, parley.SendRequest{Conv: conv, CMID: cmid, Body: body, ReplyTo: replyTo})
	ok(t, err, fmt.Sprintf("reply %s/%s to %d by %s", conv, cmid, replyTo, p.User))
	if s.Dup {
		t.Fatalf("reply %s/%s by %s: Dup true for a new request", conv, cmid, p.User)
	}
	return s
}

// versions reads the versions of a message, which must succeed.
func (e *env) versions(t *testing.T, p parley.Principal, conv string, seq int64) ([]parley.Version, bool) {
	t.Helper()
	vs, recalled, err := e.st.Versions(ctx(t), p, conv, seq)
	ok(t, err, fmt.Sprintf("versions %s/%d by %s", conv, seq, p.User))
	return vs, recalled
}

// describeDerived renders a message's Derived in one line:
//
//	as_of 9 edit 6 👍2+me 🎉1 replies 2 last 8
func describeDerived(d *parley.Derived) string {
	if d == nil {
		return "nil"
	}
	s := fmt.Sprintf("as_of %d", d.AsOf)
	if d.EditSeq != 0 {
		s += fmt.Sprintf(" edit %d", d.EditSeq)
	}
	for _, r := range d.Reactions {
		s += fmt.Sprintf(" %s%d", r.Emoji, r.Count)
		if r.Me {
			s += "+me"
		}
	}
	if d.Replies != 0 || d.LastReplySeq != 0 {
		s += fmt.Sprintf(" replies %d last %d", d.Replies, d.LastReplySeq)
	}
	return s
}

// wantDerived checks a message's body and derived state.
func wantDerived(t *testing.T, what string, ev parley.Event, body, derived string) {
	t.Helper()
	if ev.Kind != parley.EventMessage {
		t.Errorf("%s: %s is no message", what, describe(ev))
		return
	}
	if got := describeDerived(ev.Derived); ev.Body != body || got != derived {
		t.Errorf("%s: seq %d body %q, derived %q; want %q, %q", what, ev.Seq, ev.Body, got, body, derived)
	}
}

// eventAt returns the event of seq in evs (the zero Event when absent).
func eventAt(evs []parley.Event, seq int64) parley.Event {
	for _, ev := range evs {
		if ev.Seq == seq {
			return ev
		}
	}
	return parley.Event{}
}

// wantVersions compares versions by seq and body.
func wantVersions(t *testing.T, what string, got []parley.Version, want ...string) {
	t.Helper()
	g := make([]string, len(got))
	for i, v := range got {
		g[i] = fmt.Sprintf("%d %s", v.Seq, v.Body)
	}
	if !slices.Equal(g, want) {
		t.Errorf("%s: versions %q, want %q", what, g, want)
	}
}

// testEditBasics: an edit is an event of kind edit (target, new body);
// Sync and Fetch then show the message with the newest text, EditSeq and
// EditedAt of that edit and AsOf the read's head, while the stored message
// keeps its original body and time. A page that ends before the edit still
// shows it: AsOf is the capped head, not the page's end.
func testEditBasics(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "first") // 3
	sentAt := e.fetch(t, ana, c, 3).At
	from := time.Now()
	ed := e.edit(t, ana, c, 3, "e1", "first, edited") // 4
	to := time.Now()
	if ed.Seq != 4 {
		t.Fatalf("edit: %+v, want seq 4", ed)
	}
	e.send(t, ben, c, "k5", "later") // 5

	for _, p := range []parley.Principal{ana, ben} {
		pg := e.sync(t, p, c, 0, 50)
		wantEvents(t, "history read by "+p.User, pg.Events,
			"1 member_joined ana: ana",
			"2 member_joined ana: ben",
			`3 message ana/d1 "first, edited"`,
			`4 edit ana/d1 -> 3 "first, edited"`,
			`5 message ben/d1 "later"`)
		if len(pg.Events) != 5 {
			continue
		}
		msg, edit := pg.Events[2], pg.Events[3]
		wantDerived(t, "sync by "+p.User, msg, "first, edited", "as_of 5 edit 4")
		wantDerived(t, "sync by "+p.User, pg.Events[4], "later", "as_of 5")
		if msg.Derived != nil && !msg.Derived.EditedAt.Equal(edit.At) {
			t.Errorf("EditedAt %v, the edit event's time %v", msg.Derived.EditedAt, edit.At)
		}
		if !msg.At.Equal(sentAt) {
			t.Errorf("the message's time moved to %v from %v", msg.At, sentAt)
		}
		if !within(edit.At, from, to) || edit.Derived != nil || edit.Target != 3 || edit.MID == "" {
			t.Errorf("edit event: %s at %v mid %q derived %v; want target 3, a time between %v and %v, no derived", describe(edit), edit.At, edit.MID, edit.Derived, from, to)
		}
		for _, ev := range pg.Events[:2] {
			if ev.Derived != nil {
				t.Errorf("membership event %s decorated", describe(ev))
			}
		}
	}
	wantDerived(t, "fetch", e.fetch(t, ben, c, 3), "first, edited", "as_of 5 edit 4")
	pg := e.sync(t, ben, c, 2, 1)
	wantPage(t, "a page of one", pg, []int64{3}, 3, true, 5)
	if len(pg.Events) == 1 {
		wantDerived(t, "a page of one", pg.Events[0], "first, edited", "as_of 5 edit 4")
	}

	e.edit(t, ana, c, 3, "e2", "third version") // 6
	wantDerived(t, "after a second edit", e.fetch(t, ben, c, 3), "third version", "as_of 6 edit 6")
	if !e.bodyIs(t, c, 3, "first") {
		t.Errorf("the stored message's body changed; edits are events")
	}
	if ev := e.fetch(t, ben, c, 4); ev.Kind != parley.EventEdit || ev.Body != "first, edited" || ev.Target != 3 || ev.Derived != nil {
		t.Errorf("fetch of the edit event: %s derived %v", describe(ev), ev.Derived)
	}
}

// testEditRejections: each rejection in the documented check order, each
// leaving storage as it was: NOT_FOUND (missing, not a message, before the
// caller's period: even before NOT_SENDER), NOT_SENDER, ALREADY_RECALLED,
// NOT_MEMBER (non-member, unknown conversation, former member).
func testEditRejections(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy", "dan")
	ana, ben, cy, dan := ps[0], ps[1], ps[2], ps[3]
	const c = "c-abc"
	e.group(t, ana, c, "ben")                      // 1, 2
	e.send(t, ana, c, "k3", "ana's")               // 3
	e.send(t, ben, c, "k4", "ben's")               // 4
	e.send(t, ana, c, "k5", "to be recalled")      // 5
	e.recall(t, ana, c, 5, "r6")                   // 6
	_, err := e.st.AddMember(ctx(t), ana, c, "cy") // 7
	ok(t, err, "add cy")
	e.send(t, cy, c, "k8", "cy's")     // 8
	e.edit(t, ben, c, 4, "e9", "ben!") // 9
	e.react(t, ana, c, 4, "👍", true, "x10")

	reject := func(name string, p parley.Principal, conv string, target int64, want parley.Code) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.full(t, c)
			_, err := e.st.Edit(ctx(t), p, parley.EditRequest{Conv: conv, Target: target, CMID: "e-" + name, Body: "new"})
			wantCode(t, err, want)
			e.fullUnchanged(t, c, before)
		})
	}
	reject("other_senders_message", ben, c, 3, parley.CodeNotSender)
	reject("other_senders_message_2", ana, c, 4, parley.CodeNotSender)
	reject("recalled", ana, c, 5, parley.CodeAlreadyRecalled)
	reject("not_sender_before_recalled", ben, c, 5, parley.CodeNotSender)
	reject("missing", ana, c, 99, parley.CodeNotFound)
	reject("membership_event", ana, c, 1, parley.CodeNotFound)
	reject("recall_event", ana, c, 6, parley.CodeNotFound)
	reject("edit_event", ben, c, 9, parley.CodeNotFound)
	reject("reaction_event", ana, c, 10, parley.CodeNotFound)
	reject("before_callers_period", cy, c, 3, parley.CodeNotFound)
	reject("non_member", dan, c, 3, parley.CodeNotMember)
	reject("unknown_conv", ana, "c-nope", 3, parley.CodeNotMember)
	if _, err := e.st.RemoveMember(ctx(t), ana, c, "ben"); err != nil {
		t.Fatal(err)
	}
	reject("former_member_own_message", ben, c, 4, parley.CodeNotMember)
	for seq, body := range map[int64]string{3: "ana's", 4: "ben!", 8: "cy's"} {
		if ev := e.fetch(t, ana, c, seq); ev.Body != body {
			t.Errorf("after rejected edits: %s, want body %q", describe(ev), body)
		}
	}
}

// testEditIdempotent: the same edit request replays with the edit's seq
// and Dup, even after the target is recalled (the key is looked up before
// the target); the key with another body or target, or used before by a
// send, recall or reaction (one key space per sender and conversation,
// kinds compared), is IDEMPOTENCY_MISMATCH.
func testEditIdempotent(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana := ps[0]
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "one")           // 3
	e.send(t, ana, c, "k4", "two")           // 4
	e.react(t, ana, c, 4, "👍", true, "x5")   // 5
	ed := e.edit(t, ana, c, 3, "e1", "one'") // 6
	before := e.full(t, c)

	replay := func(t *testing.T) {
		t.Helper()
		r, err := e.st.Edit(ctx(t), ana, parley.EditRequest{Conv: c, Target: 3, CMID: "e1", Body: "one'"})
		if wantCode(t, err, "") && (!r.Dup || r.Seq != ed.Seq || r.Conv != c) {
			t.Errorf("replay: %+v, want Dup of seq %d", r, ed.Seq)
		}
		e.fullUnchanged(t, c, before)
	}
	t.Run("replay", replay)
	for _, tc := range []struct {
		name   string
		target int64
		cmid   string
		body   string
	}{
		{"same_cmid_other_body", 3, "e1", "one''"},
		{"same_cmid_other_target", 4, "e1", "one'"},
		{"send_cmid_as_edit", 4, "k4", "two"},
		{"send_cmid_as_edit_of_itself", 3, "k3", "one"},
		{"reaction_cmid_as_edit", 4, "x5", "👍"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.st.Edit(ctx(t), ana, parley.EditRequest{Conv: c, Target: tc.target, CMID: tc.cmid, Body: tc.body})
			wantCode(t, err, parley.CodeIdempotencyMismatch)
			e.fullUnchanged(t, c, before)
		})
	}
	t.Run("edit_cmid_as_send", func(t *testing.T) {
		_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "e1", Body: "one'"})
		wantCode(t, err, parley.CodeIdempotencyMismatch)
		e.fullUnchanged(t, c, before)
	})
	t.Run("edit_cmid_as_recall", func(t *testing.T) {
		_, err := e.st.Recall(ctx(t), ana, parley.RecallRequest{Conv: c, Target: 3, CMID: "e1"})
		wantCode(t, err, parley.CodeIdempotencyMismatch)
		e.fullUnchanged(t, c, before)
	})
	t.Run("edit_cmid_as_reaction", func(t *testing.T) {
		_, err := e.st.React(ctx(t), ana, parley.ReactRequest{Conv: c, Target: 3, Emoji: "👍", On: true, CMID: "e1"})
		wantCode(t, err, parley.CodeIdempotencyMismatch)
		e.fullUnchanged(t, c, before)
	})
	e.recall(t, ana, c, 3, "r7")
	before = e.full(t, c)
	t.Run("replay_after_recall", replay)
	t.Run("new_edit_after_recall", func(t *testing.T) {
		_, err := e.st.Edit(ctx(t), ana, parley.EditRequest{Conv: c, Target: 3, CMID: "e2", Body: "one'"})
		wantCode(t, err, parley.CodeAlreadyRecalled)
		e.fullUnchanged(t, c, before)
	})
}

// testEditWindow: EditRequest.Window is judged against the target's time
// on the database clock (not the last edit's); 0 means no window; the
// request key and the sender are looked up before the window.
func testEditWindow(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	const window = time.Hour
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "old")    // 3
	e.send(t, ana, c, "k4", "recent") // 4
	e.db.Backdate(t, c, 4, window-time.Minute)
	e.db.Backdate(t, c, 3, 2*time.Minute) // 3 is now 61 minutes old, 4 59

	edit := func(p parley.Principal, target int64, cmid string, w time.Duration) (parley.Edited, error) {
		return e.st.Edit(ctx(t), p, parley.EditRequest{Conv: c, Target: target, CMID: cmid, Body: "edited " + cmid, Window: w})
	}
	before := e.full(t, c)
	_, err := edit(ana, 3, "e-late", window)
	wantCode(t, err, parley.CodeEditWindowExpired)
	e.fullUnchanged(t, c, before)
	_, err = edit(ben, 3, "e-ben", window)
	wantCode(t, err, parley.CodeNotSender)
	e.fullUnchanged(t, c, before)

	if r, err := edit(ana, 4, "e4", window); wantCode(t, err, "") && (r.Dup || r.Seq != 5) {
		t.Errorf("edit inside the window: %+v, want new at 5", r)
	}
	if r, err := edit(ana, 3, "e3", 0); wantCode(t, err, "") && (r.Dup || r.Seq != 6) {
		t.Errorf("edit without a window: %+v, want new at 6", r)
	}
	if r, err := edit(ana, 3, "e3b", 2*window); wantCode(t, err, "") && (r.Dup || r.Seq != 7) {
		t.Errorf("edit inside a longer window: %+v, want new at 7", r)
	}
	// The edits at 6 and 7 are recent; the window still counts from 3.
	before = e.full(t, c)
	_, err = edit(ana, 3, "e-late2", window)
	wantCode(t, err, parley.CodeEditWindowExpired)
	e.fullUnchanged(t, c, before)
	// A replay is no new edit: it answers whatever the window.
	if r, err := edit(ana, 3, "e3", window); wantCode(t, err, "") && (!r.Dup || r.Seq != 6) {
		t.Errorf("replay outside the window: %+v, want Dup of 6", r)
	}
	e.fullUnchanged(t, c, before)
	wantDerived(t, "after the window", e.fetch(t, ben, c, 3), "edited e3b", "as_of 7 edit 7")
}

// testDerivedBounds: malformed edits, reactions, replies, versions and
// thread reads are INVALID_ARGUMENT before any storage work (to an unknown
// conversation too), and change nothing; the largest edit body is stored
// as sent.
func testDerivedBounds(t *testing.T, e *env) {
	ana := e.users(t, "ana", "ben")[0]
	const c = "c-ab"
	const inv = parley.CodeInvalidArgument
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "target") // 3
	mixed := "é键😀a"
	edit := func(r parley.EditRequest) func() error {
		return func() error { _, err := e.st.Edit(ctx(t), ana, r); return err }
	}
	react := func(r parley.ReactRequest) func() error {
		return func() error { _, err := e.st.React(ctx(t), ana, r); return err }
	}
	cases := []struct {
		name string
		do   func() error
	}{
		{"edit_body_empty", edit(parley.EditRequest{Conv: c, Target: 3, CMID: "e", Body: ""})},
		{"edit_body_4001_ascii", edit(parley.EditRequest{Conv: c, Target: 3, CMID: "e", Body: strings.Repeat("a", 4001)})},
		{"edit_body_4001_multibyte", edit(parley.EditRequest{Conv: c, Target: 3, CMID: "e", Body: runes(mixed, 4001)})},
		{"edit_body_invalid_utf8", edit(parley.EditRequest{Conv: c, Target: 3, CMID: "e", Body: "a\xffb"})},
		{"edit_body_nul", edit(parley.EditRequest{Conv: c, Target: 3, CMID: "e", Body: "a\x00b"})},
		{"edit_target_0", edit(parley.EditRequest{Conv: c, Target: 0, CMID: "e", Body: "x"})},
		{"edit_target_negative", edit(parley.EditRequest{Conv: c, Target: -3, CMID: "e", Body: "x"})},
		{"edit_cmid_empty", edit(parley.EditRequest{Conv: c, Target: 3, CMID: "", Body: "x"})},
		{"edit_cmid_65", edit(parley.EditRequest{Conv: c, Target: 3, CMID: runes(mixed, 65), Body: "x"})},
		{"edit_window_negative", edit(parley.EditRequest{Conv: c, Target: 3, CMID: "e", Body: "x", Window: -time.Second})},
		{"edit_all_max_negative", edit(parley.EditRequest{Conv: c, Target: 3, CMID: "e", Body: "x", AllMax: -1})},
		{"edit_conv_malformed", edit(parley.EditRequest{Conv: "c ab", Target: 3, CMID: "e", Body: "x"})},
		{"edit_bad_body_to_unknown_conv", edit(parley.EditRequest{Conv: "c-nope", Target: 3, CMID: "e", Body: ""})},
		{"react_emoji_empty", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: "", On: true})},
		{"react_emoji_space", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: "👍 ", On: true})},
		{"react_emoji_inner_space", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: "a b", On: true})},
		{"react_emoji_tab", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: "\t", On: true})},
		{"react_emoji_control", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: "a\x1b", On: true})},
		{"react_emoji_nul", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: "a\x00", On: true})},
		{"react_emoji_65", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: strings.Repeat("😀", 65), On: true})},
		{"react_emoji_invalid_utf8", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: "\xf0\x9f", On: true})},
		{"react_emoji_off_with_space", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "x", Emoji: " ", On: false})},
		{"react_target_0", react(parley.ReactRequest{Conv: c, Target: 0, CMID: "x", Emoji: "👍", On: true})},
		{"react_cmid_empty", react(parley.ReactRequest{Conv: c, Target: 3, CMID: "", Emoji: "👍", On: true})},
		{"react_bad_emoji_to_unknown_conv", react(parley.ReactRequest{Conv: "c-nope", Target: 3, CMID: "x", Emoji: "a b", On: true})},
		{"send_reply_to_negative", func() error {
			_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "s", Body: "x", ReplyTo: -1})
			return err
		}},
		{"send_all_max_negative", func() error {
			_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "s", Body: "x", AllMax: -1})
			return err
		}},
		{"versions_seq_0", func() error { _, _, err := e.st.Versions(ctx(t), ana, c, 0); return err }},
		{"versions_conv_malformed", func() error { _, _, err := e.st.Versions(ctx(t), ana, "c/ab", 3); return err }},
		{"sync_thread_negative", func() error {
			_, err := e.st.Sync(ctx(t), ana, parley.SyncRequest{Conv: c, Limit: 10, Thread: -1})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.full(t, c)
			wantCode(t, tc.do(), inv)
			e.fullUnchanged(t, c, before)
		})
	}
	for i, body := range []string{strings.Repeat("a", 4000), runes(mixed, 4000), "x"} {
		r := e.edit(t, ana, c, 3, fmt.Sprint("e-ok-", i), body)
		if !e.bodyIs(t, c, r.Seq, body) || e.fetch(t, ana, c, 3).Body != body {
			t.Errorf("edit body %d (%d bytes) not stored or read as sent", i, len(body))
		}
	}
}

// testEditFormerMember: ben leaves after an edit, a reaction and a reply;
// what happens later (another edit, reactions toggled, another reply) is
// not in his reads: Sync and Fetch show the text, counts and replies as at
// his last visible seq, and Versions lists only the versions inside his
// periods. Members read everything.
func testEditFormerMember(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	const c = "c-abc"
	e.group(t, ana, c, "ben", "cy")       // 1..3
	e.send(t, ana, c, "k4", "v1")         // 4
	e.react(t, cy, c, 4, "👍", true, "x5") // 5
	e.edit(t, ana, c, 4, "e6", "v2")      // 6
	e.reply(t, ben, c, "k7", "re", 4)     // 7
	if ch, err := e.st.RemoveMember(ctx(t), ana, c, "ben"); err != nil || ch.Seq != 8 {
		t.Fatalf("remove ben: %+v %v", ch, err)
	}
	e.edit(t, ana, c, 4, "e9", "v3")        // 9
	e.react(t, ana, c, 4, "👍", true, "x10") // 10
	e.react(t, cy, c, 4, "👍", false, "x11") // 11
	e.reply(t, cy, c, "k12", "re2", 4)      // 12

	const benView = "as_of 8 edit 6 👍1 replies 1 last 7"
	wantDerived(t, "ben's fetch", e.fetch(t, ben, c, 4), "v2", benView)
	pg := e.sync(t, ben, c, 0, 50)
	wantPage(t, "ben's sync", pg, span(1, 8), 8, false, 8)
	wantDerived(t, "ben's sync", eventAt(pg.Events, 4), "v2", benView)
	vs, recalled := e.versions(t, ben, c, 4)
	wantVersions(t, "ben's versions", vs, "4 v1", "6 v2")
	if recalled {
		t.Errorf("ben's versions: recalled")
	}
	_, _, err := e.st.Versions(ctx(t), ben, c, 9)
	wantCode(t, err, parley.CodeNotFound)
	th, err := e.st.Sync(ctx(t), ben, parley.SyncRequest{Conv: c, Limit: 50, Thread: 4})
	if wantCode(t, err, "") {
		wantPage(t, "ben's thread", th, []int64{4, 7}, 7, false, 8)
	}

	wantDerived(t, "ana's fetch", e.fetch(t, ana, c, 4), "v3", "as_of 12 edit 9 👍1+me replies 2 last 12")
	wantDerived(t, "cy's fetch", e.fetch(t, cy, c, 4), "v3", "as_of 12 edit 9 👍1 replies 2 last 12")
	vs, _ = e.versions(t, ana, c, 4)
	wantVersions(t, "ana's versions", vs, "4 v1", "6 v2", "9 v3")
	if len(vs) == 3 {
		if !vs[0].At.Equal(e.fetch(t, ana, c, 4).At) || !vs[2].At.Equal(e.fetch(t, ana, c, 9).At) {
			t.Errorf("version times %v, want the message's and the edits' times", vs)
		}
		if vs[1].At.Before(vs[0].At) || vs[2].At.Before(vs[1].At) {
			t.Errorf("version times out of order: %v", vs)
		}
	}
}

// testVersionsRecall: Versions lists the original and every edit, oldest
// first; NOT_FOUND for what is no message, NOT_MEMBER for outsiders. A
// recall takes every version away (none, recalled true): the edit events
// come back from Sync, Fetch and Feed with an empty body and Recalled, and
// the message carries no edit.
func testVersionsRecall(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	const c = "c-ab"
	e.group(t, ana, c, "ben")        // 1, 2
	e.send(t, ana, c, "k3", "v1")    // 3
	e.edit(t, ana, c, 3, "e4", "v2") // 4
	e.send(t, ben, c, "k5", "other") // 5
	e.edit(t, ana, c, 3, "e6", "v3") // 6
	vs, recalled := e.versions(t, ben, c, 3)
	wantVersions(t, "versions", vs, "3 v1", "4 v2", "6 v3")
	if recalled {
		t.Errorf("versions: recalled before any recall")
	}
	if vs, _ := e.versions(t, ben, c, 5); len(vs) != 1 || vs[0].Seq != 5 || vs[0].Body != "other" {
		t.Errorf("versions of an unedited message: %+v", vs)
	}
	for _, tc := range []struct {
		name string
		p    parley.Principal
		conv string
		seq  int64
		want parley.Code
	}{
		{"membership_event", ben, c, 1, parley.CodeNotFound},
		{"edit_event", ben, c, 4, parley.CodeNotFound},
		{"above_head", ben, c, 99, parley.CodeNotFound},
		{"non_member", cy, c, 3, parley.CodeNotMember},
		{"unknown_conv", ben, "c-nope", 3, parley.CodeNotMember},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.st.Versions(ctx(t), tc.p, tc.conv, tc.seq)
			wantCode(t, err, tc.want)
		})
	}

	e.recall(t, ana, c, 3, "r7") // 7
	vs, recalled = e.versions(t, ben, c, 3)
	if len(vs) != 0 || !recalled {
		t.Errorf("versions after the recall: %+v recalled %v; want none, recalled", vs, recalled)
	}
	want := []string{
		`3 message ana/d1 recalled ""`,
		`4 edit ana/d1 -> 3 "" recalled`,
		`5 message ben/d1 "other"`,
		`6 edit ana/d1 -> 3 "" recalled`,
		"7 recall ana/d1 -> 3",
	}
	pg := e.sync(t, ben, c, 2, 50)
	wantEvents(t, "sync after the recall", pg.Events, want...)
	if ev := eventAt(pg.Events, 3); describeDerived(ev.Derived) != "as_of 7" {
		t.Errorf("recalled message derived %q, want as_of 7 only", describeDerived(ev.Derived))
	}
	wantEvents(t, "fetch of a recalled edit", []parley.Event{e.fetch(t, ben, c, 6)}, want[3])
	wantEvents(t, "feed after the recall", e.feed(t, c, 2, 50).Events, want...)
	if n := e.db.Int(t, "SELECT count(*) FROM events WHERE conv_id = ? AND recall_seq = 7", c); n != 3 {
		t.Errorf("%d events with recall_seq 7, want the message and its two edits", n)
	}
}

// testReactSetRemove: a reaction sets or removes one (user, emoji) state;
// asking for the state that already holds writes nothing and answers the
// seq of the event that set it (0 for a removal never set) with Dup; a
// replay of the key answers its event, the key with another emoji, state
// or target is IDEMPOTENCY_MISMATCH. Counts are per emoji over users, `me`
// is the reader's own, and the reactions row holds the latest state.
func testReactSetRemove(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	const c = "c-abc"
	e.group(t, ana, c, "ben", "cy") // 1..3
	e.send(t, ana, c, "k4", "hi")   // 4
	e.send(t, ana, c, "k5", "more") // 5
	if r := e.react(t, ben, c, 4, "👍", true, "x1"); r.Seq != 6 {
		t.Fatalf("reaction: %+v, want seq 6", r)
	}
	dup := func(name string, p parley.Principal, r parley.ReactRequest, seq int64) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.full(t, c)
			got, err := e.st.React(ctx(t), p, r)
			if wantCode(t, err, "") && (!got.Dup || got.Seq != seq || got.Conv != c) {
				t.Errorf("got %+v, want Dup with seq %d", got, seq)
			}
			e.fullUnchanged(t, c, before)
		})
	}
	mismatch := func(name string, r parley.ReactRequest) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.full(t, c)
			_, err := e.st.React(ctx(t), ben, r)
			wantCode(t, err, parley.CodeIdempotencyMismatch)
			e.fullUnchanged(t, c, before)
		})
	}
	on := func(cmid string) parley.ReactRequest {
		return parley.ReactRequest{Conv: c, Target: 4, Emoji: "👍", On: true, CMID: cmid}
	}
	dup("on_again_other_key", ben, on("x2"), 6)
	dup("replay", ben, on("x1"), 6)
	mismatch("same_key_off", parley.ReactRequest{Conv: c, Target: 4, Emoji: "👍", On: false, CMID: "x1"})
	mismatch("same_key_other_emoji", parley.ReactRequest{Conv: c, Target: 4, Emoji: "🎉", On: true, CMID: "x1"})
	mismatch("same_key_other_target", parley.ReactRequest{Conv: c, Target: 5, Emoji: "👍", On: true, CMID: "x1"})
	dup("removal_never_set", ana, parley.ReactRequest{Conv: c, Target: 4, Emoji: "🎉", On: false, CMID: "z0"}, 0)

	e.react(t, ben, c, 4, "👍", false, "x3") // 7
	dup("off_again", ben, parley.ReactRequest{Conv: c, Target: 4, Emoji: "👍", On: false, CMID: "x4"}, 7)
	e.react(t, ben, c, 4, "👍", true, "x6")    // 8
	e.react(t, cy, c, 4, "👍", true, "y1")     // 9
	e.react(t, cy, c, 4, "🎉", true, "y2")     // 10
	e.react(t, ana, c, 4, "🎉", true, "z1")    // 11
	e.react(t, ana, c, 5, ":ok:", true, "z2") // 12
	dup("on_again_after_toggles", ben, on("x7"), 8)

	for p, want := range map[parley.Principal]string{
		ana: "as_of 12 👍2 🎉2+me",
		ben: "as_of 12 👍2+me 🎉2",
		cy:  "as_of 12 👍2+me 🎉2+me",
	} {
		wantDerived(t, "fetch by "+p.User, e.fetch(t, p, c, 4), "hi", want)
		pg := e.sync(t, p, c, 3, 50)
		wantDerived(t, "sync by "+p.User, eventAt(pg.Events, 4), "hi", want)
	}
	wantDerived(t, "another message", e.fetch(t, ben, c, 5), "more", "as_of 12 :ok:1")
	pg := e.sync(t, ben, c, 5, 50)
	wantEvents(t, "reaction events", pg.Events,
		"6 reaction ben/d1 -> 4 👍 on",
		"7 reaction ben/d1 -> 4 👍 off",
		"8 reaction ben/d1 -> 4 👍 on",
		"9 reaction cy/d1 -> 4 👍 on",
		"10 reaction cy/d1 -> 4 🎉 on",
		"11 reaction ana/d1 -> 4 🎉 on",
		"12 reaction ana/d1 -> 5 :ok: on")
	for _, ev := range pg.Events {
		if ev.Body != "" || ev.Derived != nil || ev.MID == "" {
			t.Errorf("reaction event %s: body %q derived %v mid %q", describe(ev), ev.Body, ev.Derived, ev.MID)
		}
	}
	if n := e.db.Int(t, "SELECT count(*) FROM reactions WHERE conv_id = ? AND react_on", c); n != 5 {
		t.Errorf("%d reactions rows on, want 5", n)
	}
	if s := e.db.Int(t, "SELECT seq FROM reactions WHERE conv_id = ? AND target = ? AND user_id = ? AND emoji = ?", c, 4, "ben", "👍"); s != 8 {
		t.Errorf("ben's 👍 row at seq %d, want 8", s)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM reactions WHERE conv_id = ? AND user_id = ? AND emoji = ?", c, "ana", "🎉"); n != 1 {
		t.Errorf("%d rows of ana's 🎉: the removal never set wrote one, or the set did not", n)
	}
	e.send(t, ben, c, "k-ben", "👍")
	mismatch("send_key_as_reaction", parley.ReactRequest{Conv: c, Target: 4, Emoji: "👍", On: true, CMID: "k-ben"})
}

// testReactRejections: NOT_FOUND (missing, no message, before the caller's
// period), ALREADY_RECALLED, NOT_MEMBER (non-member, unknown conversation,
// former member, whose replay still answers), each changing nothing; a
// recall hides the message's reactions.
func testReactRejections(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy", "dan")
	ana, ben, cy, dan := ps[0], ps[1], ps[2], ps[3]
	const c = "c-abc"
	e.group(t, ana, c, "ben")                      // 1, 2
	e.send(t, ana, c, "k3", "target")              // 3
	e.send(t, ana, c, "k4", "recalled")            // 4
	e.recall(t, ana, c, 4, "r5")                   // 5
	_, err := e.st.AddMember(ctx(t), ana, c, "cy") // 6
	ok(t, err, "add cy")
	e.edit(t, ana, c, 3, "e7", "target'")  // 7
	e.react(t, ben, c, 3, "👍", true, "x8") // 8

	reject := func(name string, p parley.Principal, conv string, target int64, want parley.Code) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.full(t, c)
			_, err := e.st.React(ctx(t), p, parley.ReactRequest{Conv: conv, Target: target, Emoji: "🎉", On: true, CMID: "x-" + name})
			wantCode(t, err, want)
			e.fullUnchanged(t, c, before)
		})
	}
	reject("recalled", ben, c, 4, parley.CodeAlreadyRecalled)
	reject("missing", ben, c, 99, parley.CodeNotFound)
	reject("membership_event", ben, c, 1, parley.CodeNotFound)
	reject("recall_event", ben, c, 5, parley.CodeNotFound)
	reject("edit_event", ben, c, 7, parley.CodeNotFound)
	reject("reaction_event", ben, c, 8, parley.CodeNotFound)
	reject("before_callers_period", cy, c, 3, parley.CodeNotFound)
	reject("non_member", dan, c, 3, parley.CodeNotMember)
	reject("unknown_conv", ben, "c-nope", 3, parley.CodeNotMember)
	if _, err := e.st.RemoveMember(ctx(t), ana, c, "ben"); err != nil { // 9
		t.Fatal(err)
	}
	reject("former_member", ben, c, 3, parley.CodeNotMember)
	t.Run("former_members_replay", func(t *testing.T) {
		before := e.full(t, c)
		r, err := e.st.React(ctx(t), ben, parley.ReactRequest{Conv: c, Target: 3, Emoji: "👍", On: true, CMID: "x8"})
		if wantCode(t, err, "") && (!r.Dup || r.Seq != 8) {
			t.Errorf("replay after removal: %+v, want Dup of 8", r)
		}
		e.fullUnchanged(t, c, before)
	})
	wantDerived(t, "before the recall", e.fetch(t, ana, c, 3), "target'", "as_of 9 edit 7 👍1")
	e.recall(t, ana, c, 3, "r10")
	wantDerived(t, "after the recall", e.fetch(t, ana, c, 3), "", "as_of 10")
	reject("recalled_after_reactions", ana, c, 3, parley.CodeAlreadyRecalled)
	// The target is checked before the state: removing a reaction never
	// set from a recalled message is refused, not a Dup.
	t.Run("remove_never_set_from_recalled", func(t *testing.T) {
		before := e.full(t, c)
		_, err := e.st.React(ctx(t), ana, parley.ReactRequest{Conv: c, Target: 3, Emoji: "👍", On: false, CMID: "x-off"})
		wantCode(t, err, parley.CodeAlreadyRecalled)
		e.fullUnchanged(t, c, before)
	})
}

// testReactConcurrentOneEvent: 100 identical reactions race on separate
// connections, first under 100 keys, then under one key, then 100
// removals: each time exactly one answers Dup false, every answer names
// the same seq, one event is written and one reactions row holds it.
func testReactConcurrentOneEvent(t *testing.T, e *env) {
	const n = 100
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.send(t, ana, c, "k3", "popular") // 3
	stores := make([]parley.Store, 10)
	for i := range stores {
		stores[i] = e.db.Open(t)
	}
	race := func(name, emoji string, on bool, cmid func(int) string) int64 {
		t.Helper()
		results := make([]parley.Reacted, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = stores[i%len(stores)].React(ctx(t), ben, parley.ReactRequest{Conv: c, Target: 3, Emoji: emoji, On: on, CMID: cmid(i)})
			})
		}
		close(start)
		wg.Wait()
		fresh, seq := 0, int64(0)
		for i := range n {
			if !wantCode(t, errs[i], "") {
				continue
			}
			if !results[i].Dup {
				fresh++
				seq = results[i].Seq
			}
		}
		for i := range n {
			if errs[i] == nil && (results[i].Seq != seq || seq == 0) {
				t.Errorf("%s: answer %d is %+v, the new event is seq %d", name, i, results[i], seq)
				break
			}
		}
		if fresh != 1 {
			t.Errorf("%s: %d answers with Dup false, want exactly 1", name, fresh)
		}
		return seq
	}
	s1 := race("keys_on", "👍", true, func(i int) string { return fmt.Sprint("d-", i) })
	s2 := race("one_key_on", "🎉", true, func(int) string { return "same" })
	s3 := race("keys_off", "👍", false, func(i int) string { return fmt.Sprint("off-", i) })
	if got := []int64{s1, s2, s3}; !slices.Equal(got, []int64{4, 5, 6}) {
		t.Errorf("seqs of the new events %v, want [4 5 6]", got)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM events WHERE conv_id = ? AND kind = 'reaction'", c); n != 3 {
		t.Errorf("%d reaction events, want 3", n)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM reactions WHERE conv_id = ?", c); n != 2 {
		t.Errorf("%d reactions rows, want 2 (one per emoji)", n)
	}
	if h := e.conv(t, c).Head; h != 6 {
		t.Errorf("head %d, want 6", h)
	}
	wantDerived(t, "after the races", e.fetch(t, ana, c, 3), "popular", "as_of 6 🎉1")
}

// testReplyRules: a reply names a message of the conversation inside the
// sender's periods (NOT_FOUND otherwise: missing, of another conversation,
// no message, before the sender's period), not recalled
// (ALREADY_RECALLED); a reply to a reply joins the root's thread. The
// root counts its replies that are not recalled. reply_to is part of the
// request's fingerprint.
func testReplyRules(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy", "dan")
	ana, ben, cy, dan := ps[0], ps[1], ps[2], ps[3]
	const c = "c-ab"
	e.group(t, ana, c, "ben")                               // 1, 2
	e.send(t, ana, c, "k3", "root")                         // 3
	if s := e.reply(t, ben, c, "k4", "r1", 3); s.Seq != 4 { // 4
		t.Fatalf("reply: %+v, want seq 4", s)
	}
	e.reply(t, ana, c, "k5", "r2", 4)              // 5: a reply to a reply
	e.send(t, ana, c, "k6", "to be recalled")      // 6
	e.recall(t, ana, c, 6, "r7")                   // 7
	_, err := e.st.AddMember(ctx(t), ana, c, "cy") // 8
	ok(t, err, "add cy")
	e.group(t, ana, "c-other", "ben")
	e.fill(t, ana, "c-other", 10) // seqs 3..12 there

	pg := e.sync(t, ana, c, 2, 50)
	if len(pg.Events) < 3 {
		t.Fatalf("history: %q", describeAll(pg.Events))
	}
	wantEvents(t, "history", pg.Events[:3], `3 message ana/d1 "root"`, `4 message ben/d1 "r1" re 3`, `5 message ana/d1 "r2" re 3`)
	wantDerived(t, "root", eventAt(pg.Events, 3), "root", "as_of 8 replies 2 last 5")
	wantDerived(t, "a reply", eventAt(pg.Events, 4), "r1", "as_of 8")
	if ev := e.fetch(t, cy, c, 8); ev.ReplyTo != 0 || ev.Derived != nil {
		t.Errorf("a membership event: reply_to %d derived %v", ev.ReplyTo, ev.Derived)
	}

	reject := func(name string, p parley.Principal, conv string, replyTo int64, want parley.Code) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			before := e.full(t, c)
			_, err := e.st.Send(ctx(t), p, parley.SendRequest{Conv: conv, CMID: "s-" + name, Body: "re", ReplyTo: replyTo})
			wantCode(t, err, want)
			e.fullUnchanged(t, c, before)
		})
	}
	reject("of_another_conversation", ana, c, 12, parley.CodeNotFound)
	reject("missing", ana, c, 99, parley.CodeNotFound)
	reject("membership_event", ana, c, 1, parley.CodeNotFound)
	reject("recall_event", ana, c, 7, parley.CodeNotFound)
	reject("recalled", ana, c, 6, parley.CodeAlreadyRecalled)
	reject("before_senders_period", cy, c, 3, parley.CodeNotFound)
	reject("non_member", dan, c, 3, parley.CodeNotMember)
	reject("unknown_conv", ana, "c-nope", 3, parley.CodeNotMember)

	e.recall(t, ana, c, 5, "r9") // 9
	wantDerived(t, "root after a reply's recall", e.fetch(t, ben, c, 3), "root", "as_of 9 replies 1 last 4")
	reject("recalled_reply", ben, c, 5, parley.CodeAlreadyRecalled)

	s := e.reply(t, ana, c, "k10", "same words", 4) // 10, stored as a reply to 3
	if ev := e.fetch(t, ben, c, s.Seq); ev.ReplyTo != 3 {
		t.Errorf("a reply to a reply stored with reply_to %d, want the root 3", ev.ReplyTo)
	}
	t.Run("replay", func(t *testing.T) {
		before := e.full(t, c)
		r, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k10", Body: "same words", ReplyTo: 4})
		if wantCode(t, err, "") && (!r.Dup || r.Seq != s.Seq || r.MID != s.MID) {
			t.Errorf("replay of a reply: %+v, want Dup of %+v", r, s)
		}
		e.fullUnchanged(t, c, before)
	})
	for _, tc := range []struct {
		name    string
		cmid    string
		body    string
		replyTo int64
	}{
		{"same_key_reply_to_root", "k10", "same words", 3},
		{"same_key_no_reply", "k10", "same words", 0},
		{"plain_send_key_as_reply", "k3", "root", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.full(t, c)
			_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: tc.cmid, Body: tc.body, ReplyTo: tc.replyTo})
			wantCode(t, err, parley.CodeIdempotencyMismatch)
			e.fullUnchanged(t, c, before)
		})
	}
	wantDerived(t, "root at the end", e.fetch(t, ana, c, 3), "root", "as_of 10 replies 2 last 10")
}

// testThreadSync: Sync with Thread returns the root and its replies only
// (replies to replies included, as they are stored under the root), paged
// like any sync: NextAfter the last returned seq, or the head on an empty
// page; HasMore when more of the thread follows. A root that is no
// message the caller may see is NOT_FOUND.
func testThreadSync(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	const c = "c-ab"
	e.group(t, ana, c, "ben")          // 1, 2
	e.send(t, ana, c, "k3", "root")    // 3
	e.send(t, ben, c, "k4", "other")   // 4
	e.reply(t, ben, c, "k5", "r1", 3)  // 5
	e.send(t, ana, c, "k6", "other 2") // 6
	e.reply(t, ana, c, "k7", "r2", 3)  // 7
	e.reply(t, ben, c, "k8", "r3", 5)  // 8, in 3's thread
	e.send(t, ana, c, "k9", "other 3") // 9
	e.reply(t, ana, c, "k10", "r4", 4) // 10, in 4's thread
	e.edit(t, ana, c, 7, "e11", "r2'") // 11
	e.react(t, ben, c, 3, "👍", true, "x12")
	_, err := e.st.AddMember(ctx(t), ana, c, "cy") // 13
	ok(t, err, "add cy")

	thread := func(p parley.Principal, root, after int64, limit int) (parley.Page, error) {
		return e.st.Sync(ctx(t), p, parley.SyncRequest{Conv: c, After: after, Limit: limit, Thread: root})
	}
	for _, tc := range []struct {
		root, after int64
		limit       int
		seqs        []int64
		nextAfter   int64
		hasMore     bool
	}{
		{3, 0, 2, []int64{3, 5}, 5, true},
		{3, 5, 2, []int64{7, 8}, 8, false},
		{3, 8, 2, nil, 13, false},
		{3, 4, 50, []int64{5, 7, 8}, 8, false},
		{3, 0, 50, []int64{3, 5, 7, 8}, 8, false},
		{4, 0, 50, []int64{4, 10}, 10, false},
		{6, 0, 50, []int64{6}, 6, false},
	} {
		what := fmt.Sprintf("thread %d after %d limit %d", tc.root, tc.after, tc.limit)
		pg, err := thread(ben, tc.root, tc.after, tc.limit)
		if !wantCode(t, err, "") {
			continue
		}
		wantPage(t, what, pg, tc.seqs, tc.nextAfter, tc.hasMore, 13)
		for _, ev := range pg.Events {
			if ev.Kind != parley.EventMessage || (ev.Seq != tc.root && ev.ReplyTo != tc.root) {
				t.Errorf("%s: %s is not of the thread", what, describe(ev))
			}
		}
	}
	pg, err := thread(ben, 3, 0, 50)
	if wantCode(t, err, "") && len(pg.Events) == 4 {
		wantDerived(t, "thread root", pg.Events[0], "root", "as_of 13 👍1+me replies 3 last 8")
		wantDerived(t, "edited reply", pg.Events[2], "r2'", "as_of 13 edit 11")
	}
	for _, tc := range []struct {
		name string
		p    parley.Principal
		root int64
	}{
		{"membership_event", ben, 1},
		{"edit_event", ben, 11},
		{"reaction_event", ben, 12},
		{"missing", ben, 99},
		{"before_callers_period", cy, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := thread(tc.p, tc.root, 0, 50)
			wantCode(t, err, parley.CodeNotFound)
		})
	}
}

// mentionRows counts the stored mentions rows of one event.
func (e *env) mentionRows(t *testing.T, conv string, seq int64) int64 {
	t.Helper()
	return e.db.Int(t, "SELECT count(*) FROM mentions WHERE conv_id = ? AND seq = ?", conv, seq)
}

// testMentionsOpenMembers: a message mentions the members with an open
// period it names, never the sender, a former member or a non-member;
// @all mentions every other member when the members are at most AllMax,
// and nobody more otherwise (AllMax is policy, not part of the
// fingerprint); an edit mentions only users no earlier version mentioned.
// Each mention is one mentions row.
func testMentionsOpenMembers(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy", "dan", "eve")
	ana, ben := ps[0], ps[1]
	const c = "c-abcd"
	e.group(t, ana, c, "ben", "cy", "dan")                              // 1..4
	if _, err := e.st.RemoveMember(ctx(t), ana, c, "dan"); err != nil { // 5
		t.Fatal(err)
	}
	send := func(p parley.Principal, cmid, body string, allMax int) parley.Sent {
		t.Helper()
		s, err := e.st.Send(ctx(t), p, parley.SendRequest{Conv: c, CMID: cmid, Body: body, AllMax: allMax})
		ok(t, err, "send "+cmid)
		return s
	}
	type want struct {
		seq      int64
		mentions []string
	}
	var wants []want
	add := func(seq int64, mentions ...string) { wants = append(wants, want{seq, mentions}) }
	add(send(ana, "k6", "@ben @dan @eve @ana @Cy hi", 0).Seq, "ben", "cy")
	add(send(ana, "k7", "@all hi", 3).Seq, "ben", "cy") // ana, ben, cy: 3 open
	add(send(ana, "k8", "@all hi", 2).Seq)
	add(send(ana, "k9", "@all hi", 0).Seq)
	add(send(ben, "k10", "@all and @ana", 2).Seq, "ana")
	add(send(ana, "k11", "mail ben@example.com", 5).Seq)
	add(send(ana, "k12", "hi @ben", 0).Seq, "ben")
	edit := func(cmid, body string, allMax int) int64 {
		t.Helper()
		r, err := e.st.Edit(ctx(t), ana, parley.EditRequest{Conv: c, Target: 12, CMID: cmid, Body: body, AllMax: allMax})
		ok(t, err, "edit "+cmid)
		return r.Seq
	}
	add(edit("e13", "hi @ben @cy", 0), "cy")
	add(edit("e14", "hi @ben @cy @ana", 0))
	add(edit("e15", "@all", 5))
	add(send(ana, "k16", "plain", 5).Seq)

	pg := e.sync(t, ana, c, 5, 50)
	for _, w := range wants {
		ev := eventAt(pg.Events, w.seq)
		if !slices.Equal(ev.Mentions, w.mentions) {
			t.Errorf("%s: mentions %q, want %q", describe(ev), ev.Mentions, w.mentions)
		}
		if n := e.mentionRows(t, c, w.seq); n != int64(len(w.mentions)) {
			t.Errorf("seq %d: %d mentions rows, want %d", w.seq, n, len(w.mentions))
		}
	}
	if n := e.db.Int(t, "SELECT count(*) FROM mentions WHERE conv_id = ? AND user_id IN ('dan', 'eve')", c); n != 0 {
		t.Errorf("%d mentions rows of a former member or a non-member", n)
	}
	before := e.full(t, c)
	for _, tc := range []struct {
		cmid, body string
		allMax     int
	}{{"k6", "@ben @dan @eve @ana @Cy hi", 0}, {"k7", "@all hi", 0}, {"k8", "@all hi", 50}} {
		r, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: tc.cmid, Body: tc.body, AllMax: tc.allMax})
		if wantCode(t, err, "") && !r.Dup {
			t.Errorf("replay of %s with AllMax %d: %+v, want Dup", tc.cmid, tc.allMax, r)
		}
	}
	e.fullUnchanged(t, c, before)
	if ev := e.fetch(t, ben, c, 7); !slices.Equal(ev.Mentions, []string{"ben", "cy"}) {
		t.Errorf("fetch: mentions %q", ev.Mentions)
	}
}

// testMentionsUnread: ConvSummary.MentionsUnread counts the messages and
// edits after the read cursor that mention the reader and are not recalled
// (a recall takes its edits' mentions too); it drops as Read moves; a
// former member's count stops at the end of their period.
func testMentionsUnread(t *testing.T, e *env) {
	ps := e.users(t, "ana", "cy")
	ana, cy := ps[0], ps[1]
	ben := e.member(t, "ben") // Read wants a device's live install
	const c = "c-abc"
	e.group(t, ana, c, "ben", "cy") // 1..3
	if _, err := e.st.Read(ctx(t), ben, c, 3); err != nil {
		t.Fatal(err)
	}
	e.send(t, ana, c, "k4", "@ben one")    // 4
	e.send(t, ana, c, "k5", "plain")       // 5
	e.send(t, ana, c, "k6", "@ben two")    // 6
	e.send(t, ana, c, "k7", "@ben three")  // 7
	e.recall(t, ana, c, 7, "r8")           // 8
	e.send(t, ana, c, "k9", "hi")          // 9
	e.edit(t, ana, c, 9, "e10", "hi @ben") // 10
	e.send(t, ana, c, "k11", "@cy @ben")   // 11
	counts := func(what string, want map[parley.Principal]int64) {
		t.Helper()
		for p, n := range want {
			if s := e.summary(t, p, c); s.MentionsUnread != n {
				t.Errorf("%s: %s's mentions_unread %d, want %d", what, p.User, s.MentionsUnread, n)
			}
		}
	}
	counts("at first", map[parley.Principal]int64{ben: 4, ana: 0, cy: 1})
	if _, err := e.st.Read(ctx(t), ben, c, 6); err != nil {
		t.Fatal(err)
	}
	counts("after ben read to 6", map[parley.Principal]int64{ben: 2})
	e.recall(t, ana, c, 9, "r12") // 12: the edit's mention goes with it
	counts("after the recall of an edited message", map[parley.Principal]int64{ben: 1})

	if _, err := e.st.RemoveMember(ctx(t), ana, c, "cy"); err != nil { // 13
		t.Fatal(err)
	}
	_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k14", Body: "@cy @all", AllMax: 5}) // 14
	ok(t, err, "send after cy left")
	// A row no store writes (cy has no period at 14): the count is filtered
	// by the reader's periods in the query, not trusted to the writes.
	e.db.Exec(t, "INSERT INTO mentions (conv_id, user_id, seq) VALUES (?, ?, ?)", c, "cy", 14)
	counts("after cy left", map[parley.Principal]int64{ben: 2, cy: 1})
	if _, err := e.st.Read(ctx(t), ben, c, 14); err != nil {
		t.Fatal(err)
	}
	counts("after ben read everything", map[parley.Principal]int64{ben: 0, cy: 1})
}

// testDerivedPurge: a purge deletes the reactions and mentions rows of
// what it deletes (MentionsUnread drops, counts go), tombstones the keys of
// edits and reactions like those of sends (a late replay is
// ORIGINAL_EXPIRED), and a kept reaction event still replays.
func testDerivedPurge(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")               // 1, 2
	e.send(t, ana, c, "k3", "m")            // 3
	e.react(t, ben, c, 3, "👍", true, "rb1") // 4
	e.send(t, ana, c, "k5", "@ben hey")     // 5
	e.edit(t, ana, c, 3, "e1", "m2")        // 6
	e.react(t, ben, c, 3, "🎉", true, "rb2") // 7
	e.send(t, ana, c, "k8", "@ben tail")    // 8
	if s := e.summary(t, ben, c); s.MentionsUnread != 2 {
		t.Errorf("before the purge: mentions_unread %d, want 2", s.MentionsUnread)
	}
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 2}), "keep last 2")
	pr, err := e.st.Purge(ctx(t), c)
	ok(t, err, "purge")
	if want := (parley.PurgeResult{Conv: c, Deleted: 6, Tombstones: 4, MinSeq: 7}); pr != want {
		t.Errorf("purge: %+v, want %+v", pr, want)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM reactions WHERE conv_id = ?", c); n != 0 {
		t.Errorf("%d reactions rows left on a purged target", n)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM mentions WHERE conv_id = ? AND seq <= 6", c); n != 0 {
		t.Errorf("%d mentions rows of purged events", n)
	}
	if n := e.mentionRows(t, c, 8); n != 1 {
		t.Errorf("%d mentions rows of the kept message, want 1", n)
	}
	if s := e.summary(t, ben, c); s.MentionsUnread != 1 {
		t.Errorf("after the purge: mentions_unread %d, want 1", s.MentionsUnread)
	}
	before := e.full(t, c)
	_, err = e.st.Edit(ctx(t), ana, parley.EditRequest{Conv: c, Target: 3, CMID: "e1", Body: "m2"})
	wantCode(t, err, parley.CodeOriginalExpired)
	_, err = e.st.React(ctx(t), ben, parley.ReactRequest{Conv: c, Target: 3, Emoji: "👍", On: true, CMID: "rb1"})
	wantCode(t, err, parley.CodeOriginalExpired)
	_, err = e.st.React(ctx(t), ben, parley.ReactRequest{Conv: c, Target: 3, Emoji: "👍", On: false, CMID: "rb-new"})
	wantCode(t, err, parley.CodeNotFound)
	r, err := e.st.React(ctx(t), ben, parley.ReactRequest{Conv: c, Target: 3, Emoji: "🎉", On: true, CMID: "rb2"})
	if wantCode(t, err, "") && (!r.Dup || r.Seq != 7) {
		t.Errorf("replay of a kept reaction: %+v, want Dup of 7", r)
	}
	e.fullUnchanged(t, c, before)
	_, err = e.st.Edit(ctx(t), ana, parley.EditRequest{Conv: c, Target: 3, CMID: "e-new", Body: "m3"})
	wantCode(t, err, parley.CodeNotFound)
	e.fullUnchanged(t, c, before)
	pg := e.sync(t, ben, c, 6, 50)
	wantEvents(t, "after the purge", pg.Events, "7 reaction ben/d1 -> 3 🎉 on", `8 message ana/d1 "@ben tail"`)
	wantDerived(t, "kept message", eventAt(pg.Events, 8), "@ben tail", "as_of 8")

	// A rollback rebuilds reaction rows from the events it keeps, but not
	// for a target the purge deleted: the kept event 7 names purged seq 3.
	t.Run("rollback_after_purge", func(t *testing.T) {
		_, err := e.st.Rollback(ctx(t), c, 7)
		ok(t, err, "rollback")
		if n := e.db.Int(t, "SELECT count(*) FROM reactions WHERE conv_id = ? AND target < ?", c, 7); n != 0 {
			t.Errorf("%d reactions rows of purged targets after the rollback", n)
		}
	})
}

// testDerivedRollback: a rollback to before an edit and reactions: the
// message reads its old text and versions, a reaction removed after the
// restore point is on again (its row back at the event that set it, so
// React on answers Dup with that seq) and one set after it is gone, the
// mentions after it are gone, and the rolled-back keys land again as new.
// A recall undone by a rollback gives the edits back too.
func testDerivedRollback(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	const c = "c-abc"
	e.group(t, ana, c, "ben", "cy")          // 1..3
	e.send(t, ana, c, "k4", "v1")            // 4
	e.react(t, ben, c, 4, "👍", true, "rb1")  // 5
	e.send(t, ana, c, "k6", "@ben hi")       // 6: the restore point
	e.edit(t, ana, c, 4, "e7", "v2")         // 7
	e.react(t, ben, c, 4, "👍", false, "rb2") // 8
	e.react(t, cy, c, 4, "🎉", true, "rc1")   // 9
	e.send(t, ana, c, "k10", "@ben again")   // 10
	e.reply(t, ben, c, "k11", "re", 4)       // 11
	wantDerived(t, "before the rollback", e.fetch(t, ana, c, 4), "v2", "as_of 11 edit 7 🎉1 replies 1 last 11")

	rr, err := e.st.Rollback(ctx(t), c, 6)
	ok(t, err, "rollback")
	if want := (parley.RollbackResult{Conv: c, Removed: 5, Head: 6, Epoch: 2}); rr != want {
		t.Errorf("rollback: %+v, want %+v", rr, want)
	}
	wantDerived(t, "after the rollback", e.fetch(t, ana, c, 4), "v1", "as_of 6 👍1")
	vs, _ := e.versions(t, ana, c, 4)
	wantVersions(t, "versions after the rollback", vs, "4 v1")
	if n := e.db.Int(t, "SELECT count(*) FROM reactions WHERE conv_id = ?", c); n != 1 {
		t.Errorf("%d reactions rows, want ben's 👍 only", n)
	}
	if s := e.db.Int(t, "SELECT seq FROM reactions WHERE conv_id = ? AND user_id = ? AND emoji = ? AND react_on", c, "ben", "👍"); s != 5 {
		t.Errorf("ben's 👍 row: seq %d (or off), want on at 5", s)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM mentions WHERE conv_id = ?", c); n != 1 || e.mentionRows(t, c, 6) != 1 {
		t.Errorf("%d mentions rows, want the one of seq 6", n)
	}
	if s := e.summary(t, ben, c); s.MentionsUnread != 1 {
		t.Errorf("mentions_unread %d, want 1", s.MentionsUnread)
	}
	before := e.full(t, c)
	r, err := e.st.React(ctx(t), ben, parley.ReactRequest{Conv: c, Target: 4, Emoji: "👍", On: true, CMID: "rb3"})
	if wantCode(t, err, "") && (!r.Dup || r.Seq != 5) {
		t.Errorf("reaction on again after the rollback: %+v, want Dup of 5", r)
	}
	e.fullUnchanged(t, c, before)
	if r := e.react(t, ben, c, 4, "👍", false, "rb2"); r.Seq != 7 {
		t.Errorf("rolled-back removal again: %+v, want new at 7", r)
	}
	if r := e.edit(t, ana, c, 4, "e7", "v2"); r.Seq != 8 {
		t.Errorf("rolled-back edit again: %+v, want new at 8", r)
	}
	wantDerived(t, "after the resends", e.fetch(t, cy, c, 4), "v2", "as_of 8 edit 8")

	// The undo of a recall covers its edits.
	const c2 = "c-r"
	e.group(t, ana, c2, "ben")        // 1, 2
	e.send(t, ana, c2, "k3", "v1")    // 3
	e.edit(t, ana, c2, 3, "e4", "v2") // 4: the restore point
	e.recall(t, ana, c2, 3, "r5")     // 5
	_, err = e.st.Rollback(ctx(t), c2, 4)
	ok(t, err, "rollback of the recall")
	wantDerived(t, "recall undone", e.fetch(t, ben, c2, 3), "v2", "as_of 4 edit 4")
	wantEvents(t, "edit after the undo", []parley.Event{e.fetch(t, ben, c2, 4)}, `4 edit ana/d1 -> 3 "v2"`)
	if vs, recalled := e.versions(t, ben, c2, 3); recalled || len(vs) != 2 {
		t.Errorf("versions after the undo: %+v recalled %v, want 2", vs, recalled)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM events WHERE conv_id = ? AND recall_seq IS NOT NULL", c2); n != 0 {
		t.Errorf("%d events still marked recalled", n)
	}
}

// testFeedDerivedFields: the gateways' Feed and FeedEvents carry the raw
// new fields (reply_to, mentions, an edit's target and body, a reaction's
// emoji and state) and no derived state: a message reads as sent.
func testFeedDerivedFields(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")               // 1, 2
	e.send(t, ana, c, "k3", "@ben root")    // 3
	e.reply(t, ben, c, "k4", "re", 3)       // 4
	e.edit(t, ana, c, 3, "e5", "edited")    // 5
	e.react(t, ben, c, 3, "👍", true, "x6")  // 6
	e.react(t, ben, c, 3, "👍", false, "x7") // 7
	want := []string{
		`3 message ana/d1 "@ben root"`,
		`4 message ben/d1 "re" re 3`,
		`5 edit ana/d1 -> 3 "edited"`,
		"6 reaction ben/d1 -> 3 👍 on",
		"7 reaction ben/d1 -> 3 👍 off",
	}
	for name, f := range map[string]parley.Feed{"feed": e.feed(t, c, 2, 50), "feed_events": e.feedEvents(t, c, 2, 50)} {
		wantEvents(t, name, f.Events, want...)
		for _, ev := range f.Events {
			if ev.Derived != nil {
				t.Errorf("%s: %s decorated: %s", name, describe(ev), describeDerived(ev.Derived))
			}
		}
		if ev := eventAt(f.Events, 3); !slices.Equal(ev.Mentions, []string{"ben"}) {
			t.Errorf("%s: mentions %q, want [ben]", name, ev.Mentions)
		}
	}
}

// testBatchRepliesMentions: the group commit path (SendBatch) checks a
// reply's target and resolves mentions as Send does, item by item: a bad
// target fails its item only, a reply to a reply stores the root, and a
// replay answers Dup. (Seqs are not compared across items: a store may
// commit replies and mentions on a path of their own.)
func testBatchRepliesMentions(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")           // 1, 2
	e.send(t, ana, c, "k3", "root")     // 3
	e.send(t, ana, c, "k4", "recalled") // 4
	e.recall(t, ana, c, 4, "r5")        // 5
	e.reply(t, ben, c, "k6", "re", 3)   // 6
	items := []struct {
		p        parley.Principal
		req      parley.SendRequest
		code     parley.Code
		replyTo  int64
		mentions []string
	}{
		{ana, parley.SendRequest{Conv: c, CMID: "b1", Body: "plain"}, "", 0, nil},
		{ben, parley.SendRequest{Conv: c, CMID: "b2", Body: "re 2", ReplyTo: 3}, "", 3, nil},
		{ana, parley.SendRequest{Conv: c, CMID: "b3", Body: "re missing", ReplyTo: 99}, parley.CodeNotFound, 0, nil},
		{ana, parley.SendRequest{Conv: c, CMID: "b4", Body: "re recalled", ReplyTo: 4}, parley.CodeAlreadyRecalled, 0, nil},
		{ana, parley.SendRequest{Conv: c, CMID: "b5", Body: "@ben hi"}, "", 0, []string{"ben"}},
		{ana, parley.SendRequest{Conv: c, CMID: "b6", Body: "@ben re", ReplyTo: 6}, "", 3, []string{"ben"}},
		{ana, parley.SendRequest{Conv: c, CMID: "b7", Body: "@all", AllMax: 2}, "", 0, []string{"ben"}},
		{ben, parley.SendRequest{Conv: c, CMID: "k6", Body: "re", ReplyTo: 3}, "", 3, nil},
		{ben, parley.SendRequest{Conv: c, CMID: "k6", Body: "re", ReplyTo: 6}, parley.CodeIdempotencyMismatch, 0, nil},
	}
	in := make([]parley.BatchSend, len(items))
	for i, it := range items {
		in[i] = parley.BatchSend{P: it.p, Req: it.req}
	}
	res := e.batcher(t).SendBatch(ctx(t), in)
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	seen := map[int64]bool{}
	for i, it := range items {
		r := res[i]
		if !wantCode(t, r.Err, it.code) || it.code != "" {
			continue
		}
		if it.req.CMID == "k6" {
			if !r.Sent.Dup || r.Sent.Seq != 6 {
				t.Errorf("item %d: %+v, want Dup of 6", i, r.Sent)
			}
			continue
		}
		if r.Sent.Dup || r.Sent.Seq < 7 || seen[r.Sent.Seq] {
			t.Errorf("item %d: %+v, want a new seq of its own", i, r.Sent)
			continue
		}
		seen[r.Sent.Seq] = true
		ev := e.fetch(t, ana, c, r.Sent.Seq)
		if ev.Body != it.req.Body || ev.ReplyTo != it.replyTo || !slices.Equal(ev.Mentions, it.mentions) {
			t.Errorf("item %d: %s mentions %q; want body %q, reply_to %d, mentions %q", i, describe(ev), ev.Mentions, it.req.Body, it.replyTo, it.mentions)
		}
	}
	if h := e.conv(t, c).Head; h != 11 {
		t.Errorf("head %d, want 11 (five new messages)", h)
	}
	if ev := e.fetch(t, ben, c, 3); ev.Derived == nil || ev.Derived.Replies != 3 {
		t.Errorf("root: %s, want 3 replies", describeDerived(ev.Derived))
	}
	if s := e.summary(t, ben, c); s.MentionsUnread != 3 {
		t.Errorf("ben's mentions_unread %d, want 3", s.MentionsUnread)
	}
}

// testDerivedPeriodGap (rule 2): a member who left and came back reads
// derived state only from the events inside their periods: an edit, a
// reaction set or removed and a reply made while they were out are not
// folded into what they read (a reaction removed in the gap still counts
// for them, as their client would have folded it), though they are back.
func testDerivedPeriodGap(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	const c = "c-abc"
	e.group(t, ana, c, "ben", "cy")       // 1..3
	e.send(t, ana, c, "k4", "v1")         // 4
	e.react(t, cy, c, 4, "👍", true, "y5") // 5
	e.reply(t, cy, c, "k6", "r1", 4)      // 6
	if ch, err := e.st.RemoveMember(ctx(t), ana, c, "ben"); err != nil || ch.Seq != 7 {
		t.Fatalf("remove ben: %+v %v", ch, err)
	}
	e.edit(t, ana, c, 4, "e8", "v2")        // 8
	e.react(t, cy, c, 4, "🎉", true, "y9")   // 9
	e.reply(t, cy, c, "k10", "r2", 4)       // 10
	e.react(t, cy, c, 4, "👍", false, "y11") // 11
	if ch, err := e.st.AddMember(ctx(t), ana, c, "ben"); err != nil || ch.Seq != 12 {
		t.Fatalf("add ben back: %+v %v", ch, err)
	}
	e.react(t, ana, c, 4, "👍", true, "x13") // 13
	e.reply(t, cy, c, "k14", "r3", 4)       // 14

	const benView = "as_of 14 👍2 replies 2 last 14"
	wantDerived(t, "ben's fetch", e.fetch(t, ben, c, 4), "v1", benView)
	pg := e.sync(t, ben, c, 0, 50)
	wantPage(t, "ben's sync", pg, append(span(1, 7), 12, 13, 14), 14, false, 14)
	wantDerived(t, "ben's sync", eventAt(pg.Events, 4), "v1", benView)
	vs, _ := e.versions(t, ben, c, 4)
	wantVersions(t, "ben's versions", vs, "4 v1")
	th, err := e.st.Sync(ctx(t), ben, parley.SyncRequest{Conv: c, Limit: 50, Thread: 4})
	if wantCode(t, err, "") {
		wantPage(t, "ben's thread", th, []int64{4, 6, 14}, 14, false, 14)
	}
	th, err = e.st.Sync(ctx(t), ben, parley.SyncRequest{Conv: c, After: 4, Limit: 1, Thread: 4})
	if wantCode(t, err, "") {
		wantPage(t, "ben's thread page", th, []int64{6}, 6, true, 14)
	}
	wantDerived(t, "ana's fetch", e.fetch(t, ana, c, 4), "v2", "as_of 14 edit 8 🎉1 👍1+me replies 3 last 14")
}
