package storetest

import (
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
)

// RunFaults checks a store's fault points (docs/protocol.md#fault-points-lab-only),
// which sit on the one path every Send and Recall takes:
// store.before_insert before the store call's write, store.before_commit
// after the write inserted and before its commit. A Send or Recall that
// fails at either answers UNAVAILABLE and writes nothing, and the same
// request sent again once the point is disarmed lands exactly once, as new.
// A batch, of one conversation or several, fails whole: every item
// UNAVAILABLE, nothing of it committed. A replay hits store.before_insert
// (the store learns it is one only in its write); a call that inserts
// nothing, a replay or a refusal, passes store.before_commit.
//
// Fault points are armed for the whole process, so RunFaults must not run
// beside anything else that writes: call it from a top-level test that does
// not call t.Parallel (Run's parallel subtests finish before the next
// top-level test starts).
func RunFaults(t *testing.T, b Backend) {
	t.Helper()
	t.Cleanup(func() { fault.Arm("") })
	faultCalls(t, b)
	faultBatches(t, b)
	faultReplays(t, b)
}

// faultCalls fails a Send and a Recall (and the derived writes:
// faultDerived) at each store point.
func faultCalls(t *testing.T, b Backend) {
	points := []string{fault.StoreBeforeInsert, fault.StoreBeforeCommit}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			t.Run("send", func(t *testing.T) {
				e, ana := faultEnv(t, b)
				req := parley.SendRequest{Conv: "c-ab", CMID: "k4", Body: "m4"}
				failing(t, e, point, func() error { _, err := e.st.Send(ctx(t), ana, req); return err })
				s, err := e.st.Send(ctx(t), ana, req)
				if wantCode(t, err, "") && (s.Dup || s.Seq != 4) {
					t.Errorf("resend after the fault: %+v, want new at seq 4", s)
				}
				if n := e.keyRows(t, "c-ab", "ana", "k4"); n != 1 {
					t.Errorf("%d rows for the key, want 1", n)
				}
			})
			t.Run("recall", func(t *testing.T) {
				e, ana := faultEnv(t, b)
				req := parley.RecallRequest{Conv: "c-ab", Target: 3, CMID: "r4"}
				failing(t, e, point, func() error { _, err := e.st.Recall(ctx(t), ana, req); return err })
				r, err := e.st.Recall(ctx(t), ana, req)
				if wantCode(t, err, "") && (r.Dup || r.Seq != 4) {
					t.Errorf("recall again after the fault: %+v, want new at seq 4", r)
				}
				if ev := e.fetch(t, ana, "c-ab", 3); !ev.Recalled {
					t.Errorf("seq 3 is not recalled: %s", describe(ev))
				}
			})
			faultDerived(t, b, point)
		})
	}
}

// faultDerived fails an edit, a reaction and a reply that mentions at
// point: nothing of them is written, derived rows included, and the same
// request once the point is disarmed lands as new.
func faultDerived(t *testing.T, b Backend, point string) {
	derived := func(t *testing.T, e *env) (reactions, mentions int64) {
		t.Helper()
		return e.db.Int(t, "SELECT count(*) FROM reactions WHERE conv_id = ?", "c-ab"),
			e.db.Int(t, "SELECT count(*) FROM mentions WHERE conv_id = ?", "c-ab")
	}
	for _, tc := range []struct {
		name      string
		call      func(e *env, ana parley.Principal) (int64, bool, error)
		reactions int64
		mentions  int64
	}{
		{"edit", func(e *env, ana parley.Principal) (int64, bool, error) {
			r, err := e.st.Edit(ctx(t), ana, parley.EditRequest{Conv: "c-ab", Target: 3, CMID: "e4", Body: "@ben m3'"})
			return r.Seq, r.Dup, err
		}, 0, 1},
		{"react", func(e *env, ana parley.Principal) (int64, bool, error) {
			r, err := e.st.React(ctx(t), ana, parley.ReactRequest{Conv: "c-ab", Target: 3, Emoji: "👍", On: true, CMID: "x4"})
			return r.Seq, r.Dup, err
		}, 1, 0},
		{"reply_with_mention", func(e *env, ana parley.Principal) (int64, bool, error) {
			s, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: "c-ab", CMID: "k4", Body: "@ben re", ReplyTo: 3})
			return s.Seq, s.Dup, err
		}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ana := faultEnv(t, b)
			failing(t, e, point, func() error { _, _, err := tc.call(e, ana); return err })
			if r, m := derived(t, e); r != 0 || m != 0 {
				t.Errorf("after the fault: %d reactions rows, %d mentions rows; want none", r, m)
			}
			seq, dup, err := tc.call(e, ana)
			if wantCode(t, err, "") && (dup || seq != 4) {
				t.Errorf("again after the fault: seq %d dup %v, want new at 4", seq, dup)
			}
			if r, m := derived(t, e); r != tc.reactions || m != tc.mentions {
				t.Errorf("after the retry: %d reactions rows, %d mentions rows; want %d, %d", r, m, tc.reactions, tc.mentions)
			}
		})
	}
}

