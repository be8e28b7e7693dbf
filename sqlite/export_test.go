package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/storetest"
)

// exportFixture is a store with three users and two groups:
//
//	g1: 1 ana joined, 2 ben joined, 3 "m3" ana, 4 "m4" ana, 5 "m5" ben,
//	    6 recall of 3, 7 cy joined, 8 "m8" ana, 9 ben left, 10 "m10" ana
//	g2: 1 ana joined, 2 cy joined, 3 "x3" cy
type exportFixture struct {
	h            storetest.DB
	st           parley.Store
	ana, ben, cy parley.Principal
}

func newExportFixture(t *testing.T) *exportFixture {
	t.Helper()
	h := backend{}.New(t, parley.Options{})
	f := &exportFixture{h: h, st: h.Store()}
	ctx := context.Background()
	for _, u := range []string{"ana", "ben", "cy"} {
		if _, err := f.st.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			t.Fatal(err)
		}
	}
	f.ana = parley.Principal{User: "ana", DeviceID: "d1"}
	f.ben = parley.Principal{User: "ben", DeviceID: "d1"}
	f.cy = parley.Principal{User: "cy", DeviceID: "d1"}
	f.must(t)(f.st.CreateConversation(ctx, f.ana, parley.NewConversation{ID: "g1", Kind: parley.KindGroup, Members: []string{"ana", "ben"}}))
	f.send(t, f.ana, "g1", "m3")
	f.send(t, f.ana, "g1", "m4")
	f.send(t, f.ben, "g1", "m5")
	f.must(t)(f.st.Recall(ctx, f.ana, parley.RecallRequest{Conv: "g1", Target: 3, CMID: "r3"}))
	f.must(t)(f.st.AddMember(ctx, f.ana, "g1", "cy"))
	f.send(t, f.ana, "g1", "m8")
	f.must(t)(f.st.RemoveMember(ctx, f.ana, "g1", "ben"))
	f.send(t, f.ana, "g1", "m10")
	f.must(t)(f.st.CreateConversation(ctx, f.ana, parley.NewConversation{ID: "g2", Kind: parley.KindGroup, Members: []string{"ana", "cy"}}))
	f.send(t, f.cy, "g2", "x3")
	return f
}

// must fails t on a setup call's error: f.must(t)(call()).
func (f *exportFixture) must(t *testing.T) func(any, error) {
	return func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (f *exportFixture) send(t *testing.T, p parley.Principal, conv, body string) {
	t.Helper()
	if _, err := f.st.Send(context.Background(), p, parley.SendRequest{Conv: conv, CMID: "k-" + body, Body: body}); err != nil {
		t.Fatal(err)
	}
}

func (f *exportFixture) create(t *testing.T, p parley.Principal, key, scope string) parley.ExportJob {
	t.Helper()
	j, err := f.st.CreateExport(context.Background(), p, parley.ExportRequest{Key: key, Scope: scope, MaxActive: 10})
	if err != nil {
		t.Fatalf("create export %s %s by %s: %v", key, scope, p.User, err)
	}
	return j
}

func (f *exportFixture) job(t *testing.T, id string) parley.ExportJob {
	t.Helper()
	j, err := f.st.ExportJob(context.Background(), id)
	if err != nil {
		t.Fatalf("export job %s: %v", id, err)
	}
	return j
}

func (f *exportFixture) claim(t *testing.T, owner string) parley.ExportJob {
	t.Helper()
	j, ok, err := f.st.ClaimExport(context.Background(), owner, time.Minute)
	if err != nil || !ok {
		t.Fatalf("claim by %s: ok %v, err %v", owner, ok, err)
	}
	return j
}

func describeEvents(evs []parley.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%d:%s:%s:%q:%v ", ev.Seq, ev.Kind, ev.Sender, ev.Body, ev.Recalled)
	}
	return strings.TrimSpace(b.String())
}

func wantCode(t *testing.T, err error, want parley.Code) {
	t.Helper()
	if got := parley.ErrorCode(err); got != want {
		t.Errorf("got code %q (%v), want %q", got, err, want)
	}
}

