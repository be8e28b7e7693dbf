package wire

import (
	"encoding/json"
	"testing"

	"github.com/parleychat/parley"
)

// FuzzMarshalSent: the sent reply is byte for byte what MarshalFrame
// writes, for any ids and any rid a frame can carry.
func FuzzMarshalSent(f *testing.F) {
	f.Add("g1", "m1", int64(3), int64(1), false, `"r1"`)
	f.Add("g", "", int64(-1), int64(0), true, `17`)
	f.Add("é<&>", "a\"b\\", int64(1<<62), int64(2), false, `"\u0072 x"`)
	f.Add("\u2028\x01", "m", int64(0), int64(0), true, ``)
	f.Add("g", "m", int64(5), int64(5), false, `-1.5e3`)
	f.Fuzz(func(t *testing.T, conv, mid string, seq, epoch int64, dup bool, rid string) {
		r, err := DecodeRequest([]byte(`{"t":"sub","rid":` + rid + `}`))
		if err != nil || rid == "" {
			r.RID = nil // only a rid a frame can carry
		}
		s := parley.Sent{Conv: conv, MID: mid, Seq: seq, Epoch: epoch, Dup: dup}
		want := Sent(s)
		want.RID = r.RID
		if got, want := string(MarshalSent(s, r.RID)), string(MarshalFrame(want)); got != want {
			t.Fatalf("MarshalSent\n%s\nMarshalFrame\n%s", got, want)
		}
	})
}

// BenchmarkMarshalSent: the sent reply, by MarshalSent (fast) and by
// MarshalFrame (json).
func BenchmarkMarshalSent(b *testing.B) {
	s := parley.Sent{Conv: "rt-07", Seq: 1234, MID: "01JD7ZQ3W8Y6X5V4T3S2R1Q0PN", Epoch: 1}
	rid := json.RawMessage(`"42"`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			MarshalSent(s, rid)
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f := Sent(s)
			f.RID = rid
			MarshalFrame(f)
		}
	})
}
