package client_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/wire"
)

// recording is a Handler that checks delivery (recorder) and keeps a
// Timeline of what it was handed.
type recording struct {
	*recorder
	tl *client.Timeline
}

func (h recording) Events(conv string, epoch int64, evs []wire.Event) {
	h.recorder.Events(conv, epoch, evs)
	h.tl.Events(conv, epoch, evs)
}

func (h recording) Reset(conv string, code parley.Code) {
	h.recorder.Reset(conv, code)
	h.tl.Reset(conv, code)
}

// startWithTimeline starts a client whose handler also keeps a Timeline
// for user me.
func startWithTimeline(t *testing.T, o client.Options, me string) (*running, *client.Timeline) {
	t.Helper()
	tl := client.NewTimeline(me)
	rec := newRecorder()
	o.Handler = recording{recorder: rec, tl: tl}
	r := start(t, o)
	r.rec = rec
	return r, tl
}

// state describes a timeline message without its as_of, which depends on
// how it was read.
func state(m client.Message) string {
	var rs []string
	for _, r := range m.Reactions {
		rs = append(rs, fmt.Sprintf("%s×%d me=%v", r.Emoji, r.Count, r.Me))
	}
	return fmt.Sprintf("%d %q recalled=%v reply_to=%d edit=%d reactions=[%s] replies=%d last=%d",
		m.Seq, m.Body, m.Recalled, m.ReplyTo, m.EditSeq, strings.Join(rs, " "), m.Replies, m.LastReplySeq)
}

func states(ms []client.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = state(m)
	}
	return out
}

// kinds counts the events of conv by kind, read by c through sync.
func kinds(t *testing.T, c *running, conv string) map[string]int {
	t.Helper()
	n := map[string]int{}
	var after int64
	for {
		p, err := c.Sync(ctxT(t), conv, after, 200)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Events {
			n[e.Kind]++
		}
		after = p.NextAfter
		if !p.HasMore {
			return n
		}
	}
}

// outcomes collects n outcomes of r by cmid.
func outcomes(t *testing.T, r *running, n int) map[string]client.Item {
	t.Helper()
	got := map[string]client.Item{}
	for range n {
		select {
		case o := <-r.outcomes:
			got[o.CMID] = o
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d outcomes", len(got), n)
		}
	}
	return got
}

