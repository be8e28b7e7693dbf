package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// aboveCap returns what in f tells of a seq above limit (a former member's
// last visible seq), or "" when nothing does.
func aboveCap(f wire.Frame, limit int64) string {
	over := func(what string, v *int64, max int64) string {
		if v != nil && *v > max {
			return fmt.Sprintf("%s %d", what, *v)
		}
		return ""
	}
	for _, s := range []string{
		over("seq", f.Seq, limit), over("head", f.Head, limit), over("next_after", f.NextAfter, limit),
		over("read", f.Read, limit), over("delivered", f.Delivered, limit), over("min_seq", f.MinSeq, limit+1),
	} {
		if s != "" {
			return s
		}
	}
	if f.Ev != nil && f.Ev.Seq > limit {
		return fmt.Sprintf("event %d", f.Ev.Seq)
	}
	for _, ev := range f.Events {
		if ev.Seq > limit {
			return fmt.Sprintf("page event %d", ev.Seq)
		}
	}
	for _, c := range f.Convs {
		switch {
		case c.Head > limit:
			return fmt.Sprintf("convs head %d", c.Head)
		case c.MinSeq > limit+1:
			return fmt.Sprintf("convs min_seq %d", c.MinSeq)
		case c.Read > limit || c.Delivered > limit:
			return fmt.Sprintf("convs cursors %d/%d", c.Read, c.Delivered)
		case c.Last != nil && c.Last.Seq > limit:
			return fmt.Sprintf("convs last %d", c.Last.Seq)
		}
	}
	return ""
}

// TestFormerMemberLearnsNothing: a user removed from a group keeps two
// sockets open. Nothing they are sent afterwards — pushes of the removal
// batched with later events, event pushes and hints (with the hint
// threshold forced low, too), read hints from their own other device and
// from members, and the replies to every request, after a purge past the
// removal too — carries a seq, head or
// cursor above their last visible seq.
func TestFormerMemberLearnsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    gateway.Options
	}{
		{"events", gateway.Options{}},
		{"hints", gateway.Options{HintMembers: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stores(t, func(t *testing.T, s parley.Store) {
				srv := newServer(t, s, tc.o)
				for _, u := range []string{"ana", "ben", "cy"} {
					user(t, s, u)
				}
				group(t, s, "g1", "ana", "ben", "cy") // 1..3
				ana1 := dial(t, srv.url, login(t, s, "ana", "d1", "i1").Token)
				ana2 := dial(t, srv.url, login(t, s, "ana", "d2", "i1").Token)
				cy1 := dial(t, srv.url, login(t, s, "cy", "d1", "i1").Token)
				cy2 := dial(t, srv.url, login(t, s, "cy", "d2", "i1").Token)
				for _, c := range []*client{ana2, cy1, cy2} {
					if f := c.do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
						t.Fatalf("sub: %+v", f)
					}
				}

				// cy's removal and later messages are committed before the
				// gateway hears of them, so one Feed holds them all.
				ctx := context.Background()
				ana := parley.Principal{User: "ana", DeviceID: "d1"}
				rm, err := s.RemoveMember(ctx, ana, "g1", "cy")
				if err != nil {
					t.Fatal(err)
				}
				const toSeq = 4
				if rm.Seq != toSeq {
					t.Fatalf("removal at %d, want %d", rm.Seq, toSeq)
				}
				var last int64
				for i := range 5 {
					sent, err := s.Send(ctx, ana, parley.SendRequest{Conv: "g1", CMID: fmt.Sprint("batched-", i), Body: "after cy"})
					if err != nil {
						t.Fatal(err)
					}
					last = sent.Seq
				}
				srv.hub.Publish(parley.Notice{Conv: "g1", Seq: rm.Seq, User: "cy"})
				srv.hub.Publish(parley.Notice{Conv: "g1", Seq: last})

				// cy learns of her removal, by event or hint.
				f := cy1.next()
				if tc.o.HintMembers == 0 && (f.T != wire.TEvent || f.Ev.Kind != "member_left" || f.Ev.User != "cy") {
					t.Fatalf("cy's removal push = %s %+v", f.T, f.Ev)
				}
				if tc.o.HintMembers != 0 && (f.T != wire.THint || f.Head == nil || *f.Head != toSeq) {
					t.Fatalf("cy's removal hint = %+v, want head %d", f, toSeq)
				}
				got := map[string][]wire.Frame{"cy1": {f}}

				// Much later activity: sends (pushed through notices), reads
				// by members on several devices, and cy's own requests.
				for i := range 20 {
					send(ana1, "g1", fmt.Sprint("later-", i), "later")
				}
				if f := ana1.do(map[string]any{"t": "read", "conv": "g1", "seq": last + 20}); f.T != wire.TReadOK {
					t.Fatalf("ana's read: %+v", f)
				}
				if f := cy1.do(map[string]any{"t": "read", "conv": "g1", "seq": toSeq}); f.T != wire.TReadOK || *f.Read != toSeq {
					t.Fatalf("cy's read: %+v", f)
				}
				for { // cy2 got her removal too, as cy1 did
					f := cy2.next()
					got["cy2"] = append(got["cy2"], f)
					if f.T == wire.THint && f.Read != nil {
						if *f.Read != toSeq {
							t.Fatalf("cy's read hint: %+v", f)
						}
						break
					}
				}
				for _, req := range []map[string]any{
					{"t": "sync", "conv": "g1", "after": 0},
					{"t": "sync", "conv": "g1", "after": 3, "limit": 1},
					{"t": "convs"},
					{"t": "fetch", "conv": "g1", "seq": toSeq},
					{"t": "fetch", "conv": "g1", "seq": toSeq + 1},
					{"t": "ack", "conv": "g1", "seq": toSeq},
					{"t": "ack", "conv": "g1", "seq": 1},
					{"t": "read", "conv": "g1", "seq": 1},
					{"t": "read", "conv": "g1", "seq": toSeq + 1},
					{"t": "sync", "conv": "g1", "after": toSeq + 1},
					{"t": "send", "conv": "g1", "cmid": "let-me-in", "body": "x"},
				} {
					got["cy1"] = append(got["cy1"], cy1.do(req))
				}
				for i := range 5 {
					send(ana1, "g1", fmt.Sprint("last-", i), "last")
				}
				// A purge far past cy's removal does not show in her replies.
				if err := s.SetRetention(ctx, "g1", parley.Retention{KeepLast: 2}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Purge(ctx, "g1"); err != nil {
					t.Fatal(err)
				}
				got["cy1"] = append(got["cy1"], cy1.do(map[string]any{"t": "sync", "conv": "g1", "after": 0}), cy1.do(map[string]any{"t": "convs"}))
				ana2.push(wire.THint) // ana's read reached her other device: the fan-out ran past it
				got["cy1"] = append(got["cy1"], cy1.drain(500*time.Millisecond)...)
				got["cy2"] = append(got["cy2"], cy2.drain(300*time.Millisecond)...)
				for name, fs := range got {
					for _, f := range fs {
						if what := aboveCap(f, toSeq); what != "" {
							t.Errorf("%s got %s %s above cy's last visible seq %d: %+v", name, f.T, what, toSeq, f)
						}
					}
				}
			})
		})
	}
}
