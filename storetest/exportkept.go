package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of export reuse and of the bound on kept artifacts
// (parley.Exports.CreateExport and FinishExport).

// touch sends a message to conv: a new event in the scope, so the next
// export of it is a new job rather than a reuse of a live artifact.
func (e *env) touch(t *testing.T, p parley.Principal, conv string) parley.Sent {
	t.Helper()
	return e.send(t, p, conv, parley.NewID(), "touch")
}

// exportDone creates a job of p with key, scope and maxKept, which must be
// new, claims it (no other job may be claimable) and finishes it.
func (e *env) exportDone(t *testing.T, p parley.Principal, key, scope string, maxKept int) parley.ExportJob {
	t.Helper()
	j, err := e.st.CreateExport(ctx(t), p, parley.ExportRequest{Key: key, Scope: scope, MaxKept: maxKept})
	ok(t, err, "create export "+key)
	if j.Replayed || j.Reused || j.State != parley.ExportQueued {
		t.Fatalf("create export %s: %s (reused %v), want a new queued job", key, jobLine(j), j.Reused)
	}
	owner := "w-" + key
	e.claim(t, e.st, owner, time.Hour, j.ID)
	ok(t, e.st.FinishExport(ctx(t), owner, j.ID, shaOf(key), 10, time.Hour), "finish "+key)
	return e.wantState(t, j.ID, parley.ExportDone, "")
}

// wantReuse checks that a request of p with key and scope answers the live
// job want, unchanged, with Replayed and Reused, and stores nothing.
func (e *env) wantReuse(t *testing.T, st parley.Store, p parley.Principal, key, scope string, want parley.ExportJob) {
	t.Helper()
	before := e.exportRows(t)
	r, err := st.CreateExport(ctx(t), p, parley.ExportRequest{Key: key, Scope: scope, MaxActive: 1, MaxKept: 1})
	if !wantCode(t, err, "") {
		return
	}
	if !r.Replayed || !r.Reused {
		t.Errorf("request %s %s: replayed %v, reused %v; want a reuse of %s", key, scope, r.Replayed, r.Reused, want.ID)
	}
	wantSameJob(t, "the reused job", r, want)
	e.exportUnchanged(t, before)
}

// wantNew checks that a request of p with key and scope makes a new job.
func (e *env) wantNew(t *testing.T, p parley.Principal, key, scope string, old parley.ExportJob) parley.ExportJob {
	t.Helper()
	r, err := e.st.CreateExport(ctx(t), p, parley.ExportRequest{Key: key, Scope: scope})
	ok(t, err, "create export "+key)
	if r.Replayed || r.Reused || r.ID == old.ID || r.State != parley.ExportQueued {
		t.Errorf("request %s %s: %s (reused %v), want a new job, not %s", key, scope, jobLine(r), r.Reused, old.ID)
	}
	return r
}

