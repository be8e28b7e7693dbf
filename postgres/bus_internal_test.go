package postgres

import (
	"encoding/base64"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/bustest"
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
	carried(parley.Notice{Conv: "c", Seq: 13}, parley.Event{MID: "m1", Kind: parley.EventMessage, Sender: "eve", Device: "a phone", Body: "hello world"}),
	carried(parley.Notice{Conv: "c", Seq: 14}, parley.Event{MID: "m 2%", Kind: parley.EventMessage, Sender: "eve", Device: "\x01\x7f-", Body: "100% sure\nline two\r\n\t  spaces  ", Recalled: true}),
	carried(parley.Notice{Conv: "c", Seq: 15}, parley.Event{MID: "m3", Kind: parley.EventMessage, Sender: "eve", Device: "d", Body: strings.Repeat("\n%", 40)}), // base64 is shorter
	carried(parley.Notice{Conv: "c", Seq: 16, User: "bob"}, parley.Event{MID: "m4", Kind: parley.EventMemberJoined, Sender: "eve", User: "bob"}),
	carried(parley.Notice{Conv: "c", Seq: 17}, parley.Event{MID: "m5", Kind: parley.EventRecall, Sender: "eve", Device: "d", Target: 13}),
	carried(parley.Notice{Conv: "c", Seq: 18}, parley.Event{MID: "m6", Kind: parley.EventMemberLeft, User: "eve"}), // a system event: no sender
	carried(parley.Notice{Conv: "c", Seq: 19}, parley.Event{MID: "m7", Kind: parley.EventMessage, Sender: "eve", Device: "d", Body: "привет 🙂 日本"}),
}

// carried returns n carrying ev (its Conv and Seq filled in), epoch 3.
func carried(n parley.Notice, ev parley.Event) parley.Notice {
	ev.Conv, ev.Seq = n.Conv, n.Seq
	if ev.At.IsZero() {
		ev.At = time.Date(2026, 12, 3, 18, 0, 0, int(n.Seq)*int(time.Millisecond), time.UTC)
	}
	n.Event, n.Epoch = &ev, 3
	return n
}

// sameNotices fails t unless got and want say the same, in order.
func sameNotices(t *testing.T, what string, got, want []parley.Notice) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d notices, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !got[i].Same(want[i]) {
			t.Fatalf("%s: notice %d is %s, want %s", what, i, show(got[i]), show(want[i]))
		}
	}
}

