package client_test

import (
	"strings"
	"testing"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/wire"
)

func msg(seq int64, body string, asOf int64) wire.Event {
	ev := wire.Event{Conv: "c", Seq: seq, Kind: "message", Sender: "ben", Body: body}
	if asOf != 0 {
		ev.AsOf = &asOf
	}
	return ev
}

func edit(seq, target int64, body string) wire.Event {
	return wire.Event{Conv: "c", Seq: seq, Kind: "edit", Sender: "ben", Target: target, Body: body, At: "t"}
}

func react(seq, target int64, user, emoji string, on bool) wire.Event {
	return wire.Event{Conv: "c", Seq: seq, Kind: "reaction", Sender: user, Target: target, Emoji: emoji, On: &on}
}

func reply(seq, root int64) wire.Event {
	ev := msg(seq, "re", 0)
	ev.ReplyTo = root
	return ev
}

func recallOf(seq, target int64) wire.Event {
	return wire.Event{Conv: "c", Seq: seq, Kind: "recall", Sender: "ben", Target: target}
}

// TestTimelineFold: the client rule. Events at or below a message's as_of
// are already in its state; later ones fold once, however often they are
// applied.
func TestTimelineFold(t *testing.T) {
	read := msg(3, "v2", 9) // read at head 9: edit 5 shown, ana's and cy's 👍 counted, one reply
	read.EditSeq, read.EditedAt = 5, "t5"
	read.Reactions = []wire.Reaction{{Emoji: "👍", Count: 2, Me: true}}
	read.Replies, read.LastReplySeq = 1, 8
	tests := []struct {
		name string
		evs  []wire.Event
		want string
	}{
		{"pushed message", []wire.Event{msg(3, "v1", 0)},
			`3 "v1" recalled=false reply_to=0 edit=0 reactions=[] replies=0 last=0`},
		{"pushed then edits, the older one late", []wire.Event{msg(3, "v1", 0), edit(6, 3, "v3"), edit(5, 3, "v2")},
			`3 "v3" recalled=false reply_to=0 edit=6 reactions=[] replies=0 last=0`},
		{"events at or below as_of are in", []wire.Event{read, edit(5, 3, "v2"), react(7, 3, "cy", "👍", true), reply(8, 3)},
			`3 "v2" recalled=false reply_to=0 edit=5 reactions=[👍×2 me=true] replies=1 last=8`},
		{"later events fold", []wire.Event{read, edit(10, 3, "v3"), react(11, 3, "ana", "👍", false), react(12, 3, "dan", "🎉", true), reply(13, 3)},
			`3 "v3" recalled=false reply_to=0 edit=10 reactions=[👍×1 me=false 🎉×1 me=false] replies=2 last=13`},
		{"applied twice", []wire.Event{read, react(11, 3, "cy", "👍", false), reply(13, 3), react(11, 3, "cy", "👍", false), reply(13, 3)},
			`3 "v2" recalled=false reply_to=0 edit=5 reactions=[👍×1 me=true] replies=2 last=13`},
		{"off and on again", []wire.Event{read, react(10, 3, "cy", "👍", false), react(11, 3, "cy", "👍", true)},
			`3 "v2" recalled=false reply_to=0 edit=5 reactions=[👍×2 me=true] replies=1 last=8`},
		{"the last one off", []wire.Event{msg(3, "v1", 0), react(4, 3, "ana", "👍", true), react(5, 3, "ana", "👍", false)},
			`3 "v1" recalled=false reply_to=0 edit=0 reactions=[] replies=0 last=0`},
		{"an older read does not replace", []wire.Event{read, edit(10, 3, "v3"), msg(3, "v1", 4)},
			`3 "v3" recalled=false reply_to=0 edit=10 reactions=[👍×2 me=true] replies=1 last=8`},
		{"recall blanks text, edits and reactions", []wire.Event{read, recallOf(10, 3), edit(11, 3, "late")},
			`3 "" recalled=true reply_to=0 edit=0 reactions=[] replies=1 last=8`},
		{"recall of a later reply takes it out of the count", []wire.Event{read, reply(10, 3), recallOf(11, 10)},
			`3 "v2" recalled=false reply_to=0 edit=5 reactions=[👍×2 me=true] replies=1 last=10`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := client.NewTimeline("ana")
			tl.Apply("c", tt.evs...)
			m, ok := tl.Message("c", 3)
			if !ok {
				t.Fatal("message 3 missing")
			}
			if got := state(m); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	tl := client.NewTimeline("ana")
	tl.Events("c", 1, []wire.Event{read})
	tl.Reset("c", "EPOCH_CHANGED")
	if ms := tl.Messages("c"); len(ms) != 0 {
		t.Errorf("after Reset: %d messages", len(ms))
	}
}

// FuzzTimeline: any run of events in ascending seq (as the Client hands
// them over), each about an earlier message, folds to counts of at least
// one, and applying the run again changes nothing.
func FuzzTimeline(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 4, 0, 5})
	f.Add([]byte{0, 2, 2, 2, 3, 3, 1, 4, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var evs []wire.Event
		var msgs []int64
		users := []string{"ana", "ben", "cy"}
		for i, op := range ops {
			seq := int64(i + 1)
			if len(msgs) == 0 || op%6 == 0 {
				evs = append(evs, msg(seq, "m", 0))
				msgs = append(msgs, seq)
				continue
			}
			target := msgs[int(op/6)%len(msgs)]
			switch op % 6 {
			case 1:
				evs = append(evs, edit(seq, target, "e"))
			case 2, 3:
				evs = append(evs, react(seq, target, users[int(op/6)%3], []string{"👍", "🎉"}[int(op/18)%2], op%6 == 2))
			case 4:
				evs = append(evs, reply(seq, target))
				msgs = append(msgs, seq)
			case 5:
				evs = append(evs, recallOf(seq, target))
			}
		}
		tl := client.NewTimeline("ana")
		tl.Apply("c", evs...)
		once := states(tl.Messages("c"))
		for _, m := range tl.Messages("c") {
			for _, r := range m.Reactions {
				if r.Count < 1 {
					t.Fatalf("message %d: %+v", m.Seq, m.Reactions)
				}
			}
		}
		tl.Apply("c", evs...)
		if twice := states(tl.Messages("c")); strings.Join(twice, "\n") != strings.Join(once, "\n") {
			t.Fatalf("applied again:\n%s\nonce:\n%s", strings.Join(twice, "\n"), strings.Join(once, "\n"))
		}
	})
}
