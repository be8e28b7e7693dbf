package export

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

// line is one exported event as encoding/json writes it (fields in key
// order): the reference appendLine must match byte for byte. The optional
// fields are omitted when empty, so a plain message's line is the line of
// the version before them.
type line struct {
	At           string       `json:"at"`
	Attachments  []attachment `json:"attachments,omitempty"`
	Body         string       `json:"body"`
	Conv         string       `json:"conv"`
	Device       string       `json:"device"`
	EditSeq      int64        `json:"edit_seq,omitempty"`
	EditedAt     string       `json:"edited_at,omitempty"`
	Kind         string       `json:"kind"`
	LastReplySeq int64        `json:"last_reply_seq,omitempty"`
	Mentions     []string     `json:"mentions,omitempty"`
	MID          string       `json:"mid"`
	Reactions    []reaction   `json:"reactions,omitempty"`
	Recalled     bool         `json:"recalled"`
	Replies      int64        `json:"replies,omitempty"`
	ReplyTo      int64        `json:"reply_to,omitempty"`
	Sender       string       `json:"sender"`
	Seq          int64        `json:"seq"`
}

// attachment is one entry of a line's attachments, fields in key order.
type attachment struct {
	Height int    `json:"height,omitempty"`
	ID     string `json:"id"`
	MIME   string `json:"mime"`
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	Width  int    `json:"width,omitempty"`
}

// reaction is one entry of a line's reactions, fields in key order.
type reaction struct {
	Count int64  `json:"count"`
	Emoji string `json:"emoji"`
	Me    bool   `json:"me"`
}