func show(n parley.Notice) string {
	if n.Event == nil {
		return fmt.Sprintf("%+v", n)
	}
	return fmt.Sprintf("%+v with event %+v", n, *n.Event)
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
			sameNotices(t, fmt.Sprintf("max %d", max), got, want)
			if max == maxPayload && len(payloads) > len(want)*60/maxPayload+2 {
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
		"", "hello", "p1\n", "p1\nc", "p1\nc 1 ", "p1\nc +1", "p1\nc -1", "p1\nc 1x",
		"p1\nc 99999999999999999999", "p1\nc 1 Alice", "p1\nc 1 a d e", "p1\nc 1 a %", "p1\nc 1 a %4",
		"p1\nc 1 a %G0", "p1\nc 1 a %00", "p1\nc 1 a \x01", "p1\nc 1 a %FF", "p1\nbad/conv 1",
		"p1\nc 1\n\nc 2", "p1\r\nc 1", "p1\n@", "p1\n@Eve", "p1\n@eve 1", "p1\n@ eve", "p3\nc 1",
		// Carried events: only in p2, every field in its bounds.
		"p1\n+c 1  1 0 m message a d 0  0 hi",
		"p2\n+c 1  1 0 m message a d 0  0",        // 12 fields
		"p2\n+c 1  0 0 m message a d 0  0 hi",     // epoch 0
		"p2\n+c 1  1 -5 m message a d 0  0 hi",    // time before 1970
		"p2\n+c 1  1 0 m message A d 0  0 hi",     // bad sender
		"p2\n+c 1  1 0 m message a d 0 B 0 hi",    // bad member
		"p2\n+c 1 B 1 0 m message a d 0  0 hi",    // bad user
		"p2\n+c 1  1 0 m message a d 0  4 hi",     // unknown flag
		"p2\n+c 1  1 0 m message a d 0  01 hi",    // two-digit flags
		"p2\n+c 1  1 0 m message a d 0  2 !!",     // not base64
		"p2\n+c 1  1 0 m message a d 0  0 50%",    // a bare '%'
		"p2\n+c 1  1 0 m message a d 0  0 %zz",    // bad escape
		"p2\n+c 1  1 0 m message a d 0  0 %00",    // NUL in the body
		"p2\n+c 1  1 0 m message a d 0  0 %FF",    // not UTF-8
		"p2\n+c 1  1 0 m message a d%20 -1  0 hi", // negative target
		"p2\n+c 1  1 0 m%2 message a d 0  0 hi",   // truncated escape
		"p2\n+c 1  1 0 m message a a\tb 0  0 hi",  // an unescaped tab
		"p2\n+c 1  1 0 " + strings.Repeat("m", 65) + " message a d 0  0 hi",
		"p2\n+c 1  1 0 m message a d 0  0 " + strings.Repeat("x", parley.MaxNoticeBody+1),
		"p2\n+c 1  1 0 m message a d 0  2 " + base64.RawStdEncoding.EncodeToString([]byte(strings.Repeat("x", parley.MaxNoticeBody+1))),
		"p2\n+@eve 0  1 0 m message a d 0  0 hi",
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
	for _, p := range []string{"", "p1", "p1\n!", "p1\nc 1 a %25", "p1\nc 1 a b c", "p1\n!\n!\nc 0",
		"p2\n+c 1  1 0 m message a d 0  0 hi there", "p2\n+c 1  1 0 m message a d 0  2 aGk", "p2\n+c 1 b 1 0 m member_joined a  0 b 1 ",
		"s1", "s1\nt c u 5", "s1\np c u away 0\nt c u 253402300799999", "s1\np c u gone 1", "s1\nt c u away 1"} {
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
		if gotLost != lost {
			t.Fatalf("round trip: lost %v, want %v", gotLost, lost)
		}
		sameNotices(t, "round trip", got, ns)
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

// The largest event a notice may carry, every field at its bound and its
// body the worst to escape, fits in a payload: the PostgreSQL bus carries
// every event a publisher attaches (parley.Notice.WithEvent).
func TestNoticeCodecLargestCarried(t *testing.T) {
	// 11 carried fields, and 6 (ReplyTo, Mentions, Attachments, Emoji,
	// On, Derived) whose events travel as ids (carriable).
	if n := reflect.TypeFor[parley.Event]().NumField(); n != 17 {
		t.Fatalf("parley.Event has %d fields, the payload format knows 17: carry the new ones", n)
	}
	worstDevice := strings.Repeat("🙂", parley.MaxDeviceIDChars) // 4 bytes each, not escaped
	long := strings.Repeat("u", 32)
	ev := parley.Event{
		MID: strings.Repeat("🙂", maxShortText), Kind: parley.EventKind(strings.Repeat("🙂", maxShortText)),
		Sender: long, Device: worstDevice, Target: 1<<63 - 1, User: long, Recalled: true,
		At: time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC),
	}
	for _, body := range []string{
		strings.Repeat("\n", parley.MaxNoticeBody), strings.Repeat("%", parley.MaxNoticeBody),
		strings.Repeat("x", parley.MaxNoticeBody), strings.Repeat("é", parley.MaxNoticeBody/2),
		strings.Repeat("x\n", parley.MaxNoticeBody/2),
	} {
		ev.Body = body
		n := carried(parley.Notice{Conv: strings.Repeat("c", 64), Seq: 1<<63 - 1, User: long}, ev)
		n.Epoch = 1<<63 - 1
		payloads, bad := encodeNotices(true, []parley.Notice{n, n}, maxPayload)
		if bad != 0 || len(payloads) != 2 {
			t.Fatalf("body %.8q…: %d payloads, %d rejected; want 2, 0", body, len(payloads), bad)
		}
		for _, p := range payloads {
			if len(p) > maxPayload {
				t.Errorf("body %.8q…: a payload of %d bytes", body, len(p))
			}
			if !strings.HasPrefix(p, carriedHeader+"\n") {
				t.Errorf("body %.8q…: the event was not carried: %.40q", body, p)
			}
		}
		got, _, err := decodeNotices(payloads[1])
		if err != nil {
			t.Fatal(err)
		}
		sameNotices(t, "largest", got, []parley.Notice{n})
	}
}

// An event the format cannot hold exactly goes as ids only (the notice is
// not lost), and a payload of ids alone keeps the p1 header.
func TestNoticeCodecIdsOnly(t *testing.T) {
	base := parley.Event{MID: "m", Kind: parley.EventMessage, Sender: "eve", Device: "d", Body: "hi"}
	for _, c := range []struct {
		name string
		n    parley.Notice
	}{
		{"body over the bound", carried(parley.Notice{Conv: "c", Seq: 1}, func(e parley.Event) parley.Event {
			e.Body = strings.Repeat("x", parley.MaxNoticeBody+1)
			return e
		}(base))},
		{"sub-millisecond time", carried(parley.Notice{Conv: "c", Seq: 1}, func(e parley.Event) parley.Event {
			e.At = time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC)
			return e
		}(base))},
		{"no epoch", func() parley.Notice {
			n := carried(parley.Notice{Conv: "c", Seq: 1}, base)
			n.Epoch = 0
			return n
		}()},
		{"another seq's event", func() parley.Notice {
			n := carried(parley.Notice{Conv: "c", Seq: 1}, base)
			n.Seq = 2
			return n
		}()},
		{"a body not UTF-8", carried(parley.Notice{Conv: "c", Seq: 1}, func(e parley.Event) parley.Event {
			e.Body = "\xff"
			return e
		}(base))},
		{"a reply", carried(parley.Notice{Conv: "c", Seq: 1}, func(e parley.Event) parley.Event {
			e.ReplyTo = 1
			return e
		}(base))},
		{"mentions", carried(parley.Notice{Conv: "c", Seq: 1}, func(e parley.Event) parley.Event {
			e.Mentions = []string{"ana"}
			return e
		}(base))},
		{"attachments", carried(parley.Notice{Conv: "c", Seq: 1}, func(e parley.Event) parley.Event {
			e.Attachments = []parley.Attachment{{ID: "f1", Name: "a.txt", Size: 1, MIME: "text/plain", SHA256: strings.Repeat("0", 64)}}
			return e
		}(base))},
		{"a reaction", carried(parley.Notice{Conv: "c", Seq: 1}, func(e parley.Event) parley.Event {
			e.Kind, e.Body, e.Target, e.Emoji, e.On = parley.EventReaction, "", 1, "👍", true
			return e
		}(base))},
		{"derived state", carried(parley.Notice{Conv: "c", Seq: 1}, func(e parley.Event) parley.Event {
			e.Derived = &parley.Derived{AsOf: 1}
			return e
		}(base))},
	} {
		t.Run(c.name, func(t *testing.T) {
			payloads, bad := encodeNotices(false, []parley.Notice{c.n}, maxPayload)
			want := fmt.Sprintf("p1\nc %d", c.n.Seq)
			if bad != 0 || len(payloads) != 1 || payloads[0] != want {
				t.Errorf("encode = %q, %d rejected; want %q", payloads, bad, want)
			}
		})
	}
}

// BenchmarkNoticeCodec is what one notice costs the PostgreSQL bus's codec
// (the publisher's encoding plus one receiver's decoding), as ids only and
// carrying a 100-byte message, in batches of 64 as a busy gateway sends
// them.
//
//	go test -run '^$' -bench BenchmarkNoticeCodec -benchmem ./postgres/
func BenchmarkNoticeCodec(b *testing.B) {
	body := strings.Repeat("hello wörld ", 8)[:100]
	for _, c := range []struct {
		name  string
		carry bool
	}{{"ids", false}, {"carried", true}} {
		b.Run(c.name, func(b *testing.B) {
			ns := make([]parley.Notice, 64)
			for i := range ns {
				ns[i] = parley.Notice{Conv: "conv-" + strings.Repeat("x", 20), Seq: int64(1000 + i)}
				if c.carry {
					ns[i] = carried(ns[i], parley.Event{MID: parley.NewID(), Kind: parley.EventMessage, Sender: "alice", Device: "phone", Body: body})
				}
			}
			bytes := 0
			for b.Loop() {
				payloads, _ := encodeNotices(false, ns, maxPayload)
				for _, p := range payloads {
					bytes += len(p)
					if _, _, err := decodeNotices(p); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ns)), "ns/notice")
			b.ReportMetric(float64(bytes)/float64(b.N*len(ns)), "bytes/notice")
		})
	}
}