func TestExportCreate(t *testing.T) {
	f := newExportFixture(t)
	ctx := context.Background()
	j := f.create(t, f.ben, "k1", "all")
	if j.State != parley.ExportQueued || j.User != "ben" || j.Key != "k1" || j.Scope != "all" || j.Replayed ||
		j.Attempts != 0 || j.CreatedAt.IsZero() || j.NotBefore.IsZero() || !j.ExpiresAt.IsZero() || !j.LeaseUntil.IsZero() {
		t.Fatalf("new job: %+v", j)
	}

	t.Run("replay", func(t *testing.T) {
		r := f.create(t, f.ben, "k1", "all")
		if r.ID != j.ID || !r.Replayed {
			t.Errorf("replay: %+v, want job %s replayed", r, j.ID)
		}
		_, err := f.st.CreateExport(ctx, f.ben, parley.ExportRequest{Key: "k1", Scope: "conv:g1"})
		wantCode(t, err, parley.CodeIdempotencyMismatch)
		// Keys are per user.
		if a := f.create(t, f.ana, "k1", "conv:g1"); a.ID == j.ID || a.Replayed {
			t.Errorf("ana's k1: %+v", a)
		}
	})

	t.Run("rejections", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			p     parley.Principal
			r     parley.ExportRequest
			want  parley.Code
			after func(t *testing.T)
		}{
			{name: "no key", p: f.ben, r: parley.ExportRequest{Scope: "all"}, want: parley.CodeInvalidArgument},
			{name: "bad scope", p: f.ben, r: parley.ExportRequest{Key: "x", Scope: "everything"}, want: parley.CodeInvalidArgument},
			{name: "bad conv id", p: f.ben, r: parley.ExportRequest{Key: "x", Scope: "conv:a b"}, want: parley.CodeInvalidArgument},
			{name: "no such conv", p: f.ben, r: parley.ExportRequest{Key: "x", Scope: "conv:nope"}, want: parley.CodeNotMember},
			{name: "never a member", p: f.ben, r: parley.ExportRequest{Key: "x", Scope: "conv:g2"}, want: parley.CodeNotMember},
			{name: "active limit", p: f.ben, r: parley.ExportRequest{Key: "x", Scope: "all", MaxActive: 1}, want: parley.CodeRateLimited},
			// The replay answers before the limit.
			{name: "replay over the limit", p: f.ben, r: parley.ExportRequest{Key: "k1", Scope: "all", MaxActive: 1}, want: ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := f.st.CreateExport(ctx, tc.p, tc.r)
				wantCode(t, err, tc.want)
			})
		}
		// A former member may export the conversation.
		f.create(t, f.ben, "k2", "conv:g1")
	})

	t.Run("snapshot", func(t *testing.T) {
		snap, err := f.st.ExportSnapshot(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint([]parley.ExportConv{{Conv: "g1", Head: 10, Periods: parley.Periods{{From: 1, To: 9}}, Messages: 4}})
		if got := fmt.Sprint(snap); got != want {
			t.Errorf("snapshot: %s, want %s", got, want)
		}
		// ana's all-export sees both groups, cut at each head.
		a := f.create(t, f.ana, "k9", "all")
		snap, err = f.st.ExportSnapshot(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		want = fmt.Sprint([]parley.ExportConv{
			{Conv: "g1", Head: 10, Periods: parley.Periods{{From: 1, To: 10}}, Messages: 5},
			{Conv: "g2", Head: 3, Periods: parley.Periods{{From: 1, To: 3}}, Messages: 1},
		})
		if got := fmt.Sprint(snap); got != want {
			t.Errorf("ana's snapshot: %s, want %s", got, want)
		}
	})

	t.Run("events", func(t *testing.T) {
		// Writes after the snapshot change nothing: a later recall, a
		// later message.
		f.must(t)(f.st.Recall(ctx, f.ana, parley.RecallRequest{Conv: "g1", Target: 4, CMID: "r4"}))
		f.send(t, f.ana, "g1", "m12")
		for _, tc := range []struct {
			after int64
			limit int
			want  string
		}{
			{0, 10, `3:message:ana:"":true 4:message:ana:"m4":false 5:message:ben:"m5":false 8:message:ana:"m8":false`},
			{0, 2, `3:message:ana:"":true 4:message:ana:"m4":false`},
			{4, 1000, `5:message:ben:"m5":false 8:message:ana:"m8":false`},
			{5, 10, `8:message:ana:"m8":false`},
			{8, 10, ``},
		} {
			evs, err := f.st.ExportEvents(ctx, j.ID, "g1", tc.after, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := describeEvents(evs); got != tc.want {
				t.Errorf("after %d limit %d: %s, want %s", tc.after, tc.limit, got, tc.want)
			}
		}
		snap, err := f.st.ExportSnapshot(ctx, j.ID)
		if err != nil || len(snap) != 1 || snap[0].Messages != 4 || snap[0].Head != 10 {
			t.Errorf("snapshot after later writes: %+v %v", snap, err)
		}
		_, err = f.st.ExportEvents(ctx, j.ID, "g2", 0, 10)
		wantCode(t, err, parley.CodeNotFound)
		_, err = f.st.ExportEvents(ctx, "nope", "g1", 0, 10)
		wantCode(t, err, parley.CodeNotFound)
		_, err = f.st.ExportEvents(ctx, j.ID, "g1", -1, 10)
		wantCode(t, err, parley.CodeInvalidArgument)
	})

	t.Run("not_found", func(t *testing.T) {
		for _, id := range []string{"", "no-such-job", "bad id!"} {
			_, err := f.st.ExportJob(ctx, id)
			wantCode(t, err, parley.CodeNotFound)
			_, err = f.st.ExportSnapshot(ctx, id)
			wantCode(t, err, parley.CodeNotFound)
			_, err = f.st.ExportShards(ctx, id)
			wantCode(t, err, parley.CodeNotFound)
			_, err = f.st.RevokeExport(ctx, id)
			wantCode(t, err, parley.CodeNotFound)
		}
	})
}

func TestExportLease(t *testing.T) {
	f := newExportFixture(t)
	ctx := context.Background()
	j := f.create(t, f.ben, "k1", "conv:g1")
	later := f.create(t, f.ana, "k1", "conv:g2")

	c := f.claim(t, "w1")
	if c.ID != j.ID || c.State != parley.ExportRunning || c.LeaseOwner != "w1" || c.Attempts != 1 || !c.LeaseUntil.After(c.CreatedAt) {
		t.Fatalf("first claim: %+v, want job %s running for w1", c, j.ID)
	}
	if err := f.st.ExtendExport(ctx, "w1", j.ID, 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"extend by another", f.st.ExtendExport(ctx, "w2", j.ID, 2, time.Minute), parley.ErrLeaseLost},
		{"extend unknown", f.st.ExtendExport(ctx, "w1", "nope", 2, time.Minute), parley.ErrExportNotFound},
		{"finish by another", f.st.FinishExport(ctx, "w2", j.ID, strings.Repeat("a", 64), 1, time.Hour), parley.ErrLeaseLost},
		{"fail by another", f.st.FailExport(ctx, "w2", j.ID, "x", 0), parley.ErrLeaseLost},
		{"record by another", f.st.RecordShard(ctx, "w2", parley.ExportShard{Job: j.ID, Conv: "g1", After: 0, Last: 3, Count: 1, SHA256: strings.Repeat("b", 64)}), parley.ErrLeaseLost},
		{"fail queued", f.st.FailExport(ctx, "w1", later.ID, "x", 0), parley.ErrLeaseLost},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}

	shard := func(i int, sum string) parley.ExportShard {
		return parley.ExportShard{Job: j.ID, Index: i, Conv: "g1", After: int64(i), Last: int64(i + 1), Count: 1, SHA256: strings.Repeat(sum, 64)}
	}
	for _, s := range []parley.ExportShard{shard(0, "a"), shard(1, "b"), shard(0, "c")} {
		if err := f.st.RecordShard(ctx, "w1", s); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, f.st.RecordShard(ctx, "w1", parley.ExportShard{Job: j.ID, Conv: "g1", Count: 0}), parley.CodeInvalidArgument)
	shards, err := f.st.ExportShards(ctx, j.ID)
	if err != nil || len(shards) != 2 || shards[0] != shard(0, "c") || shards[1] != shard(1, "b") {
		t.Errorf("shards: %+v %v", shards, err)
	}
	if got := f.job(t, j.ID); got.Done != 2 || got.Total != 2 {
		t.Errorf("progress: %d/%d, want 2/2", got.Done, got.Total)
	}

	// The worker dies: once its lease ends, another takes the job over and
	// the first one's calls are refused.
	f.h.Exec(t, `UPDATE export_jobs SET lease_until = lease_until - 120000 WHERE id = ?`, j.ID)
	if err := f.st.ExtendExport(ctx, "w1", j.ID, 2, time.Minute); !errors.Is(err, parley.ErrLeaseLost) {
		t.Errorf("extend after the lease ended: %v", err)
	}
	c = f.claim(t, "w2")
	if c.ID != j.ID || c.LeaseOwner != "w2" || c.Attempts != 2 || c.Done != 2 {
		t.Fatalf("takeover: %+v", c)
	}

	// A retryable failure queues the job until not_before.
	if err := f.st.FailExport(ctx, "w2", j.ID, strings.Repeat("é", 600), time.Hour); err != nil {
		t.Fatal(err)
	}
	got := f.job(t, j.ID)
	if got.State != parley.ExportQueued || got.LeaseOwner != "" || !got.LeaseUntil.IsZero() || got.Error != parley.ExportReason(strings.Repeat("é", 600)) ||
		got.NotBefore.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("after a retryable failure: %+v", got)
	}
	if c := f.claim(t, "w3"); c.ID != later.ID {
		t.Errorf("claim while the first waits: %s, want %s", c.ID, later.ID)
	}
	if _, ok, err := f.st.ClaimExport(ctx, "w4", time.Minute); ok || err != nil {
		t.Errorf("nothing claimable: ok %v err %v", ok, err)
	}
	f.h.Exec(t, `UPDATE export_jobs SET not_before = not_before - 7200000 WHERE id = ?`, j.ID)
	c = f.claim(t, "w4")
	if c.ID != j.ID || c.Attempts != 3 {
		t.Fatalf("claim after not_before: %+v", c)
	}

	sum := strings.Repeat("0123456789abcdef", 4)
	wantCode(t, f.st.FinishExport(ctx, "w4", j.ID, "xyz", 10, time.Hour), parley.CodeInvalidArgument)
	if err := f.st.FinishExport(ctx, "w4", j.ID, sum, 1234, time.Hour); err != nil {
		t.Fatal(err)
	}
	got = f.job(t, j.ID)
	if got.State != parley.ExportDone || got.SHA256 != sum || got.Bytes != 1234 || got.Error != "" || got.LeaseOwner != "" ||
		got.ExpiresAt.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("done: %+v", got)
	}
	if ids, err := f.st.ExpireExports(ctx); err != nil || len(ids) != 0 {
		t.Errorf("expire before the time: %v %v", ids, err)
	}
	f.h.Exec(t, `UPDATE export_jobs SET expires_at = expires_at - 7200000 WHERE id = ?`, j.ID)
	if ids, err := f.st.ExpireExports(ctx); err != nil || len(ids) != 1 || ids[0] != j.ID {
		t.Errorf("expire: %v %v", ids, err)
	}
	if got := f.job(t, j.ID); got.State != parley.ExportExpired {
		t.Errorf("state after expiry: %s", got.State)
	}
	// Expired stays expired; a running job revoked loses its lease.
	if r, err := f.st.RevokeExport(ctx, j.ID); err != nil || r.State != parley.ExportExpired {
		t.Errorf("revoke expired: %+v %v", r, err)
	}
	r, err := f.st.RevokeExport(ctx, later.ID)
	if err != nil || r.State != parley.ExportRevoked || r.LeaseOwner != "" {
		t.Errorf("revoke running: %+v %v", r, err)
	}
	if err := f.st.ExtendExport(ctx, "w3", later.ID, 1, time.Minute); !errors.Is(err, parley.ErrLeaseLost) {
		t.Errorf("extend a revoked job: %v", err)
	}
	if r2, err := f.st.RevokeExport(ctx, later.ID); err != nil || r2.State != parley.ExportRevoked {
		t.Errorf("revoke twice: %+v %v", r2, err)
	}
}

