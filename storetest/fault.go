package storetest

import (
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
)

// RunFaults checks a store's fault points (SPEC §7): a Send or Recall that
// fails at store.after_key_lookup, store.before_insert or
// store.before_commit answers UNAVAILABLE and writes nothing, and the same
// request sent again once the point is disarmed lands exactly once, as new;
// a replay also passes store.after_key_lookup.
//
// Fault points are armed for the whole process, so RunFaults must not run
// beside anything else that writes: call it from a top-level test that does
// not call t.Parallel (Run's parallel subtests finish before the next
// top-level test starts).
func RunFaults(t *testing.T, b Backend) {
	t.Helper()
	t.Cleanup(func() { fault.Arm("") })
	points := []string{fault.StoreAfterKeyLookup, fault.StoreBeforeInsert, fault.StoreBeforeCommit}
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
		})
	}
	t.Run("replay_passes_"+fault.StoreAfterKeyLookup, func(t *testing.T) {
		e, ana := faultEnv(t, b)
		req := parley.SendRequest{Conv: "c-ab", CMID: "k3", Body: "m3"}
		failing(t, e, fault.StoreAfterKeyLookup, func() error { _, err := e.st.Send(ctx(t), ana, req); return err })
		s, err := e.st.Send(ctx(t), ana, req)
		if wantCode(t, err, "") && (!s.Dup || s.Seq != 3) {
			t.Errorf("replay after the fault: %+v, want dup of seq 3", s)
		}
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