// Signal notices go in payloads of their own, and come back the same.
func TestNoticeCodecSignals(t *testing.T) {
	ns := bustest.SignalNotices("codec", 300)
	for _, max := range []int{100, maxPayload} {
		payloads, bad := encodeNotices(true, ns, max)
		if bad != 0 {
			t.Fatalf("max %d: %d notices would not encode", max, bad)
		}
		var got []parley.Notice
		for _, p := range payloads {
			if strings.HasPrefix(p, signalHeader) && strings.Contains(p, "\n!") {
				t.Errorf("a loss marker in a signal payload: %q", p)
			}
			d, _, err := decodeNotices(p)
			if err != nil {
				t.Fatalf("max %d: decode %q: %v", max, p, err)
			}
			got = append(got, d...)
		}
		// Committed notices first, then signals, each in order.
		var want []parley.Notice
		for _, n := range ns {
			if !n.Signal() {
				want = append(want, n)
			}
		}
		for _, n := range ns {
			if n.Signal() {
				want = append(want, n)
			}
		}
		sameNotices(t, fmt.Sprintf("max %d", max), got, want)
	}
	for _, p := range []string{"s1", "s1\np c u gone 1", "s1\nt c u away 1", "s1\nt c u", "s1\nt c u 1.5", "s1\np c u online 253402300800000", "s1\n!"} {
		if ns, _, err := decodeNotices(p); err == nil {
			t.Errorf("decode %q = %v, want an error", p, ns)
		}
	}
}
