package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// exportFixture is a store with users alice and bob in group g (both
// members from seq 1).
type exportFixture struct {
	db         *postgres.DB
	alice, bob parley.Principal
	conv       string
}

func newExportFixture(t *testing.T) exportFixture {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.DSN(t), parley.Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	f := exportFixture{db: db, conv: "g",
		alice: parley.Principal{User: "alice", DeviceID: "d1"},
		bob:   parley.Principal{User: "bob", DeviceID: "d1"}}
	for _, u := range []string{"alice", "bob"} {
		if _, err := db.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			t.Fatalf("create user %s: %v", u, err)
		}
	}
	if _, err := db.CreateConversation(ctx, f.alice, parley.NewConversation{ID: f.conv, Kind: parley.KindGroup,
		Members: []string{"alice", "bob"}}); err != nil {
		t.Fatalf("create conversation: %v", err)
	}
	return f
}

func (f exportFixture) send(t testing.TB, p parley.Principal, cmid string) int64 {
	t.Helper()
	s, err := f.db.Send(context.Background(), p, parley.SendRequest{Conv: f.conv, CMID: cmid, Body: "body " + cmid})
	if err != nil {
		t.Errorf("send %s: %v", cmid, err)
		return 0
	}
	return s.Seq
}

func (f exportFixture) create(t testing.TB, p parley.Principal, key, scope string) parley.ExportJob {
	t.Helper()
	j, err := f.db.CreateExport(context.Background(), p, parley.ExportRequest{Key: key, Scope: scope})
	if err != nil {
		t.Fatalf("create export %s: %v", key, err)
	}
	return j
}

// readAll reads every event job id exports from conv, in pages of 7.
func readAll(t testing.TB, db *postgres.DB, id, conv string) []parley.Event {
	t.Helper()
	var out []parley.Event
	after := int64(0)
	for {
		evs, err := db.ExportEvents(context.Background(), id, conv, after, 7)
		if err != nil {
			t.Fatalf("export events %s after %d: %v", id, after, err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		after = evs[len(evs)-1].Seq
	}
}

func seqsOf(evs []parley.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

func snapshotHead(t testing.TB, db *postgres.DB, id, conv string) parley.ExportConv {
	t.Helper()
	snap, err := db.ExportSnapshot(context.Background(), id)
	if err != nil {
		t.Fatalf("snapshot %s: %v", id, err)
	}
	for _, c := range snap {
		if c.Conv == conv {
			return c
		}
	}
	t.Fatalf("snapshot %s has no %s: %+v", id, conv, snap)
	return parley.ExportConv{}
}

// TestExportSnapshotUnderWrites creates exports while several senders write
// into the conversation: every job exports exactly the messages at or below
// its head (no hole from a send whose seq was assigned but not committed),
// and reads the same twice.
func TestExportSnapshotUnderWrites(t *testing.T) {
	t.Parallel()
	f := newExportFixture(t)
	const senders, perSender, exports = 4, 25, 20

	var mu sync.Mutex
	var sent []int64
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := f.alice
			if s%2 == 1 {
				p = f.bob
			}
			for i := range perSender {
				if seq := f.send(t, p, fmt.Sprintf("s%d-%d", s, i)); seq > 0 {
					mu.Lock()
					sent = append(sent, seq)
					mu.Unlock()
				}
			}
		}()
	}
	type made struct {
		job   parley.ExportJob
		first []parley.Event
	}
	var jobs []made
	for i := range exports {
		j := f.create(t, f.alice, fmt.Sprintf("k%d", i), "conv:"+f.conv)
		jobs = append(jobs, made{j, readAll(t, f.db, j.ID, f.conv)})
	}
	wg.Wait()
	slices.Sort(sent)

	for _, m := range jobs {
		c := snapshotHead(t, f.db, m.job.ID, f.conv)
		var want []int64
		for _, s := range sent {
			if s <= c.Head {
				want = append(want, s)
			}
		}
		again := readAll(t, f.db, m.job.ID, f.conv)
		if got := seqsOf(again); !slices.Equal(got, want) {
			t.Errorf("job %s (head %d): exported %v, want the messages at or below the head %v", m.job.ID, c.Head, got, want)
		}
		if !slices.EqualFunc(m.first, again, func(a, b parley.Event) bool { return reflect.DeepEqual(a, b) }) {
			t.Errorf("job %s: the second read differs from the first", m.job.ID)
		}
		if c.Messages != int64(len(want)) {
			t.Errorf("job %s: snapshot Messages %d, want %d", m.job.ID, c.Messages, len(want))
		}
	}
}

// TestExportPinRacesPurge runs purges (keep the last seq only) beside
// senders and export creations: once CreateExport returned, its events never
// change, so no purge deleted below a pin it should have seen.
func TestExportPinRacesPurge(t *testing.T) {
	t.Parallel()
	f := newExportFixture(t)
	ctx := context.Background()
	if err := f.db.SetRetention(ctx, f.conv, parley.Retention{KeepLast: 1}); err != nil {
		t.Fatalf("set retention: %v", err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f.send(t, f.bob, fmt.Sprintf("b%d", i))
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := f.db.Purge(ctx, f.conv); err != nil {
				t.Errorf("purge: %v", err)
				return
			}
		}
	}()
	type made struct {
		id    string
		first []parley.Event
	}
	var jobs []made
	for i := range 15 {
		f.send(t, f.alice, fmt.Sprintf("a%d", i))
		j := f.create(t, f.alice, fmt.Sprintf("k%d", i), "all")
		jobs = append(jobs, made{j.ID, readAll(t, f.db, j.ID, f.conv)})
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, m := range jobs {
		if again := readAll(t, f.db, m.id, f.conv); !slices.Equal(seqsOf(again), seqsOf(m.first)) {
			t.Errorf("job %s: events changed after creation: %v, then %v", m.id, seqsOf(m.first), seqsOf(again))
		}
	}
}

// TestExportClaimSkipLocked lets workers claim concurrently: every job is
// claimed by exactly one of them.
func TestExportClaimSkipLocked(t *testing.T) {
	t.Parallel()
	f := newExportFixture(t)
	ctx := context.Background()
	const jobs, workers = 12, 6
	for i := range jobs {
		f.create(t, f.alice, fmt.Sprintf("k%d", i), "all")
	}
	var mu sync.Mutex
	claimed := map[string]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("w%d", w)
			for {
				j, ok, err := f.db.ClaimExport(ctx, owner, time.Minute)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				if prev, dup := claimed[j.ID]; dup {
					t.Errorf("job %s claimed by %s and %s", j.ID, prev, owner)
				}
				claimed[j.ID] = owner
				mu.Unlock()
				if j.State != parley.ExportRunning || j.LeaseOwner != owner || j.Attempts != 1 {
					t.Errorf("claimed job %+v", j)
				}
			}
		}()
	}
	wg.Wait()
	if len(claimed) != jobs {
		t.Errorf("%d jobs claimed, want %d", len(claimed), jobs)
	}
}

