package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// BusListenPID exposes the listening connection's backend pid (0 while
// disconnected) to the black-box tests.
func BusListenPID(b *Bus) uint32 { return b.listenPID.Load() }

// BusPublishPID is the same for the publishing connection.
func BusPublishPID(b *Bus) uint32 { return b.publishPID.Load() }

var codecNotices = []parley.Notice{
	{Conv: "c", Seq: 0},
	{Conv: "c", Seq: 1},
	{Conv: "A.b:c-d_e", Seq: 1<<63 - 1},
	{Conv: strings.Repeat("x", 64), Seq: 42, User: "alice"},
	{Conv: "c", Seq: 7, User: "b0b.x-y_z", Device: "phone"},
	{Conv: "c", Seq: 8, User: "u" + strings.Repeat("9", 31), Device: "with space\tand\ttabs\nand newline\r"},
	{Conv: "c", Seq: 9, User: "eve", Device: "100% %41 literally"},
	{Conv: "c", Seq: 10, User: "eve", Device: "日本のデバイス🙂"},
	{Conv: "c", Seq: 11, User: "eve", Device: "\x01\x7f-"},
	{Conv: "c", Seq: 12, User: "eve", Device: strings.Repeat("é", 64)},
	parley.AccountNotice("eve"),
	parley.AccountNotice("u" + strings.Repeat("9", 31)),
}

func TestNoticeCodecRoundTrip(t *testing.T) {
	for _, lost := range []bool{false, true} {
		for _, max := range []int{maxPayload, 200, 1} { // 1: one notice a payload
			var want []parley.Notice
			for range 300 {
				want = append(want, codecNotices...)
			}
			payloads, bad := encodeNotices(lost, want, max)
			if bad != 0 {
				t.Fatalf("max %d: %d notices rejected", max, bad)
			}
			var got []parley.Notice
			for i, p := range payloads {
				if len(p) >= 8000 {
					t.Errorf("max %d: payload %d has %d bytes, PostgreSQL refuses 8000 or more", max, i, len(p))
				}
				if max > 1 && len(p) > max {
					t.Errorf("max %d: payload %d has %d bytes", max, i, len(p))
				}
				ns, l, err := decodeNotices(p)
				if err != nil {
					t.Fatalf("max %d: payload %d: %v\n%q", max, i, err, p)
				}
				if l != (lost && i == 0) {
					t.Errorf("max %d: payload %d: lost = %v", max, i, l)
				}
				got = append(got, ns...)
			}
			if len(got) != len(want) {
				t.Fatalf("max %d: %d notices back, want %d", max, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("max %d: notice %d is %+v, want %+v", max, i, got[i], want[i])
				}
			}
			if max == maxPayload && len(payloads) > len(want)*40/maxPayload+2 {
				t.Errorf("%d payloads for %d notices: not packed", len(payloads), len(want))
			}
		}
	}
}

func TestNoticeCodecLostOnly(t *testing.T) {
	payloads, _ := encodeNotices(true, nil, maxPayload)
	if len(payloads) != 1 {
		t.Fatalf("%d payloads for a loss alone, want 1", len(payloads))
	}
	ns, lost, err := decodeNotices(payloads[0])
	if err != nil || !lost || len(ns) != 0 {
		t.Errorf("decode %q = %v, %v, %v; want no notices, lost", payloads[0], ns, lost, err)
	}
	if payloads, _ := encodeNotices(false, nil, maxPayload); len(payloads) != 0 {
		t.Errorf("nothing to send gave payloads %q", payloads)
	}
}

func TestNoticeCodecRejects(t *testing.T) {
	bad := []parley.Notice{
		{Conv: "", Seq: 1},
		{Conv: "has space", Seq: 1},
		{Conv: "c", Seq: -1},
		{Conv: "c", Seq: 1, Device: "no user"},
		{Conv: "c", Seq: 1, User: "Alice"},
		{Conv: "c", Seq: 1, User: "a", Device: "nul\x00"},
		{Conv: "c", Seq: 1, User: "a", Device: "\xff"},
		{Conv: "c", Seq: 1, User: "a", Device: strings.Repeat("d", 65)},
		{User: "Eve"},
		{User: "eve", Seq: 1},
		{User: "eve", Device: "d"},
	}
	payloads, n := encodeNotices(false, append(bad, parley.Notice{Conv: "ok", Seq: 1}), maxPayload)
	if n != len(bad) || len(payloads) != 1 || payloads[0] != "p1\nok 1" {
		t.Errorf("encode = %q, %d rejected; want %q, %d", payloads, n, "p1\nok 1", len(bad))
	}
	for _, p := range []string{
		"", "hello", "p2\nc 1", "p1\n", "p1\nc", "p1\nc 1 ", "p1\nc +1", "p1\nc -1", "p1\nc 1x",
		"p1\nc 99999999999999999999", "p1\nc 1 Alice", "p1\nc 1 a d e", "p1\nc 1 a %", "p1\nc 1 a %4",
		"p1\nc 1 a %G0", "p1\nc 1 a %00", "p1\nc 1 a \x01", "p1\nc 1 a %FF", "p1\nbad/conv 1",
		"p1\nc 1\n\nc 2", "p1\r\nc 1", "p1\n@", "p1\n@Eve", "p1\n@eve 1", "p1\n@ eve",
	} {
		if ns, _, err := decodeNotices(p); err == nil {
			t.Errorf("decode %q = %v, want an error", p, ns)
		}
	}
}

func FuzzDecodeNotices(f *testing.F) {
	payloads, _ := encodeNotices(true, codecNotices, maxPayload)
	for _, p := range payloads {
		f.Add(p)
	}
	for _, p := range []string{"", "p1", "p1\n!", "p1\nc 1 a %25", "p1\nc 1 a b c", "p1\n!\n!\nc 0"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		ns, lost, err := decodeNotices(p)
		if err != nil {
			if ns != nil || lost {
				t.Fatalf("error %v with notices %v, lost %v", err, ns, lost)
			}
			return
		}
		// What decodes is valid, and survives a round trip.
		again, bad := encodeNotices(lost, ns, maxPayload)
		if bad != 0 {
			t.Fatalf("%d decoded notices do not encode: %v", bad, ns)
		}
		var got []parley.Notice
		gotLost := false
		for _, q := range again {
			n, l, err := decodeNotices(q)
			if err != nil {
				t.Fatalf("re-encoded payload %q: %v", q, err)
			}
			got, gotLost = append(got, n...), gotLost || l
		}
		if gotLost != lost || len(got) != len(ns) {
			t.Fatalf("round trip: %v, %v; want %v, %v", got, gotLost, ns, lost)
		}
		for i := range ns {
			if got[i] != ns[i] {
				t.Fatalf("round trip notice %d: %+v, want %+v", i, got[i], ns[i])
			}
		}
	})
}

func TestBackoff(t *testing.T) {
	if d := backoff(0); d != 0 {
		t.Errorf("backoff(0) = %v, want 0", d)
	}
	for n, ceiling := range map[int]time.Duration{1: 50 * time.Millisecond, 2: 100 * time.Millisecond, 6: 1600 * time.Millisecond, 7: 2 * time.Second, 100: 2 * time.Second} {
		for range 100 {
			if d := backoff(n); d < ceiling/2 || d > ceiling {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", n, d, ceiling/2, ceiling)
			}
		}
	}
}