// testExportReuse: a request whose scope equals a live artifact's, with
// nothing the caller may see changed since its snapshot, answers that job
// (whatever its key); anything the caller may see that changed, a rollback,
// a purge, a newly visible conversation, or an artifact that is no longer
// live makes a new job. Events a former member cannot see change nothing.
func testExportReuse(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := us[0], us[1], us[2]
	const c, d = "c-ab", "c-cy"
	e.group(t, ana, c, "ben")
	e.fill(t, ana, c, 5)
	done := e.exportDone(t, ana, "k1", "all", 0)

	t.Run("identical", func(t *testing.T) {
		e.wantReuse(t, e.st, ana, "k2", "all", done)
		e.wantReuse(t, e.db.Open(t), ana, "k3", "all", done)
	})
	t.Run("no_reuse", func(t *testing.T) {
		r, err := e.st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: "k-fresh", Scope: "all", NoReuse: true})
		ok(t, err, "create with NoReuse")
		if r.Replayed || r.Reused || r.ID == done.ID || r.State != parley.ExportQueued {
			t.Errorf("NoReuse: %s (reused %v), want a new job", jobLine(r), r.Reused)
		}
		ok(t, must(e.st.RevokeExport(ctx(t), r.ID)), "revoke")
		e.wantReuse(t, e.st, ana, "k-after-fresh", "all", done) // a revoked job is no artifact
	})
	t.Run("same_key_is_a_replay", func(t *testing.T) {
		r, err := e.st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: "k1", Scope: "all"})
		if wantCode(t, err, "") && (!r.Replayed || r.Reused || r.ID != done.ID) {
			t.Errorf("replay of k1: %s (reused %v), want a plain replay of %s", jobLine(r), r.Reused, done.ID)
		}
	})
	t.Run("other_scope", func(t *testing.T) {
		j := e.wantNew(t, ana, "k-conv", "conv:"+c, done)
		e.claim(t, e.st, "w-conv", time.Hour, j.ID)
		ok(t, e.st.FinishExport(ctx(t), "w-conv", j.ID, shaOf("conv"), 10, time.Hour), "finish")
		e.wantReuse(t, e.st, ana, "k-conv-2", "conv:"+c, e.job(t, j.ID))
	})
	t.Run("other_user", func(t *testing.T) {
		j := e.wantNew(t, ben, "k2", "all", done) // ana's artifact is hers
		ok(t, must(e.st.RevokeExport(ctx(t), j.ID)), "revoke ben's job")
	})
	t.Run("new_event", func(t *testing.T) {
		e.touch(t, ben, c)
		j := e.wantNew(t, ana, "k-new", "all", done)
		e.claim(t, e.st, "w-new", time.Hour, j.ID)
		ok(t, e.st.FinishExport(ctx(t), "w-new", j.ID, shaOf("new"), 10, time.Hour), "finish")
		done = e.job(t, j.ID)
		e.wantReuse(t, e.st, ana, "k-new-2", "all", done) // the newest artifact is current
	})

	t.Run("former_member_sees_nothing_new", func(t *testing.T) {
		bj := e.exportDone(t, ben, "kb1", "all", 0)
		if _, err := e.st.RemoveMember(ctx(t), ana, c, "ben"); err != nil {
			t.Fatalf("remove ben: %v", err)
		}
		bj2 := e.wantNew(t, ben, "kb2", "all", bj) // ben's leave is an event he sees
		e.claim(t, e.st, "w-kb2", time.Hour, bj2.ID)
		ok(t, e.st.FinishExport(ctx(t), "w-kb2", bj2.ID, shaOf("kb2"), 10, time.Hour), "finish")
		e.touch(t, ana, c) // after ben left: not his to see
		e.wantReuse(t, e.st, ben, "kb3", "all", e.job(t, bj2.ID))
		j := e.wantNew(t, ana, "k-after-leave", "all", done) // ana sees both events
		ok(t, must(e.st.RevokeExport(ctx(t), j.ID)), "revoke")
	})

	t.Run("newly_visible_conversation", func(t *testing.T) {
		j := e.exportDone(t, cy, "kc1", "all", 0) // cy has no conversation yet
		e.wantReuse(t, e.st, cy, "kc2", "all", j)
		e.group(t, cy, d)
		j2 := e.wantNew(t, cy, "kc3", "all", j)
		e.wantNew(t, cy, "kc4", "all", j2) // a queued job is no artifact
	})
}

// must drops a value and keeps the error.
func must[T any](_ T, err error) error { return err }