// faultBatches fails a batch of new items and a replay at each store
// point: before its write, or after its inserts; every item answers
// UNAVAILABLE and nothing of the batch is committed; the same batch sent
// again once disarmed lands whole. The same across conversations: item 0 is
// of c-b (a conversation named first and out of id order), the others of
// c-ab; at store.before_commit c-b keeps nothing of item 0's insert.
func faultBatches(t *testing.T, b Backend) {
	for _, across := range []bool{false, true} {
		for _, spec := range []string{
			fault.StoreBeforeInsert + "=unavailable",
			fault.StoreBeforeCommit + "=unavailable",
		} {
			name, first, seq := "batch_"+spec, "c-ab", int64(4)
			if across {
				name, first, seq = "batch_across_"+spec, "c-b", 3
			}
			t.Run(name, func(t *testing.T) {
				e, ana := faultEnv(t, b)
				if across {
					e.group(t, ana, "c-b", "ben")
				}
				items := []batchItem{
					{p: ana, conv: first, cmid: "k4", body: "m4", seq: seq},
					{p: ana, conv: "c-ab", cmid: "k3", body: "m3", seq: 3, dup: true},
					{p: ana, conv: "c-ab", cmid: "k5", body: "m5", seq: seq + 1},
				}
				if across {
					items[2].seq = 4
				}
				in := make([]parley.BatchSend, len(items))
				for i, it := range items {
					in[i] = parley.BatchSend{P: it.p, Req: parley.SendRequest{Conv: it.conv, CMID: it.cmid, Body: it.body}}
				}
				before, beforeFirst := e.snapshot(t, "c-ab"), e.snapshot(t, first)
				if err := fault.Arm(spec); err != nil {
					t.Fatalf("arm %s: %v", spec, err)
				}
				res := e.batcher(t).SendBatch(ctx(t), in)
				fault.Arm("")
				for i, r := range res {
					if !wantCode(t, r.Err, parley.CodeUnavailable) {
						t.Errorf("item %d: %+v", i, r.Sent)
					}
				}
				e.unchanged(t, "c-ab", before)
				e.unchanged(t, first, beforeFirst)
				e.runBatch(t, items)
			})
		}
	}
}

// faultReplays: a replay hits store.before_insert; a call that inserts
// nothing passes store.before_commit.
func faultReplays(t *testing.T, b Backend) {
	t.Run("replay_hits_"+fault.StoreBeforeInsert, func(t *testing.T) {
		e, ana := faultEnv(t, b)
		req := parley.SendRequest{Conv: "c-ab", CMID: "k3", Body: "m3"}
		failing(t, e, fault.StoreBeforeInsert, func() error { _, err := e.st.Send(ctx(t), ana, req); return err })
		s, err := e.st.Send(ctx(t), ana, req)
		if wantCode(t, err, "") && (!s.Dup || s.Seq != 3) {
			t.Errorf("replay after the fault: %+v, want dup of seq 3", s)
		}
	})
	t.Run("no_insert_passes_"+fault.StoreBeforeCommit, func(t *testing.T) {
		e, ana := faultEnv(t, b)
		before := e.snapshot(t, "c-ab")
		if err := fault.Arm(fault.StoreBeforeCommit + "=unavailable"); err != nil {
			t.Fatal(err)
		}
		s, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: "c-ab", CMID: "k3", Body: "m3"})
		r, rerr := e.st.Recall(ctx(t), ana, parley.RecallRequest{Conv: "c-ab", Target: 9, CMID: "r4"})
		fault.Arm("")
		if wantCode(t, err, "") && (!s.Dup || s.Seq != 3) {
			t.Errorf("replay with the point armed: %+v, want dup of seq 3", s)
		}
		if wantCode(t, rerr, parley.CodeNotFound) && r != (parley.Recalled{}) {
			t.Errorf("refused recall with the point armed: %+v", r)
		}
		e.unchanged(t, "c-ab", before)
	})
}

// faultEnv is a fresh database with group c-ab of ana and ben, and ana's
// message at seq 3.
func faultEnv(t *testing.T, b Backend) (*env, parley.Principal) {
	t.Helper()
	e := newEnv(t, b, parley.Options{})
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	e.send(t, ana, "c-ab", "k3", "m3")
	return e, ana
}

// failing arms point with unavailable, checks that call answers
// UNAVAILABLE and changes nothing, and disarms it.
func failing(t *testing.T, e *env, point string, call func() error) {
	t.Helper()
	before := e.snapshot(t, "c-ab")
	if err := fault.Arm(point + "=unavailable"); err != nil {
		t.Fatalf("arm %s: %v", point, err)
	}
	err := call()
	fault.Arm("")
	wantCode(t, err, parley.CodeUnavailable)
	e.unchanged(t, "c-ab", before)
}
