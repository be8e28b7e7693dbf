package export

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/parleychat/parley"
)

// expectedDerived is the JSONL of the messages p reads through Sync now,
// with their derived state, encoded by encoding/json's map encoding (keys
// sorted, independent of appendLine): what an export created now holds.
func expectedDerived(t *testing.T, st parley.Store, p parley.Principal, conv string) []byte {
	t.Helper()
	var buf bytes.Buffer
	pg, err := st.Sync(ctxT(t), p, parley.SyncRequest{Conv: conv, Limit: parley.MaxPage})
	if err != nil || pg.HasMore {
		t.Fatalf("sync: %v (has_more %v)", err, pg.HasMore)
	}
	for _, ev := range pg.Events {
		if ev.Kind != parley.EventMessage {
			continue
		}
		m := map[string]any{
			"at": ev.At.UTC().Format(timeFormat), "body": ev.Body, "conv": ev.Conv, "device": ev.Device,
			"kind": string(ev.Kind), "mid": ev.MID, "recalled": ev.Recalled, "sender": ev.Sender, "seq": ev.Seq,
		}
		if ev.ReplyTo != 0 {
			m["reply_to"] = ev.ReplyTo
		}
		if len(ev.Mentions) > 0 && !ev.Recalled {
			m["mentions"] = ev.Mentions
		}
		if d := ev.Derived; d != nil {
			if d.EditSeq != 0 {
				m["edit_seq"], m["edited_at"] = d.EditSeq, d.EditedAt.UTC().Format(timeFormat)
			}
			if d.Replies != 0 {
				m["replies"], m["last_reply_seq"] = d.Replies, d.LastReplySeq
			}
			var rs []map[string]any
			for _, r := range d.Reactions {
				rs = append(rs, map[string]any{"count": r.Count, "emoji": r.Emoji, "me": r.Me})
			}
			if len(rs) > 0 {
				m["reactions"] = rs
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(jsonHTML(b))
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// TestDerivedEndToEnd: an export's lines carry edits, reactions, replies
// and mentions as the user read them when the job was created (the same
// state Sync served then), and writes after the creation change nothing.
func TestDerivedEndToEnd(t *testing.T) {
	t.Parallel()
	backends(t, true, func(t *testing.T, open opener) {
		st := open(t)
		ctx := ctxT(t)
		ana, ben := principal("ana"), principal("ben")
		for _, u := range []string{"ana", "ben"} {
			if _, err := st.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: "c", Kind: parley.KindGroup, Title: "c", Members: []string{"ben"}}); err != nil {
			t.Fatal(err)
		}
		must := func(_ any, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(st.Send(ctx, ben, parley.SendRequest{Conv: "c", CMID: "m3", Body: "hi @ana <&>", AllMax: 50}))              // 3
		must(st.Send(ctx, ana, parley.SendRequest{Conv: "c", CMID: "m4", Body: "hello", ReplyTo: 3, AllMax: 50}))        // 4
		must(st.Edit(ctx, ben, parley.EditRequest{Conv: "c", Target: 3, CMID: "e5", Body: "hi again @ana", AllMax: 50})) // 5
		must(st.React(ctx, ana, parley.ReactRequest{Conv: "c", Target: 3, Emoji: "👍", On: true, CMID: "r6"}))            // 6
		must(st.React(ctx, ben, parley.ReactRequest{Conv: "c", Target: 3, Emoji: "🎉", On: true, CMID: "r7"}))            // 7
		must(st.Send(ctx, ben, parley.SendRequest{Conv: "c", CMID: "m8", Body: "plain"}))                                // 8

		want := expectedDerived(t, st, ana, "c")
		for _, key := range []string{`"edit_seq":5`, `"reactions":[{"count":1,"emoji":"👍","me":true},{"count":1,"emoji":"🎉","me":false}]`, `"replies":1`, `"reply_to":3`, `"mentions":["ana"]`} {
			if !bytes.Contains(want, []byte(key)) {
				t.Fatalf("the expected lines lack %s:\n%s", key, want)
			}
		}
		job, err := st.CreateExport(ctx, ana, parley.ExportRequest{Key: "k", Scope: "conv:c"})
		if err != nil {
			t.Fatal(err)
		}
		must(st.Edit(ctx, ben, parley.EditRequest{Conv: "c", Target: 3, CMID: "e9", Body: "later"}))
		must(st.React(ctx, ana, parley.ReactRequest{Conv: "c", Target: 3, Emoji: "👍", On: false, CMID: "r10"}))
		must(st.Send(ctx, ben, parley.SendRequest{Conv: "c", CMID: "m11", Body: "later reply", ReplyTo: 4}))
		must(st.Recall(ctx, ana, parley.RecallRequest{Conv: "c", Target: 4, CMID: "x12"}))

		dir := t.TempDir()
		run(t, newWorker(t, st, dir, nil), job.ID, isDone)
		if got := gunzip(t, ArtifactPath(dir, job.ID)); !bytes.Equal(got, want) {
			t.Errorf("export:\n%s\nwant (as read at creation):\n%s", got, want)
		}
	})
}