func TestExportPins(t *testing.T) {
	f := newExportFixture(t)
	ctx := context.Background()
	// cy joined g1 at 7: the job pins from 7 on.
	j := f.create(t, f.cy, "k1", "conv:g1")
	if err := f.st.SetRetention(ctx, "g1", parley.Retention{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	res, err := f.st.Purge(ctx, "g1")
	if err != nil || res.MinSeq != 7 || res.Deleted != 6 {
		t.Fatalf("purge under a pin: %+v %v, want min seq 7 and 6 deleted", res, err)
	}
	evs, err := f.st.ExportEvents(ctx, j.ID, "g1", 0, 10)
	if got := describeEvents(evs); err != nil || got != `8:message:ana:"m8":false 10:message:ana:"m10":false` {
		t.Errorf("events after the purge: %s %v", got, err)
	}

	// A rollback below the job's head fails it; one at the head would not.
	other := f.create(t, f.ana, "k1", "conv:g2")
	if _, err := f.st.Rollback(ctx, "g2", 3); err != nil {
		t.Fatal(err)
	}
	if got := f.job(t, other.ID); got.State != parley.ExportQueued {
		t.Errorf("rollback at the head: %+v", got)
	}
	f.claim(t, "w1")
	if _, err := f.st.Rollback(ctx, "g1", 8); err != nil {
		t.Fatal(err)
	}
	got := f.job(t, j.ID)
	if got.State != parley.ExportFailed || got.Error != parley.ExportRolledBack("g1", 8) || got.LeaseOwner != "" {
		t.Errorf("after rollback: %+v", got)
	}
	if err := f.st.ExtendExport(ctx, "w1", j.ID, 1, time.Minute); !errors.Is(err, parley.ErrLeaseLost) {
		t.Errorf("extend a rolled-back job: %v", err)
	}
	// A failed job pins nothing. The rollback closed ben's reopened
	// period at 9: head 9, keep the last one.
	res, err = f.st.Purge(ctx, "g1")
	if err != nil || res.MinSeq != 9 || res.Deleted != 2 {
		t.Errorf("purge without a pin: %+v %v, want min seq 9 and 2 deleted", res, err)
	}
}
