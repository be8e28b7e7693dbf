package nats

import (
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/bustest"
)

// Every notice of the suite survives encoding, however small the messages
// (a notice larger than the bound gets a message of its own).
func TestCodecRoundTrip(t *testing.T) {
	ns := bustest.Notices("codec", 500)
	for _, max := range []int{1, 100, 1 << 10, 64 << 10} {
		var enc encoder
		msgs := enc.messages(ns, max)
		var got []parley.Notice
		for _, m := range msgs {
			if len(m) > max && max > 1<<12 {
				t.Errorf("max %d: a message of %d bytes", max, len(m))
			}
			d, err := decode(m)
			if err != nil {
				t.Fatalf("max %d: decode: %v", max, err)
			}
			got = append(got, d...)
		}
		if len(got) != len(ns) {
			t.Fatalf("max %d: %d notices back, want %d", max, len(got), len(ns))
		}
		for i := range ns {
			want := ns[i]
			if one := appendNotice(nil, want); len(one)+2 > max && want.Event != nil {
				want.Event, want.Epoch = nil, 0 // over the bound: ids only
			}
			if !got[i].Same(want) {
				t.Fatalf("max %d: notice %d is %+v, want %+v", max, i, got[i], want)
			}
		}
	}
}

// A notice whose event would take it over the message bound goes as ids
// only, not lost.
func TestCodecIdsOverBound(t *testing.T) {
	ev := parley.Event{Conv: "c", Seq: 1, MID: "m", Kind: parley.EventMessage, Sender: "a", Body: strings.Repeat("x", 2000)}
	n := parley.Notice{Conv: "c", Seq: 1, Event: &ev, Epoch: 1}
	var enc encoder
	for _, c := range []struct {
		max     int
		carried bool
	}{{1 << 16, true}, {2100, true}, {1000, false}} {
		msgs := enc.messages([]parley.Notice{n}, c.max)
		if len(msgs) != 1 {
			t.Fatalf("max %d: %d messages", c.max, len(msgs))
		}
		got, err := decode(msgs[0])
		if err != nil || len(got) != 1 {
			t.Fatalf("max %d: decode = %v, %v", c.max, got, err)
		}
		if (got[0].Event != nil) != c.carried || got[0].Conv != "c" || got[0].Seq != 1 {
			t.Errorf("max %d: got %+v, carried %v", c.max, got[0], c.carried)
		}
	}
}

// A message that is not ours, or not entirely valid, is rejected whole.
func TestCodecRejects(t *testing.T) {
	var enc encoder
	good := enc.messages([]parley.Notice{{Conv: "c", Seq: 1}, {Conv: "c", Seq: 2}}, 1<<16)[0]
	bad := func(n parley.Notice) []byte { return append([]byte{magic, version}, appendNotice(nil, n)...) }
	for _, c := range []struct {
		name string
		msg  []byte
	}{
		{"empty", nil},
		{"foreign", []byte(`{"conv":"c"}`)},
		{"newer version", append([]byte{magic, signalVersion + 1}, good[2:]...)},
		{"notices in a signal message", append([]byte{magic, signalVersion}, good[2:]...)},
		{"empty signal message", []byte{magic, signalVersion}},
		{"signal of unknown kind", append([]byte{magic, signalVersion}, signalBytes(parley.Notice{Kind: 9, Conv: "c", User: "u"})...)},
		{"typing with a state", append([]byte{magic, signalVersion}, signalBytes(parley.Notice{Kind: parley.NoticeTyping, Conv: "c", User: "u", State: "away"})...)},
		{"presence without a state", append([]byte{magic, signalVersion}, signalBytes(parley.Notice{Kind: parley.NoticePresence, Conv: "c", User: "u"})...)},
		{"signal with a bad user", append([]byte{magic, signalVersion}, signalBytes(parley.Notice{Kind: parley.NoticeTyping, Conv: "c", User: "U U"})...)},
		{"truncated", good[:len(good)-1]},
		{"unknown flags", append([]byte{magic, version, 4}, good[3:]...)},
		{"bad conv", bad(parley.Notice{Conv: "a b", Seq: 1})},
		{"negative seq", bad(parley.Notice{Conv: "c", Seq: -1})},
		{"device without user", bad(parley.Notice{Conv: "c", Seq: 1, Device: "d"})},
		{"event without an epoch", bad(parley.Notice{Conv: "c", Seq: 1, Event: &parley.Event{Conv: "c", Seq: 1}})},
		{"event on a read notice", bad(parley.Notice{Conv: "c", Seq: 1, User: "u", Device: "d", Epoch: 1, Event: &parley.Event{Conv: "c", Seq: 1}})},
		{"huge string length", []byte{magic, version, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if ns, err := decode(c.msg); err == nil {
				t.Errorf("decode accepted it: %+v", ns)
			}
		})
	}
}

// signalBytes is one signal as encoder.signals writes it, unchecked.
func signalBytes(n parley.Notice) []byte {
	var enc encoder
	return enc.signals([]parley.Notice{n}, 1<<16)[0][2:]
}

// Signal notices survive encoding in messages of their own, however small.
func TestCodecSignals(t *testing.T) {
	ns := bustest.SignalNotices("codec", 300)
	var signals []parley.Notice
	for _, n := range ns {
		if n.Signal() {
			signals = append(signals, n)
		}
	}
	for _, max := range []int{1, 100, 64 << 10} {
		var enc encoder
		var got []parley.Notice
		for _, m := range enc.signals(signals, max) {
			d, err := decode(m)
			if err != nil {
				t.Fatalf("max %d: decode: %v", max, err)
			}
			got = append(got, d...)
		}
		if len(got) != len(signals) {
			t.Fatalf("max %d: %d signals back, want %d", max, len(got), len(signals))
		}
		for i := range signals {
			if !got[i].Same(signals[i]) {
				t.Fatalf("max %d: signal %d is %+v, want %+v", max, i, got[i], signals[i])
			}
		}
	}
}

// FuzzDecode: no message panics the decoder, and what it accepts is what
// a publisher could have sent, and encodes back to the same notices.
func FuzzDecode(f *testing.F) {
	var enc encoder
	for _, m := range enc.messages(bustest.Notices("fuzz", 12), 1<<16) {
		f.Add(m)
	}
	var signals []parley.Notice
	for _, n := range bustest.SignalNotices("fuzz", 12) {
		if n.Signal() {
			signals = append(signals, n)
		}
	}
	for _, m := range enc.signals(signals, 1<<16) {
		f.Add(m)
	}
	f.Add([]byte{magic, signalVersion})
	f.Fuzz(func(t *testing.T, msg []byte) {
		ns, err := decode(msg)
		if err != nil {
			return
		}
		for _, n := range ns {
			if !encodable(n) {
				t.Fatalf("decoded a notice no publisher sends: %+v", n)
			}
			var again []byte
			if n.Signal() {
				again = enc.signals([]parley.Notice{n}, 1<<16)[0]
			} else {
				again = enc.messages([]parley.Notice{n}, 1<<16)[0]
			}
			back, err := decode(again)
			if err != nil || len(back) != 1 || !back[0].Same(n) {
				t.Fatalf("round trip of %+v: %+v, %v", n, back, err)
			}
		}
	})
}
