package loadtest

import (
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/wire"
)

// truth is a group g created by root with ana and ben (seqs 1–3); ana
// sends 4, ben is removed at 5, ana sends 6, ben is re-added at 7, ana
// sends 8 and recalls it at 9.
func testTruth() Truth {
	ev := func(seq int64, kind, sender, user string) wire.Event {
		return wire.Event{Conv: "g", Seq: seq, MID: "m" + string(rune('0'+seq)), Kind: kind, Sender: sender, User: user}
	}
	evs := []wire.Event{
		ev(1, "member_joined", "root", "root"),
		ev(2, "member_joined", "root", "ana"),
		ev(3, "member_joined", "root", "ben"),
		ev(4, "message", "ana", ""),
		ev(5, "member_left", "root", "ben"),
		ev(6, "message", "ana", ""),
		ev(7, "member_joined", "root", "ben"),
		ev(8, "message", "ana", ""),
		ev(9, "recall", "ana", ""),
	}
	evs[3].Body, evs[5].Body = "a1", "a2"
	evs[7].Recalled, evs[8].Target = true, 8
	return Truth{Convs: map[string]*ConvLog{"g": {ID: "g", Initial: []string{"root", "ana", "ben"}, CreateHead: 3, Events: evs}}}
}

func appliedSeqs(t Truth, seqs ...int64) []Applied {
	var out []Applied
	for _, s := range seqs {
		out = append(out, appliedOf(t.Convs["g"].Events[s-1]))
	}
	return out
}

// good returns the devices of a run that kept every promise.
func good(t Truth) []DeviceLog {
	items := []client.Item{
		{CMID: "c1", Conv: "g", Kind: client.KindSend, Body: "a1", Done: true, Seq: 4},
		{CMID: "c2", Conv: "g", Kind: client.KindSend, Body: "a2", Done: true, Seq: 6},
		{CMID: "c3", Conv: "g", Kind: client.KindSend, Body: "a3", Done: true, Seq: 8},
		{CMID: "c4", Conv: "g", Kind: client.KindRecall, Target: 8, Done: true, Seq: 9},
	}
	return []DeviceLog{
		{User: "ana", Device: "d0", Applied: map[string][]Applied{"g": appliedSeqs(t, 1, 2, 3, 4, 5, 6, 7, 8, 9)},
			Ended: items, Outcomes: map[string]int{"c1": 1, "c2": 1, "c3": 1, "c4": 1}, Enqueued: []string{"c1", "c2", "c3", "c4"}},
		{User: "ben", Device: "d0", Applied: map[string][]Applied{"g": appliedSeqs(t, 1, 2, 3, 4, 5, 7, 8, 9)}},
	}
}