// testExportReuseEnds: an artifact that is expired or revoked is not
// reused, nor is one whose conversation was rolled back or purged since its
// snapshot (the same heads would hold other events, or fewer).
func testExportReuseEnds(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	const c = "c-a"
	e.group(t, ana, c)
	e.fill(t, ana, c, 6)
	cases := []struct {
		name   string
		change func(t *testing.T, j parley.ExportJob)
	}{
		{"revoked", func(t *testing.T, j parley.ExportJob) {
			ok(t, must(e.st.RevokeExport(ctx(t), j.ID)), "revoke")
		}},
		{"expires_at_passed", func(t *testing.T, j parley.ExportJob) {
			e.db.Exec(t, "UPDATE export_jobs SET expires_at = created_at WHERE id = ?", j.ID)
		}},
		{"rolled_back", func(t *testing.T, j parley.ExportJob) {
			ok(t, must(e.st.Rollback(ctx(t), c, e.conv(t, c).Head-1)), "rollback")
		}},
		{"purged", func(t *testing.T, j parley.ExportJob) {
			ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 2}), "retention")
			ok(t, must(e.st.Purge(ctx(t), c)), "purge")
			ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{}), "no retention")
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.touch(t, ana, c) // whatever came before, the next job is new
			j := e.exportDone(t, ana, fmt.Sprintf("k%d", i), "all", 0)
			e.wantReuse(t, e.st, ana, fmt.Sprintf("k%d-same", i), "all", j)
			tc.change(t, j)
			n := e.wantNew(t, ana, fmt.Sprintf("k%d-after", i), "all", j)
			ok(t, must(e.st.RevokeExport(ctx(t), n.ID)), "revoke the new job")
		})
	}
}

