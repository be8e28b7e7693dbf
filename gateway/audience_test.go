package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/gateway"
	"github.com/parleychat/parley/wire"
)

// TestAudienceKept: the fan-out worker keeps a conversation's audience
// between batches and follows it over the membership events it pushes, so
// after the first read it reads no membership (MemberReads stays), and each
// socket still gets exactly what its user may see: a member removed at s
// gets s and nothing after, one added at s everything from s on, one who
// leaves and comes back inside one batch nothing between, a former member
// who comes back from their return. After a rollback (a new epoch) and
// after a bus loss the audience is read once again and then kept. With hints instead of events
// (HintMembers 1), a hint's head is capped at what its user may see.
//
// Each batch is committed to the store before its one notice, so the
// worker reads it in one store read; a message in a second conversation
// (one worker: it is pushed after the batch) marks the end of each batch
// on every socket.
func TestAudienceKept(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hints bool
	}{{"events", false}, {"hints", true}} {
		t.Run(tc.name, func(t *testing.T) {
			stores(t, func(t *testing.T, s parley.Store) {
				o := gateway.Options{Workers: 1, Backstop: time.Hour}
				if tc.hints {
					o.HintMembers = 1
				}
				srv := newServer(t, s, o)
				users := []string{"ana", "ben", "cy", "dan"}
				for _, u := range users {
					user(t, s, u)
				}
				group(t, s, "g1", "ana", "ben", "cy")          // 1..3
				group(t, s, "mark", "ana", "ben", "cy", "dan") // 1..4
				socks := map[string]*client{}
				for _, u := range users {
					socks[u] = dial(t, srv.url, login(t, s, u, "d1", "i1").Token)
					if f := socks[u].do(map[string]any{"t": "sub"}); f.T != wire.TSubscribed {
						t.Fatalf("sub: %+v", f)
					}
				}
				ctx := context.Background()
				ana := parley.Principal{User: "ana", DeviceID: "d1"}
				n := 0
				msg := func(conv string) int64 {
					t.Helper()
					n++
					sent, err := s.Send(ctx, ana, parley.SendRequest{Conv: conv, CMID: fmt.Sprint("m", n), Body: "hi"})
					if err != nil {
						t.Fatal(err)
					}
					return sent.Seq
				}
				change := func(p parley.Principal, add bool, u string) int64 {
					t.Helper()
					f := s.RemoveMember
					if add {
						f = s.AddMember
					}
					ch, err := f(ctx, p, "g1", u)
					if err != nil || !ch.Changed {
						t.Fatalf("membership change of %s: %+v %v", u, ch, err)
					}
					return ch.Seq
				}
				add := func(u string) int64 { return change(ana, true, u) }
				remove := func(u string) int64 { return change(ana, false, u) }
				leave := func(u string) int64 { return change(parley.Principal{User: u, DeviceID: "d1"}, false, u) }

				// batch publishes the notice of g1's last seq and returns,
				// per user, the g1 frames their socket got for it: event
				// seqs, "hint H" or "resync".
				batch := func(last int64) map[string][]string {
					t.Helper()
					srv.hub.Publish(parley.Notice{Conv: "g1", Seq: last})
					var seen []wire.Frame
					for { // ana is a member throughout: the batch was pushed
						f := socks["ana"].next()
						seen = append(seen, f)
						if f.T == wire.TResync || f.T == wire.TEvent && f.Ev.Conv == "g1" && f.Ev.Seq == last ||
							f.T == wire.THint && f.Conv == "g1" && *f.Head >= last {
							break
						}
					}
					socks["ana"].pending = append(seen, socks["ana"].pending...)
					end := msg("mark")
					srv.hub.Publish(parley.Notice{Conv: "mark", Seq: end})
					got := map[string][]string{}
					for _, u := range users {
						for {
							f := socks[u].next()
							var conv string
							var seq int64
							switch {
							case f.T == wire.TEvent:
								conv, seq = f.Ev.Conv, f.Ev.Seq
							case f.T == wire.THint:
								conv, seq = f.Conv, *f.Head
							case f.T == wire.TResync:
								got[u] = append(got[u], "resync")
								continue
							default:
								t.Fatalf("%s got %+v", u, f)
							}
							if conv == "mark" {
								if seq == end {
									break
								}
								continue
							}
							if f.T == wire.THint {
								got[u] = append(got[u], fmt.Sprint("hint ", seq))
							} else {
								got[u] = append(got[u], fmt.Sprint(seq))
							}
						}
					}
					return got
				}
				// want checks a batch against what each user may see of
				// it: the seqs, or in hint mode hints whose head is the last
				// of them (their cap).
				want := func(what string, got map[string][]string, want map[string][]int64) {
					t.Helper()
					for _, u := range users {
						var w []string
						for _, seq := range want[u] {
							w = append(w, fmt.Sprint(seq))
						}
						g := got[u]
						if tc.hints && len(w) > 0 {
							// One per event or fewer (one waits in a queue
							// at most), each with the same capped head.
							w = []string{"hint " + w[len(w)-1]}
							g = slices.Compact(g)
						}
						if !slices.Equal(g, w) {
							t.Errorf("%s: %s got %v, want %v", what, u, got[u], w)
						}
					}
				}
				reads := func() int64 { return srv.hub.Stats().MemberReads.Load() }

				// The first batch of each conversation reads its periods.
				want("first batch", batch(msg("g1")), map[string][]int64{"ana": {4}, "ben": {4}, "cy": {4}})
				before := reads()

				rm := remove("cy") // 5: cy sees her removal, nothing after
				m6, m7 := msg("g1"), msg("g1")
				want("removal", batch(m7), map[string][]int64{"ana": {rm, m6, m7}, "ben": {rm, m6, m7}, "cy": {rm}})

				join := add("dan") // 8: dan from his join
				m9 := msg("g1")
				want("join", batch(m9), map[string][]int64{"ana": {join, m9}, "ben": {join, m9}, "dan": {join, m9}})

				left := leave("ben") // 10, and back at 12, in one batch
				m11 := msg("g1")
				back := add("ben")
				m13 := msg("g1")
				want("leave and return", batch(m13), map[string][]int64{
					"ana": {left, m11, back, m13}, "ben": {left, back, m13}, "dan": {left, m11, back, m13}})

				rmDan := remove("dan") // 14
				again := add("cy")     // 15: cy is back
				m16 := msg("g1")
				want("removal and return", batch(m16), map[string][]int64{
					"ana": {rmDan, again, m16}, "ben": {rmDan, again, m16}, "cy": {again, m16}, "dan": {rmDan}})

				if got := reads(); got != before {
					t.Errorf("%d membership reads after the first batch, want none (the audience is kept)", got-before)
				}

				// A rollback to 13 (dan in, cy out) restores the membership
				// of now with two system events (14: dan leaves, 15: cy
				// joins) in epoch 2. The next read sees the new epoch:
				// every watcher resyncs, and the audience is read again.
				if _, err := s.Rollback(ctx, "g1", m13); err != nil {
					t.Fatal(err)
				}
				msg("g1")
				m17 := msg("g1") // 17: past what was pushed in epoch 1
				got := batch(m17)
				for _, u := range users {
					if !slices.Equal(got[u], []string{"resync"}) {
						t.Errorf("new epoch: %s got %v, want resync", u, got[u])
					}
				}
				before = reads()
				m18 := msg("g1")
				want("new epoch", batch(m18), map[string][]int64{"ana": {m18}, "ben": {m18}, "cy": {m18}})
				if got := reads(); got != before+1 {
					t.Errorf("%d membership reads after the new epoch, want 1", got-before)
				}
				bye := leave("ben") // 19
				m20 := msg("g1")
				want("new epoch, kept", batch(m20), map[string][]int64{"ana": {bye, m20}, "ben": {bye}, "cy": {bye, m20}})
				if got := reads(); got != before+1 {
					t.Errorf("%d membership reads after the new epoch, want 1 (then kept)", got-before)
				}

				// After a bus loss (recovered by polling the store) the
				// audience of each conversation is read again, once.
				recovered := srv.hub.Stats().Recovered.Load()
				srv.hub.Lost()
				for srv.hub.Stats().Recovered.Load() == recovered {
					time.Sleep(10 * time.Millisecond)
				}
				before = reads()
				m21 := msg("g1")
				want("after a bus loss", batch(m21), map[string][]int64{"ana": {m21}, "cy": {m21}})
				m22 := msg("g1")
				want("after a bus loss, kept", batch(m22), map[string][]int64{"ana": {m22}, "cy": {m22}})
				if got := reads(); got != before+2 {
					t.Errorf("%d membership reads after a bus loss, want 2 (g1 and mark, once each, then kept)", got-before)
				}
			})
		})
	}
}
