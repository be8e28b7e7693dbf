package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

// derivedLine describes a message as an export holds it, with its derived
// state (AsOf left out: it is the head).
func derivedLine(ev parley.Event) string {
	var d parley.Derived
	if ev.Derived != nil {
		d = *ev.Derived
	}
	var rs []string
	for _, r := range d.Reactions {
		rs = append(rs, fmt.Sprintf("%s×%d me=%v", r.Emoji, r.Count, r.Me))
	}
	return fmt.Sprintf("%d %q recalled=%v reply_to=%d mentions=[%s] edit=%d reactions=[%s] replies=%d last=%d",
		ev.Seq, ev.Body, ev.Recalled, ev.ReplyTo, strings.Join(ev.Mentions, " "), d.EditSeq, strings.Join(rs, " "), d.Replies, d.LastReplySeq)
}

func derivedLines(evs []parley.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = derivedLine(ev)
	}
	return out
}

// testExportDerived: exported messages carry edits, reactions, replies and
// mentions as the exporting user could see them at the snapshot: a former
// member's export stops at their last visible seq, nothing written after
// the snapshot shows, and a re-read (in other page sizes too) is identical.
func testExportDerived(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben")
	ana, ben := us[0], us[1]
	e.group(t, ana, "c-x", "ben")                          // 1, 2
	e.send(t, ana, "c-x", "m3", "hello @ben")              // 3
	e.exReply(t, ben, "c-x", "m4", "hi", 3)                // 4
	e.exEdit(t, ana, "c-x", "e5", 3, "hello, edited")      // 5
	e.exReact(t, ben, "c-x", "r6", 3, "👍", true)           // 6
	e.exReact(t, ana, "c-x", "r7", 3, "👍", true)           // 7
	e.send(t, ana, "c-x", "m8", "recall me")               // 8
	e.exReact(t, ben, "c-x", "r9", 8, "❤", true)           // 9
	e.recall(t, ana, "c-x", 8, "x10")                      // 10
	_, err := e.st.RemoveMember(ctx(t), ana, "c-x", "ben") // 11
	ok(t, err, "remove ben")
	e.exEdit(t, ana, "c-x", "e12", 3, "after ben left") // 12
	e.exReact(t, ana, "c-x", "r13", 3, "🎉", true)       // 13
	e.exReply(t, ana, "c-x", "m14", "second reply", 4)  // 14 (joins the thread of 3)

	jAna := e.newExport(t, ana, "k-ana", "conv:c-x")
	jBen := e.newExport(t, ben, "k-ben", "conv:c-x")
	want := map[string][]string{
		jAna.ID: {
			`3 "after ben left" recalled=false reply_to=0 mentions=[ben] edit=12 reactions=[👍×2 me=true 🎉×1 me=true] replies=2 last=14`,
			`4 "hi" recalled=false reply_to=3 mentions=[] edit=0 reactions=[] replies=0 last=0`,
			`8 "" recalled=true reply_to=0 mentions=[] edit=0 reactions=[] replies=0 last=0`,
			`14 "second reply" recalled=false reply_to=3 mentions=[] edit=0 reactions=[] replies=0 last=0`,
		},
		jBen.ID: {
			`3 "hello, edited" recalled=false reply_to=0 mentions=[ben] edit=5 reactions=[👍×2 me=true] replies=1 last=4`,
			`4 "hi" recalled=false reply_to=3 mentions=[] edit=0 reactions=[] replies=0 last=0`,
			`8 "" recalled=true reply_to=0 mentions=[] edit=0 reactions=[] replies=0 last=0`,
		},
	}
	check := func(t *testing.T, when string) {
		t.Helper()
		for _, j := range []parley.ExportJob{jAna, jBen} {
			for _, limit := range []int{parley.MaxPage, 1, 3} {
				got := derivedLines(exportEvents(t, e.st, j.ID, "c-x", limit))
				wantDump(t, fmt.Sprintf("export of %s %s, pages of %d", j.User, when, limit), got, want[j.ID])
			}
		}
	}
	check(t, "at once")

	e.exEdit(t, ana, "c-x", "e15", 3, "later")     // 15
	e.exReact(t, ana, "c-x", "r16", 3, "👍", false) // 16
	e.exReact(t, ana, "c-x", "r17", 4, "🎉", true)  // 17
	e.recall(t, ana, "c-x", 14, "x18")             // 18
	e.exReply(t, ana, "c-x", "m19", "third", 3)    // 19
	check(t, "after later writes")
}

// exReply sends a message in reply to seq.
func (e *env) exReply(t *testing.T, p parley.Principal, conv, cmid, body string, to int64) parley.Sent {
	t.Helper()
	s, err := e.st.Send(ctx(t), p, parley.SendRequest{Conv: conv, CMID: cmid, Body: body, ReplyTo: to, AllMax: 50})
	ok(t, err, fmt.Sprintf("reply %s/%s by %s", conv, cmid, p.User))
	return s
}

// exEdit edits a message; the edit must be new.
func (e *env) exEdit(t *testing.T, p parley.Principal, conv, cmid string, target int64, body string) parley.Edited {
	t.Helper()
	r, err := e.st.Edit(ctx(t), p, parley.EditRequest{Conv: conv, Target: target, CMID: cmid, Body: body, AllMax: 50})
	ok(t, err, fmt.Sprintf("edit %s/%d by %s", conv, target, p.User))
	if r.Dup {
		t.Fatalf("edit %s/%s by %s: Dup true for a new request", conv, cmid, p.User)
	}
	return r
}

// exReact sets or removes a reaction; it must change the state.
func (e *env) exReact(t *testing.T, p parley.Principal, conv, cmid string, target int64, emoji string, on bool) parley.Reacted {
	t.Helper()
	r, err := e.st.React(ctx(t), p, parley.ReactRequest{Conv: conv, Target: target, Emoji: emoji, On: on, CMID: cmid})
	ok(t, err, fmt.Sprintf("react %s/%d %s %v by %s", conv, target, emoji, on, p.User))
	if r.Dup {
		t.Fatalf("react %s/%s by %s: Dup true for a new state", conv, cmid, p.User)
	}
	return r
}
