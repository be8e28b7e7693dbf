package export

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

// line is one exported event as encoding/json writes it (fields in key
// order): the reference appendLine must match byte for byte.
type line struct {
	At       string `json:"at"`
	Body     string `json:"body"`
	Conv     string `json:"conv"`
	Device   string `json:"device"`
	Kind     string `json:"kind"`
	MID      string `json:"mid"`
	Recalled bool   `json:"recalled"`
	Sender   string `json:"sender"`
	Seq      int64  `json:"seq"`
}

// jsonLine is the encoding the export used before appendLine: a
// json.Encoder without HTML escaping.
func jsonLine(t testing.TB, ev parley.Event) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(line{
		At: ev.At.UTC().Format(timeFormat), Body: ev.Body, Conv: ev.Conv, Device: ev.Device, Kind: string(ev.Kind),
		MID: ev.MID, Recalled: ev.Recalled, Sender: ev.Sender, Seq: ev.Seq,
	}); err != nil {
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
		if got, want := appendLine(nil, ev), jsonLine(t, ev); !bytes.Equal(got, want) {
			t.Errorf("body %q (valid UTF-8 %v):\n got %s\nwant %s", body, utf8.ValidString(body), got, want)
		}
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
		if got, want := appendLine(nil, ev), jsonLine(t, ev); !bytes.Equal(got, want) {
			t.Errorf("got %s\nwant %s", got, want)
		}
	})
}