func TestPeriods(t *testing.T) {
	c := testTruth().Convs["g"]
	tests := []struct {
		user string
		want []Period
	}{
		{"ana", []Period{{1, 0}}},
		{"ben", []Period{{1, 5}, {7, 0}}},
		{"cy", nil},
	}
	for _, tt := range tests {
		got := c.Periods(tt.user)
		if len(got) != len(tt.want) {
			t.Fatalf("Periods(%s) = %v, want %v", tt.user, got, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Fatalf("Periods(%s) = %v, want %v", tt.user, got, tt.want)
			}
		}
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs)
		want   string // substring of the first violation; "" means none
	}{
		{"a run that kept every promise", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			// ben read up to 4: then 8 is recalled, so nothing is unread.
			return ds, []UnreadObs{{User: "ben", Conv: "g", Read: 4, Unread: 0}, {User: "ben", Conv: "g", Read: 3, Unread: 1}}
		}, ""},
		{"a gap", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[1].Applied["g"] = appliedSeqs(t, 1, 2, 3, 5, 7, 8, 9)
			return ds, nil
		}, "missing seq 4"},
		{"missing at the end", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[1].Applied["g"] = appliedSeqs(t, 1, 2, 3, 4, 5, 7)
			return ds, nil
		}, "missing seq 8"},
		{"a duplicate", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[1].Applied["g"] = appliedSeqs(t, 1, 2, 3, 4, 4, 5, 7, 8, 9)
			return ds, nil
		}, "applied twice"},
		{"out of order", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[1].Applied["g"] = appliedSeqs(t, 1, 2, 4, 3, 5, 7, 8, 9)
			return ds, nil
		}, "out of order"},
		{"outside the membership", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[1].Applied["g"] = appliedSeqs(t, 1, 2, 3, 4, 5, 6, 7, 8, 9)
			return ds, nil
		}, "seq 6 (message) applied but not visible"},
		{"another event at a seq", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[1].Applied["g"][3].MID = "forged"
			return ds, nil
		}, "seq 4 applied as message forged"},
		{"a doubled send", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[0].Ended = ds[0].Ended[1:]
			ds[0].Enqueued = ds[0].Enqueued[1:]
			return ds, nil
		}, "seq 4 by ana"},
		{"an item that never ended", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[0].Pending = []client.Item{{CMID: "c5", Conv: "g", Kind: client.KindSend, Body: "a5"}}
			ds[0].Enqueued = append(ds[0].Enqueued, "c5")
			return ds, nil
		}, "never ended"},
		{"an item lost from the outbox", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[0].Enqueued = append(ds[0].Enqueued, "c6")
			return ds, nil
		}, "not in the outbox"},
		{"an outcome reported twice", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[0].Outcomes["c2"] = 2
			return ds, nil
		}, "reported ended 2 times"},
		{"two items at one seq", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[0].Ended[1].Seq = 4
			return ds, nil
		}, "both landed at seq 4"},
		{"an answer the log does not hold", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[0].Ended[1].Body = "other"
			return ds, nil
		}, "which holds message by ana"},
		{"an unexplained terminal code", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[0].Ended = append(ds[0].Ended, client.Item{CMID: "c7", Conv: "g", Kind: client.KindSend, Body: "x", Done: true, Code: parley.CodeNotMember})
			return ds, nil
		}, "which the log does not explain"},
		{"a wrong unread count", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			return ds, []UnreadObs{{User: "ben", Conv: "g", Read: 3, Unread: 2}}
		}, "unread 2"},
		{"a reset", func(t Truth, ds []DeviceLog) ([]DeviceLog, []UnreadObs) {
			ds[1].Resets = []string{"g: EPOCH_CHANGED"}
			return ds, nil
		}, "told to rebuild"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := testTruth()
			ds, unread := tt.break_(tr, good(tr))
			vs := Check(tr, ds, unread)
			switch {
			case tt.want == "" && len(vs) > 0:
				t.Fatalf("violations %v, want none", vs)
			case tt.want != "" && len(vs) == 0:
				t.Fatalf("no violation, want one with %q", tt.want)
			case tt.want != "" && !strings.Contains(vs[0].String(), tt.want):
				t.Fatalf("first violation %q, want one with %q (all: %v)", vs[0], tt.want, vs)
			}
		})
	}
}

// A NOT_MEMBER send of a user who was removed is explained.
func TestCheckExplainedNotMember(t *testing.T) {
	tr := testTruth()
	ds := good(tr)
	ds[1].Ended = []client.Item{{CMID: "b1", Conv: "g", Kind: client.KindSend, Body: "late", Done: true, Code: parley.CodeNotMember}}
	ds[1].Outcomes = map[string]int{"b1": 1}
	ds[1].Enqueued = []string{"b1"}
	if vs := Check(tr, ds, nil); len(vs) != 0 {
		t.Fatalf("violations %v, want none", vs)
	}
}

func TestDist(t *testing.T) {
	var xs []float64
	for i := 1; i <= 100; i++ {
		xs = append(xs, float64(i))
	}
	d := distOf(xs)
	if d.N != 100 || d.P50 != 50 || d.P95 != 95 || d.P99 != 99 || d.Max != 100 || d.Mean != 50.5 {
		t.Fatalf("distOf(1..100) = %+v", d)
	}
	if d := distOf(nil); d.N != 0 {
		t.Fatalf("distOf(nil) = %+v", d)
	}
}

func TestBaseURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080"},
		{"ws://127.0.0.1:8080/ws", "http://127.0.0.1:8080"},
		{"wss://chat.example/ws", "https://chat.example"},
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
	}
	for _, tt := range tests {
		if got := baseURL(tt.in); got != tt.want {
			t.Errorf("baseURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := wsURL("https://chat.example"); got != "wss://chat.example/ws" {
		t.Errorf("wsURL = %q", got)
	}
}