// An edit, a reaction and a reply written while offline are sent after the
// connection comes up and land once each: the reaction's first attempt
// committed but its reply was lost, so it ends as a dup of that event. A
// member folds the pushed events into the message; a client that syncs
// later reads the same state from the server's derived fields; another
// restart sends nothing.
func TestGatewayOfflineEditReactReplyOnce(t *testing.T) {
	s := newStore(t)
	g := newGateway(t, s)
	dir := t.TempDir()
	ctx := ctxT(t)
	file := filepath.Join(dir, "ana.db")
	anaToken := token(t, s, "ana", "d1", "i1")
	ben, benTL := startWithTimeline(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ben", "d1", "i1"), Outbox: filepath.Join(dir, "ben.db")}, "ben")
	ben.waitConnected(t)
	if _, err := ben.Send(ctx, "g1", "hello @ana"); err != nil { // 3
		t.Fatal(err)
	}
	ana := start(t, client.Options{URLs: []string{g.url}, Token: anaToken, Outbox: file})
	msg, err := ana.Send(ctx, "g1", "my message") // 4
	if err != nil {
		t.Fatal(err)
	}
	if err := ana.stop(); err != nil {
		t.Fatal(err)
	}

	c, err := client.Open(ctx, client.Options{Outbox: file})
	if err != nil {
		t.Fatal(err)
	}
	edit, err1 := c.EnqueueEdit(ctx, "g1", msg.Seq, "my message, edited")
	react, err2 := c.EnqueueReact(ctx, "g1", 3, "👍", true)
	reply, err3 := c.EnqueueReply(ctx, "g1", 3, "a reply")
	if err := c.Close(); err1 != nil || err2 != nil || err3 != nil || err != nil {
		t.Fatal(err1, err2, err3, err)
	}
	other := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ana", "d2", "i1"), Outbox: filepath.Join(dir, "ana-d2.db")})
	first, err := other.Do(ctx, wire.Request{T: wire.TReact, Conv: "g1", CMID: react.CMID, Target: &react.Target, Emoji: "👍", On: &react.On})
	if err != nil || *first.Dup {
		t.Fatalf("first attempt of the reaction = %+v, %v", first, err)
	}

	ana = start(t, client.Options{URLs: []string{g.url}, Token: anaToken, Outbox: file})
	got := outcomes(t, ana, 3)
	if o := got[edit.CMID]; !o.Done || o.Dup || o.Code != "" || o.Seq == 0 || o.Kind != client.KindEdit {
		t.Errorf("outcome of the edit = %+v", o)
	}
	if o := got[react.CMID]; !o.Done || !o.Dup || o.Seq != *first.Seq || o.Kind != client.KindReact {
		t.Errorf("outcome of the reaction = %+v, want dup at seq %d", o, *first.Seq)
	}
	if o := got[reply.CMID]; !o.Done || o.Dup || o.Code != "" || o.ReplyTo != 3 {
		t.Errorf("outcome of the reply = %+v", o)
	}
	ana.waitConnected(t)
	if err := ana.stop(); err != nil {
		t.Fatal(err)
	}
	again := start(t, client.Options{URLs: []string{g.url}, Token: anaToken, Outbox: file})
	again.waitConnected(t)
	select {
	case o := <-again.outcomes:
		t.Errorf("an ended item ended again: %+v", o)
	case <-time.After(100 * time.Millisecond):
	}

	if n := kinds(t, ben, "g1"); n["edit"] != 1 || n["reaction"] != 1 || n["message"] != 3 {
		t.Errorf("the store holds %v, want one edit, one reaction and three messages", n)
	}
	want := []string{
		fmt.Sprintf(`3 "hello @ana" recalled=false reply_to=0 edit=0 reactions=[👍×1 me=false] replies=1 last=%d`, got[reply.CMID].Seq),
		fmt.Sprintf(`4 "my message, edited" recalled=false reply_to=0 edit=%d reactions=[] replies=0 last=0`, got[edit.CMID].Seq),
		fmt.Sprintf(`%d "a reply" recalled=false reply_to=3 edit=0 reactions=[] replies=0 last=0`, got[reply.CMID].Seq),
	}
	eventually(t, "ben's timeline folds the pushes", func() bool { return strings.Join(states(benTL.Messages("g1")), "\n") == strings.Join(want, "\n") })
	late, lateTL := startWithTimeline(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ben", "d3", "i3"), Outbox: filepath.Join(dir, "ben-d3.db")}, "ben")
	late.waitConnected(t)
	if got := states(lateTL.Messages("g1")); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("read by a later sync:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// React answers the state: setting it again is a dup of the event that set
// it, removing it writes an event, and removing what is not set is a dup
// with seq 0. Edits of another's message and of a recalled one end the item
// with the terminal code.
func TestGatewayReactAndEditOutcomes(t *testing.T) {
	s := newStore(t)
	g := newGateway(t, s)
	dir := t.TempDir()
	ctx := ctxT(t)
	ana, anaTL := startWithTimeline(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ana", "d1", "i1"), Outbox: filepath.Join(dir, "ana.db")}, "ana")
	ben := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ben", "d1", "i1"), Outbox: filepath.Join(dir, "ben.db")})
	ana.waitConnected(t)
	m, err := ben.Send(ctx, "g1", "ben's") // 3
	if err != nil {
		t.Fatal(err)
	}
	on, err := ana.React(ctx, "g1", m.Seq, "🎉", true)
	if err != nil || on.Dup || on.Seq != 4 {
		t.Fatalf("React on = %+v, %v", on, err)
	}
	tests := []struct {
		name     string
		do       func() (client.Item, error)
		seq      int64
		dup      bool
		code     parley.Code
		timeline string
	}{
		{"set again", func() (client.Item, error) { return ana.React(ctx, "g1", m.Seq, "🎉", true) }, 4, true, "",
			`3 "ben's" recalled=false reply_to=0 edit=0 reactions=[🎉×1 me=true] replies=0 last=0`},
		{"remove", func() (client.Item, error) { return ana.React(ctx, "g1", m.Seq, "🎉", false) }, 5, false, "",
			`3 "ben's" recalled=false reply_to=0 edit=0 reactions=[] replies=0 last=0`},
		{"remove again", func() (client.Item, error) { return ana.React(ctx, "g1", m.Seq, "👀", false) }, 0, true, "", ""},
		{"edit another's", func() (client.Item, error) { return ana.Edit(ctx, "g1", m.Seq, "mine now") }, 0, false, parley.CodeNotSender, ""},
		{"edit", func() (client.Item, error) { return ben.Edit(ctx, "g1", m.Seq, "ben's, edited") }, 6, false, "",
			`3 "ben's, edited" recalled=false reply_to=0 edit=6 reactions=[] replies=0 last=0`},
		{"reply", func() (client.Item, error) { return ana.Reply(ctx, "g1", m.Seq, "to ben") }, 7, false, "",
			`3 "ben's, edited" recalled=false reply_to=0 edit=6 reactions=[] replies=1 last=7`},
		{"recall", func() (client.Item, error) { return ben.Recall(ctx, "g1", m.Seq) }, 8, false, "",
			`3 "" recalled=true reply_to=0 edit=0 reactions=[] replies=1 last=7`},
		{"edit recalled", func() (client.Item, error) { return ben.Edit(ctx, "g1", m.Seq, "again") }, 0, false, parley.CodeAlreadyRecalled, ""},
		{"react recalled", func() (client.Item, error) { return ana.React(ctx, "g1", m.Seq, "🎉", true) }, 0, false, parley.CodeAlreadyRecalled, ""},
	}
	for _, tt := range tests {
		it, err := tt.do()
		if parley.ErrorCode(err) != tt.code || it.Code != tt.code || !it.Done {
			t.Fatalf("%s: %+v, %v; want code %q", tt.name, it, err, tt.code)
		}
		if tt.code == "" && (it.Seq != tt.seq || it.Dup != tt.dup) {
			t.Errorf("%s: seq %d dup %v, want %d %v", tt.name, it.Seq, it.Dup, tt.seq, tt.dup)
		}
		if tt.timeline != "" {
			eventually(t, tt.name+" in ana's timeline", func() bool {
				m, ok := anaTL.Message("g1", m.Seq)
				return ok && state(m) == tt.timeline
			})
		}
	}
}