// TestExportConcurrentSameKey creates one key many times at once: one job,
// the others replays of it.
func TestExportConcurrentSameKey(t *testing.T) {
	t.Parallel()
	f := newExportFixture(t)
	const n = 8
	ids := make([]string, n)
	replayed := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := f.db.CreateExport(context.Background(), f.alice, parley.ExportRequest{Key: "same", Scope: "all", MaxActive: 1})
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			ids[i], replayed[i] = j.ID, j.Replayed
		}()
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if ids[i] != ids[0] {
			t.Errorf("create %d: job %s, another %s", i, ids[i], ids[0])
		}
		if !replayed[i] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d creations were not replays, want 1", fresh)
	}
}

// TestExportActiveLimitConcurrent creates with distinct keys at once under
// MaxActive 2: exactly two succeed.
func TestExportActiveLimitConcurrent(t *testing.T) {
	t.Parallel()
	f := newExportFixture(t)
	const n = 8
	var mu sync.Mutex
	okN, limited := 0, 0
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.db.CreateExport(context.Background(), f.alice, parley.ExportRequest{Key: fmt.Sprintf("k%d", i), Scope: "all", MaxActive: 2})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				okN++
			case parley.ErrorCode(err) == parley.CodeRateLimited:
				limited++
			default:
				t.Errorf("create %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if okN != 2 || limited != n-2 {
		t.Errorf("%d created and %d limited, want 2 and %d", okN, limited, n-2)
	}
}

// TestExportRecallAndRollback: a recall after the snapshot does not change
// the export; a rollback below the head fails the pinned job; a purge stops
// below a pin and goes on once the job is done.
func TestExportRecallAndRollback(t *testing.T) {
	t.Parallel()
	f := newExportFixture(t)
	ctx := context.Background()
	s1 := f.send(t, f.alice, "m1")
	f.send(t, f.alice, "m2")
	before := f.create(t, f.alice, "before", "conv:"+f.conv)
	if _, err := f.db.Recall(ctx, f.alice, parley.RecallRequest{Conv: f.conv, Target: s1, CMID: "r1"}); err != nil {
		t.Fatalf("recall: %v", err)
	}
	after := f.create(t, f.alice, "after", "conv:"+f.conv)
	for _, tc := range []struct {
		id       string
		recalled bool
		body     string
	}{{before.ID, false, "body m1"}, {after.ID, true, ""}} {
		evs := readAll(t, f.db, tc.id, f.conv)
		if len(evs) != 2 || evs[0].Recalled != tc.recalled || evs[0].Body != tc.body {
			t.Errorf("job %s: events %+v, want the first recalled=%v body %q", tc.id, evs, tc.recalled, tc.body)
		}
	}

	// Pins: keep the last seq only; both jobs pin from seq 1.
	if err := f.db.SetRetention(ctx, f.conv, parley.Retention{KeepLast: 1}); err != nil {
		t.Fatalf("set retention: %v", err)
	}
	res, err := f.db.Purge(ctx, f.conv)
	if err != nil || res.Deleted != 0 || res.MinSeq != 1 {
		t.Errorf("pinned purge: %+v, %v; want nothing deleted", res, err)
	}

	// Seqs: joins 1-2, m1 3, m2 4, recall 5; "before" has head 4, "after"
	// head 5. A rollback to 4 fails "after" only.
	rb, err := f.db.Rollback(ctx, f.conv, 4)
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	ja, _ := f.db.ExportJob(ctx, after.ID)
	jb, _ := f.db.ExportJob(ctx, before.ID)
	if ja.State != parley.ExportFailed || ja.Error != parley.ExportRolledBack(f.conv, 4) {
		t.Errorf("after rollback: job %+v, want failed", ja)
	}
	if jb.State != parley.ExportQueued {
		t.Errorf("after rollback: job %+v, want still queued", jb)
	}
	if _, err := f.db.RevokeExport(ctx, before.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	res, err = f.db.Purge(ctx, f.conv)
	if err != nil || res.MinSeq != rb.Head {
		t.Errorf("unpinned purge: %+v, %v; want min seq %d", res, err, rb.Head)
	}
	if _, err := f.db.ExportEvents(ctx, before.ID, "other", 0, 10); !errors.Is(err, parley.ErrExportNotFound) {
		t.Errorf("events of a conversation outside the snapshot: %v, want not found", err)
	}
}