// testExportReuseConcurrent: identical requests at once, with one key or
// with many, while an artifact is live, all answer that job and store
// nothing; with one key and no artifact they make exactly one job.
func testExportReuseConcurrent(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	const c = "c-a"
	e.group(t, ana, c)
	e.fill(t, ana, c, 3)
	race := func(t *testing.T, n int, key func(i int) string) []parley.ExportJob {
		t.Helper()
		jobs, errs := make([]parley.ExportJob, n), make([]error, n)
		stores := make([]parley.Store, n)
		for i := range stores {
			stores[i] = e.db.Open(t)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, st := range stores {
			wg.Go(func() {
				<-start
				jobs[i], errs[i] = st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: key(i), Scope: "all", MaxActive: 2})
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			ok(t, err, fmt.Sprintf("create %d", i))
		}
		return jobs
	}
	var live parley.ExportJob
	t.Run("one_key_no_artifact", func(t *testing.T) {
		jobs := race(t, 6, func(int) string { return "k-one" })
		fresh := 0
		for i, j := range jobs {
			if j.ID != jobs[0].ID || j.Reused {
				t.Errorf("create %d: %s (reused %v), want job %s", i, jobLine(j), j.Reused, jobs[0].ID)
			}
			if !j.Replayed {
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("%d creations answered a new job, want 1", fresh)
		}
		e.claim(t, e.st, "w1", time.Hour, jobs[0].ID)
		ok(t, e.st.FinishExport(ctx(t), "w1", jobs[0].ID, shaOf("one"), 10, time.Hour), "finish")
		live = e.job(t, jobs[0].ID)
	})
	t.Run("many_keys_live_artifact", func(t *testing.T) {
		if live.ID == "" {
			t.Skip("no live artifact")
		}
		before := e.exportRows(t)
		jobs := race(t, 6, func(i int) string { return fmt.Sprintf("k-many-%d", i) })
		for i, j := range jobs {
			if !j.Reused || !j.Replayed {
				t.Errorf("create %d: reused %v replayed %v, want a reuse", i, j.Reused, j.Replayed)
			}
			wantSameJob(t, fmt.Sprintf("create %d", i), j, live)
		}
		e.exportUnchanged(t, before)
	})
}

// testExportMaxKept: a user keeps at most MaxKept live artifacts; the one
// that finished first is expired first (whatever the creation order), other
// users' artifacts are not counted, MaxKept 0 bounds nothing, and finishes
// at once still leave at most MaxKept.
func testExportMaxKept(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := us[0], us[1], us[2]
	const c = "c-ab"
	e.group(t, ana, c, "ben", "cy")
	e.fill(t, ana, c, 2)
	liveOf := func(t *testing.T, user string) int64 {
		t.Helper()
		return e.db.Int(t, "SELECT count(*) FROM export_jobs WHERE user_id = ? AND state = 'done'", user)
	}

	t.Run("eleven_leave_ten", func(t *testing.T) {
		bj := e.exportDone(t, ben, "kb", "all", 1)
		var jobs []parley.ExportJob
		for i := range 11 {
			e.touch(t, ana, c)
			jobs = append(jobs, e.exportDone(t, ana, fmt.Sprintf("k%d", i), "all", parley.DefaultExportKept))
		}
		if n := liveOf(t, "ana"); n != parley.DefaultExportKept {
			t.Errorf("ana keeps %d artifacts, want %d", n, parley.DefaultExportKept)
		}
		e.wantState(t, jobs[0].ID, parley.ExportExpired, "")
		for _, j := range jobs[1:] {
			e.wantState(t, j.ID, parley.ExportDone, "")
		}
		e.wantState(t, bj.ID, parley.ExportDone, "") // ben's is his own
		if ids, err := e.st.ExpireExports(ctx(t)); wantCode(t, err, "") && len(ids) != 0 {
			t.Errorf("ExpireExports after the bound: %v, want nothing left to expire", ids)
		}
	})

	t.Run("finished_first_goes_first", func(t *testing.T) {
		dee := e.users(t, "dee")[0]
		if _, err := e.st.AddMember(ctx(t), ana, c, "dee"); err != nil {
			t.Fatalf("add dee: %v", err)
		}
		var jobs []parley.ExportJob // created a, b, c; finished b, a, c
		for _, k := range []string{"a", "b", "c"} {
			e.touch(t, ana, c)
			j, err := e.st.CreateExport(ctx(t), dee, parley.ExportRequest{Key: k, Scope: "all", MaxKept: 2})
			ok(t, err, "create "+k)
			e.claim(t, e.st, "w-"+k, time.Hour, j.ID)
			jobs = append(jobs, j)
		}
		for _, i := range []int{1, 0, 2} {
			time.Sleep(3 * time.Millisecond) // finish times differ on SQLite's millisecond clock
			k := jobs[i].Key
			ok(t, e.st.FinishExport(ctx(t), "w-"+k, jobs[i].ID, shaOf(k), 10, time.Hour), "finish "+k)
		}
		e.wantState(t, jobs[1].ID, parley.ExportExpired, "") // b finished first
		e.wantState(t, jobs[0].ID, parley.ExportDone, "")
		e.wantState(t, jobs[2].ID, parley.ExportDone, "")
	})

	t.Run("zero_bounds_nothing", func(t *testing.T) {
		for i := range 3 {
			e.touch(t, cy, c)
			e.exportDone(t, cy, fmt.Sprintf("kc%d", i), "all", 0)
		}
		if n := liveOf(t, "cy"); n != 3 {
			t.Errorf("cy keeps %d artifacts, want 3", n)
		}
	})

	t.Run("concurrent_finishes", func(t *testing.T) {
		const n = 4
		var ids []string
		for i := range n {
			e.touch(t, cy, c)
			j, err := e.st.CreateExport(ctx(t), cy, parley.ExportRequest{Key: fmt.Sprintf("kr%d", i), Scope: "all", MaxKept: 2})
			ok(t, err, "create")
			e.claim(t, e.st, fmt.Sprintf("wr%d", i), time.Hour, j.ID)
			ids = append(ids, j.ID)
		}
		start := make(chan struct{})
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, id := range ids {
			st := e.db.Open(t)
			wg.Go(func() {
				<-start
				errs[i] = st.FinishExport(ctx(t), fmt.Sprintf("wr%d", i), id, shaOf(id), 10, time.Hour)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			ok(t, err, fmt.Sprintf("finish %d", i))
		}
		if got := liveOf(t, "cy"); got != 2 {
			t.Errorf("cy keeps %d artifacts after %d finishes at once, want 2", got, n)
		}
	})
}