// jsonLine is the encoding the export used before appendLine: a
// json.Encoder without HTML escaping.
func jsonLine(t testing.TB, ev parley.Event) []byte {
	t.Helper()
	l := line{
		At: ev.At.UTC().Format(timeFormat), Body: ev.Body, Conv: ev.Conv, Device: ev.Device, Kind: string(ev.Kind),
		Mentions: ev.Mentions, MID: ev.MID, Recalled: ev.Recalled, ReplyTo: ev.ReplyTo, Sender: ev.Sender, Seq: ev.Seq,
	}
	if !ev.Recalled {
		for _, a := range ev.Attachments {
			l.Attachments = append(l.Attachments, attachment{
				Height: a.Height, ID: a.ID, MIME: a.MIME, Name: a.Name, SHA256: a.SHA256, Size: a.Size, Width: a.Width,
			})
		}
	}
	if d := ev.Derived; d != nil {
		l.EditSeq, l.LastReplySeq, l.Replies = d.EditSeq, d.LastReplySeq, d.Replies
		if d.EditSeq != 0 {
			l.EditedAt = d.EditedAt.UTC().Format(timeFormat)
		}
		for _, r := range d.Reactions {
			l.Reactions = append(l.Reactions, reaction{Count: r.Count, Emoji: r.Emoji, Me: r.Me})
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestAppendLineMatchesJSON: appendLine writes what encoding/json wrote for
// every kind of character a body can hold (a shard recorded by an earlier
// version must recompute to the same sha256): every ASCII byte, invalid
// UTF-8, U+2028/U+2029, HTML characters (not escaped), astral runes, and
// random strings of those.
func TestAppendLineMatchesJSON(t *testing.T) {
	t.Parallel()
	var ascii strings.Builder
	for c := range 0x80 {
		ascii.WriteByte(byte(c))
	}
	bodies := []string{
		"", "plain", ascii.String(), "<&> \"quoted\" é\n", "\u2028\u2029", "a\u2028b\u2029c", "\xff", "a\xffb\xc3",
		"\xe2\x80", "😀 𝄞", "\x00\x1f\x7f", `\u0000 \\ \"`, "\xed\xa0\x80", strings.Repeat("é\t", 300),
	}
	r := rand.New(rand.NewPCG(1, 2))
	pool := []string{"a", "é", "\u2028", "\u2029", "\xff", "\xc3", "\x00", "\n", "\"", "\\", "<", "&", "😀", "\x7f", "\x1b", "\u00a0", "\ufeff"}
	for range 2000 {
		var b strings.Builder
		for range r.IntN(20) {
			b.WriteString(pool[r.IntN(len(pool))])
		}
		bodies = append(bodies, b.String())
	}
	at := time.Date(2026, 12, 3, 6, 40, 0, 123_000_000, time.FixedZone("x", 3600))
	for i, body := range bodies {
		ev := parley.Event{
			Conv: "c-" + body[:min(len(body), 3)], Seq: int64(i) * 7919, MID: "m-" + body, Kind: parley.EventMessage,
			Sender: "ana", Device: "d\u2028" + body, Body: body, Recalled: i%2 == 0, At: at.Add(time.Duration(i) * time.Millisecond),
		}
		if i%3 == 1 {
			decorate(&ev, body, int64(i))
		}
		if got, want := appendLine(nil, ev), jsonLine(t, ev); !bytes.Equal(got, want) {
			t.Errorf("body %q (valid UTF-8 %v):\n got %s\nwant %s", body, utf8.ValidString(body), got, want)
		}
	}
}

// decorate gives ev every optional field, built from s and n (0 leaves
// the numeric ones out).
func decorate(ev *parley.Event, s string, n int64) {
	ev.ReplyTo = n
	ev.Mentions = []string{"bo", s}
	ev.Attachments = []parley.Attachment{
		{ID: "f" + strconv.FormatInt(n, 36), Name: s, Size: n, MIME: "image/png", SHA256: strings.Repeat("ab", 32), Width: int(n % 7), Height: int(n % 5)},
		{ID: "g", Name: "notes " + s + ".txt", Size: 3, MIME: "text/plain; charset=utf-8", SHA256: strings.Repeat("0f", 32)},
	}
	ev.Derived = &parley.Derived{
		AsOf: n + 9, EditSeq: n, EditedAt: ev.At.Add(time.Duration(n) * time.Second),
		Replies: n % 5, LastReplySeq: n + 2,
		Reactions: []parley.Reaction{{Emoji: s, Count: n, Me: n%2 == 0}, {Emoji: "👍", Count: 1}},
	}
}

// TestAppendLineOptional: a plain message has none of the optional keys
// (its bytes are those of the version before them), and each optional key
// appears alone when only its field is set.
func TestAppendLineOptional(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 6, 40, 0, 123_000_000, time.UTC)
	base := parley.Event{Conv: "c", Seq: 4, MID: "m", Kind: parley.EventMessage, Sender: "ana", Device: "d", Body: "hi", At: at}
	plain := `{"at":"2026-12-03T06:40:00.123Z","body":"hi","conv":"c","device":"d","kind":"message","mid":"m","recalled":false,"sender":"ana","seq":4}` + "\n"
	tests := []struct {
		name string
		set  func(*parley.Event)
		want string // a key that must appear
	}{
		{"plain", func(*parley.Event) {}, ""},
		{"decorated without state", func(ev *parley.Event) { ev.Derived = &parley.Derived{AsOf: 9} }, ""},
		{"edited", func(ev *parley.Event) { ev.Derived = &parley.Derived{EditSeq: 5, EditedAt: at} }, `"edit_seq":5,"edited_at":"2026-12-03T06:40:00.123Z"`},
		{"reply", func(ev *parley.Event) { ev.ReplyTo = 2 }, `"reply_to":2`},
		{"root", func(ev *parley.Event) { ev.Derived = &parley.Derived{Replies: 2, LastReplySeq: 7} }, `"last_reply_seq":7`},
		{"mentions", func(ev *parley.Event) { ev.Mentions = []string{"bo", "cy"} }, `"mentions":["bo","cy"]`},
		{"attachments", func(ev *parley.Event) {
			ev.Attachments = []parley.Attachment{
				{ID: "f1", Name: "cat.png", Size: 9, MIME: "image/png", SHA256: "aa", Width: 3, Height: 2},
				{ID: "f0", Name: "a.txt", Size: 1, MIME: "text/plain", SHA256: "bb"},
			}
		}, `"at":"2026-12-03T06:40:00.123Z","attachments":[{"height":2,"id":"f1","mime":"image/png","name":"cat.png","sha256":"aa","size":9,"width":3},{"id":"f0","mime":"text/plain","name":"a.txt","sha256":"bb","size":1}],"body":"hi"`},
		{"attachments of a recalled message", func(ev *parley.Event) {
			ev.Body, ev.Recalled = "", true
			ev.Attachments = []parley.Attachment{{ID: "f1", Name: "cat.png", Size: 9, MIME: "image/png", SHA256: "aa"}}
		}, `"at":"2026-12-03T06:40:00.123Z","body":""`},
		{"reactions", func(ev *parley.Event) {
			ev.Derived = &parley.Derived{Reactions: []parley.Reaction{{Emoji: "👍", Count: 2, Me: true}}}
		}, `"reactions":[{"count":2,"emoji":"👍","me":true}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := base
			tt.set(&ev)
			got := string(appendLine(nil, ev))
			if want := string(jsonLine(t, ev)); got != want {
				t.Errorf("got %s\nwant %s", got, want)
			}
			if tt.want == "" && got != plain {
				t.Errorf("got %s\nwant the plain line %s", got, plain)
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("got %s, want it to hold %s", got, tt.want)
			}
		})
	}
}

// FuzzAppendLine: appendLine and encoding/json agree on any body.
func FuzzAppendLine(f *testing.F) {
	for _, s := range []string{"", "a\u2028\xff\"\\\n\x01<>&"} {
		f.Add(s, int64(3), true)
	}
	f.Fuzz(func(t *testing.T, body string, seq int64, recalled bool) {
		ev := parley.Event{Conv: "c", Seq: seq, MID: body, Kind: parley.EventMessage, Sender: body, Device: "d", Body: body,
			Recalled: recalled, At: time.UnixMilli(seq)}
		if recalled {
			// The optional fields too: an emoji and a mention are outside input.
			decorate(&ev, body, seq%1000)
		}
		if got, want := appendLine(nil, ev), jsonLine(t, ev); !bytes.Equal(got, want) {
			t.Errorf("got %s\nwant %s", got, want)
		}
	})
}
