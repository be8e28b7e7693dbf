package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of the export jobs (parley.Exports, export.go of the root
// package): creation and replays, the durable snapshot, leases, progress,
// the end states, and the pins a queued or running job holds against purge
// and rollback.

// exportRows is what a rejected export request (or a call that lost its
// lease) must leave as it was: every export table, summed.
type exportRows struct {
	Jobs                                              int64
	Queued, Running, Done, Failed, Revoked, Expired   int64
	Attempts, Progress, Totals, Bytes, Leased         int64
	ErrorChars, KeyChars, ScopeChars, SHAChars        int64
	Convs, Heads, Periods, PeriodSpan                 int64
	Shards, ShardIdx, ShardEvents, ShardLast, ShardSH int64
}

func (e *env) exportRows(t *testing.T) exportRows {
	t.Helper()
	q := func(query string, args ...any) int64 { t.Helper(); return e.db.Int(t, query, args...) }
	state := func(s parley.ExportState) int64 {
		t.Helper()
		return q("SELECT count(*) FROM export_jobs WHERE state = ?", string(s))
	}
	return exportRows{
		Jobs:        q("SELECT count(*) FROM export_jobs"),
		Queued:      state(parley.ExportQueued),
		Running:     state(parley.ExportRunning),
		Done:        state(parley.ExportDone),
		Failed:      state(parley.ExportFailed),
		Revoked:     state(parley.ExportRevoked),
		Expired:     state(parley.ExportExpired),
		Attempts:    q("SELECT CAST(sum(attempts) AS BIGINT) FROM export_jobs"),
		Progress:    q("SELECT CAST(sum(done) AS BIGINT) FROM export_jobs"),
		Totals:      q("SELECT CAST(sum(total) AS BIGINT) FROM export_jobs"),
		Bytes:       q("SELECT CAST(sum(bytes) AS BIGINT) FROM export_jobs"),
		Leased:      q("SELECT count(*) FROM export_jobs WHERE lease_owner <> ''"),
		ErrorChars:  q("SELECT CAST(sum(length(error)) AS BIGINT) FROM export_jobs"),
		KeyChars:    q("SELECT CAST(sum(length(idem_key)) AS BIGINT) FROM export_jobs"),
		ScopeChars:  q("SELECT CAST(sum(length(scope)) AS BIGINT) FROM export_jobs"),
		SHAChars:    q("SELECT CAST(sum(length(sha256)) AS BIGINT) FROM export_jobs"),
		Convs:       q("SELECT count(*) FROM export_convs"),
		Heads:       q("SELECT CAST(sum(head) AS BIGINT) FROM export_convs"),
		Periods:     q("SELECT count(*) FROM export_periods"),
		PeriodSpan:  q("SELECT CAST(sum(to_seq - from_seq + 1) AS BIGINT) FROM export_periods"),
		Shards:      q("SELECT count(*) FROM export_shards"),
		ShardIdx:    q("SELECT CAST(sum(idx) AS BIGINT) FROM export_shards"),
		ShardEvents: q("SELECT CAST(sum(count) AS BIGINT) FROM export_shards"),
		ShardLast:   q("SELECT CAST(sum(last_seq - after_seq) AS BIGINT) FROM export_shards"),
		ShardSH:     q("SELECT count(DISTINCT sha256) FROM export_shards"),
	}
}

// exportUnchanged records a failure when the export tables differ from
// before.
func (e *env) exportUnchanged(t *testing.T, before exportRows) {
	t.Helper()
	if after := e.exportRows(t); after != before {
		t.Errorf("a rejected request changed the export tables:\nbefore %+v\nafter  %+v", before, after)
	}
}

// as is the principal of a user made with bystander (no login: the store
// trusts the principal it is given).
func as(user string) parley.Principal {
	return parley.Principal{User: user, Role: parley.RoleUser, DeviceID: "d1", InstallID: "i1"}
}

// users creates accounts without passwords and returns their principals.
func (e *env) users(t *testing.T, ids ...string) []parley.Principal {
	t.Helper()
	out := make([]parley.Principal, len(ids))
	for i, id := range ids {
		e.bystander(t, id)
		out[i] = as(id)
	}
	return out
}

// newExport creates a job that must be new (not a replay). It then waits a
// few milliseconds: created_at has millisecond precision on SQLite and
// claims go oldest first, so jobs made one after another claim in order.
func (e *env) newExport(t *testing.T, p parley.Principal, key, scope string) parley.ExportJob {
	t.Helper()
	start := time.Now()
	j, err := e.st.CreateExport(ctx(t), p, parley.ExportRequest{Key: key, Scope: scope})
	ok(t, err, fmt.Sprintf("create export %s/%s %s", p.User, key, scope))
	end := time.Now()
	if !validNewID(j.ID) || j.Replayed || j.User != p.User || j.Key != key || j.Scope != scope || j.State != parley.ExportQueued {
		t.Fatalf("create export %s/%s %s: got %s; want a new queued job with a NewID id", p.User, key, scope, jobLine(j))
	}
	if !within(j.CreatedAt, start, end) || !within(j.NotBefore, start, end) {
		t.Errorf("new job %s: created at %v, not before %v; want the database clock near %v", j.ID, j.CreatedAt, j.NotBefore, start)
	}
	time.Sleep(3 * time.Millisecond)
	return j
}

// job reads a job that must exist.
func (e *env) job(t *testing.T, id string) parley.ExportJob {
	t.Helper()
	j, err := e.st.ExportJob(ctx(t), id)
	ok(t, err, "export job "+id)
	return j
}

// wantState checks a job's state (and, unless "-", its Error).
func (e *env) wantState(t *testing.T, id string, state parley.ExportState, errText string) parley.ExportJob {
	t.Helper()
	j := e.job(t, id)
	if j.State != state || (errText != "-" && j.Error != errText) {
		t.Errorf("job %s: state %s, error %q; want %s, %q", id, j.State, j.Error, state, errText)
	}
	return j
}

// jobLine renders a job without its times, which are compared apart.
func jobLine(j parley.ExportJob) string {
	return fmt.Sprintf("id %s user %s key %q scope %q state %s error %q done %d/%d sha %q bytes %d files %q %d attempts %d replayed %v lease %q",
		j.ID, j.User, j.Key, j.Scope, j.State, j.Error, j.Done, j.Total, j.SHA256, j.Bytes, j.FilesSHA256, j.FilesBytes, j.Attempts, j.Replayed, j.LeaseOwner)
}

// sameJob compares jobs field by field, times by Equal, Replayed ignored.
func sameJob(a, b parley.ExportJob) bool {
	a.Replayed, b.Replayed = false, false
	return jobLine(a) == jobLine(b) && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.NotBefore.Equal(b.NotBefore)
}

func wantSameJob(t *testing.T, what string, got, want parley.ExportJob) {
	t.Helper()
	if !sameJob(got, want) {
		t.Errorf("%s:\ngot  %s (created %v, expires %v, lease until %v, not before %v)\nwant %s (created %v, expires %v, lease until %v, not before %v)",
			what, jobLine(got), got.CreatedAt, got.ExpiresAt, got.LeaseUntil, got.NotBefore,
			jobLine(want), want.CreatedAt, want.ExpiresAt, want.LeaseUntil, want.NotBefore)
	}
}

// claim claims one job with st, which must be want ("" for none).
func (e *env) claim(t *testing.T, st parley.Store, owner string, lease time.Duration, want string) parley.ExportJob {
	t.Helper()
	start := time.Now()
	j, got, err := st.ClaimExport(ctx(t), owner, lease)
	ok(t, err, "claim by "+owner)
	end := time.Now()
	switch {
	case want == "" && got:
		t.Fatalf("claim by %s: got job %s, want nothing claimable", owner, jobLine(j))
	case want == "":
		return j
	case !got:
		t.Fatalf("claim by %s: nothing claimed, want job %s", owner, want)
	case j.ID != want:
		t.Fatalf("claim by %s: got job %s, want %s", owner, j.ID, want)
	}
	if j.State != parley.ExportRunning || j.LeaseOwner != owner {
		t.Errorf("claimed job %s", jobLine(j))
	}
	if !within(j.LeaseUntil, start.Add(lease), end.Add(lease)) {
		t.Errorf("claimed job %s: lease until %v, want the database clock plus %v near %v", j.ID, j.LeaseUntil, lease, start.Add(lease))
	}
	wantSameJob(t, "the claimed job read back", e.job(t, j.ID), j)
	return j
}

// wantLeaseLost checks that err is exactly parley.ErrLeaseLost.
func wantLeaseLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, parley.ErrLeaseLost) {
		t.Errorf("%s: got %v (code %s), want parley.ErrLeaseLost", what, err, parley.ErrorCode(err))
	}
}

// shaOf is the hex sha256 of s.
func shaOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// ownerCalls are the owner-checked calls on job id, each with arguments
// that would succeed for the lease holder.
func ownerCalls(t *testing.T, st parley.Store, owner, id, conv string) []struct {
	name string
	do   func() error
} {
	return []struct {
		name string
		do   func() error
	}{
		{"extend", func() error { return st.ExtendExport(ctx(t), owner, id, 5, time.Hour) }},
		{"record_shard", func() error {
			return st.RecordShard(ctx(t), owner, parley.ExportShard{Job: id, Index: 0, Conv: conv, After: 0, Last: 9, Count: 3, SHA256: shaOf("lost")})
		}},
		{"record_files", func() error { return st.RecordExportFiles(ctx(t), owner, id, shaOf("files"), 100) }},
		{"finish", func() error { return st.FinishExport(ctx(t), owner, id, shaOf("artifact"), 100, time.Hour) }},
		{"fail_retry", func() error { return st.FailExport(ctx(t), owner, id, "late", time.Minute) }},
		{"fail", func() error { return st.FailExport(ctx(t), owner, id, "late", 0) }},
	}
}

// wantOwnerCallsLost checks that every owner-checked call by owner on id
// answers ErrLeaseLost and changes nothing.
func (e *env) wantOwnerCallsLost(t *testing.T, owner, id, conv string) {
	t.Helper()
	for _, c := range ownerCalls(t, e.st, owner, id, conv) {
		t.Run(c.name+"_lease_lost", func(t *testing.T) {
			before, job := e.exportRows(t), e.job(t, id)
			wantLeaseLost(t, c.name+" by "+owner, c.do())
			e.exportUnchanged(t, before)
			wantSameJob(t, "the job after "+c.name+" by "+owner, e.job(t, id), job)
		})
	}
}

// eventLine renders every field of an exported event.
func eventLine(ev parley.Event) string {
	return fmt.Sprintf("%s/%d mid %q %s %s/%s %q target %d user %q recalled %v at %d",
		ev.Conv, ev.Seq, ev.MID, ev.Kind, ev.Sender, ev.Device, ev.Body, ev.Target, ev.User, ev.Recalled, ev.At.UnixNano())
}

func eventLines(evs []parley.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = eventLine(ev)
	}
	return out
}

func wantEventLines(t *testing.T, what string, got, want []parley.Event) {
	t.Helper()
	g, w := eventLines(got), eventLines(want)
	if slices.Equal(g, w) {
		return
	}
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			t.Errorf("%s: %d events, want %d; first difference at %d:\ngot  %s\nwant %s", what, len(g), len(w), i, g[i], w[i])
			return
		}
	}
	t.Errorf("%s: %d events, want %d (the shorter is a prefix of the longer)", what, len(g), len(w))
}

// messagesOf keeps the message events.
func messagesOf(evs []parley.Event) []parley.Event {
	var out []parley.Event
	for _, ev := range evs {
		if ev.Kind == parley.EventMessage {
			out = append(out, ev)
		}
	}
	return out
}

// exportEvents reads every event job id exports from conv, limit at a
// time, checking each page.
func exportEvents(t *testing.T, st parley.Store, id, conv string, limit int) []parley.Event {
	t.Helper()
	var out []parley.Event
	var after int64
	for range 10000 {
		evs, err := st.ExportEvents(ctx(t), id, conv, after, limit)
		ok(t, err, fmt.Sprintf("export events of %s in %s after %d", id, conv, after))
		if len(evs) > min(limit, parley.MaxPage) {
			t.Fatalf("export events of %s in %s after %d: %d events for limit %d", id, conv, after, len(evs), limit)
		}
		if len(evs) == 0 {
			return out
		}
		for _, ev := range evs {
			if ev.Seq <= after || ev.Conv != conv || ev.Kind != parley.EventMessage {
				t.Fatalf("export events of %s in %s after %d: got %s, want messages of %s ascending", id, conv, after, eventLine(ev), conv)
			}
			after = ev.Seq
		}
		out = append(out, evs...)
	}
	t.Fatalf("export events of %s in %s: no end after 10000 pages", id, conv)
	return nil
}

// exportSnapshot reads a job's snapshot.
func exportSnapshot(t *testing.T, st parley.Store, id string) []parley.ExportConv {
	t.Helper()
	s, err := st.ExportSnapshot(ctx(t), id)
	ok(t, err, "export snapshot of "+id)
	return s
}

func convLine(c parley.ExportConv) string {
	return fmt.Sprintf("%s head %d periods %v messages %d", c.Conv, c.Head, c.Periods, c.Messages)
}

func wantSnapshot(t *testing.T, what string, got []parley.ExportConv, want ...parley.ExportConv) {
	t.Helper()
	g, w := make([]string, len(got)), make([]string, len(want))
	for i, c := range got {
		g[i] = convLine(c)
	}
	for i, c := range want {
		w[i] = convLine(c)
	}
	if !slices.Equal(g, w) {
		t.Errorf("%s:\ngot  %s\nwant %s", what, strings.Join(g, " | "), strings.Join(w, " | "))
	}
}

// exportDump is everything a job's snapshot exports, rendered.
func exportDump(t *testing.T, st parley.Store, id string) []string {
	t.Helper()
	var out []string
	for _, c := range exportSnapshot(t, st, id) {
		out = append(out, convLine(c))
		out = append(out, eventLines(exportEvents(t, st, id, c.Conv, parley.MaxPage))...)
	}
	return out
}

func wantDump(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s: %d lines, want %d; first difference at %d:\ngot  %s\nwant %s", what, len(got), len(want), i, got[i], want[i])
			return
		}
	}
	t.Errorf("%s: %d lines, want %d (the shorter is a prefix of the longer)", what, len(got), len(want))
}

// testExportCreateReplay: CreateExport makes a queued job with a NewID id
// for the caller; the same key and scope replay it (Replayed, same job, on
// another store too), the same key with another scope is
// IDEMPOTENCY_MISMATCH before any scope check, keys are per user; a
// malformed key or scope is INVALID_ARGUMENT before the key is looked up;
// no rejected request stores anything; concurrent requests with one key
// make one job.
func testExportCreateReplay(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben")
	ana, ben := us[0], us[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")

	start := time.Now()
	j1, err := e.st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: "k1", Scope: parley.ExportScopeAll, MaxActive: parley.DefaultExportActive})
	ok(t, err, "create export")
	end := time.Now()
	want := parley.ExportJob{ID: j1.ID, User: "ana", Key: "k1", Scope: "all", State: parley.ExportQueued,
		CreatedAt: j1.CreatedAt, NotBefore: j1.NotBefore}
	wantSameJob(t, "new job", j1, want)
	if j1.Replayed || !validNewID(j1.ID) {
		t.Errorf("new job: replayed %v, id %q; want false and a NewID id", j1.Replayed, j1.ID)
	}
	if !within(j1.CreatedAt, start, end) || !within(j1.NotBefore, start, end) {
		t.Errorf("new job: created at %v, not before %v; want the database clock near %v", j1.CreatedAt, j1.NotBefore, start)
	}
	if !j1.ExpiresAt.IsZero() || !j1.LeaseUntil.IsZero() {
		t.Errorf("new job: expires at %v, lease until %v; want both zero", j1.ExpiresAt, j1.LeaseUntil)
	}
	wantSameJob(t, "ExportJob of the new job", e.job(t, j1.ID), want)
	wantSnapshot(t, "snapshot of a conversation without messages", exportSnapshot(t, e.st, j1.ID),
		parley.ExportConv{Conv: c, Head: 2, Periods: parley.Periods{{From: 1, To: 2}}})
	if n := e.db.Int(t, "SELECT count(*) FROM export_jobs WHERE user_id = ? AND idem_key = ?", "ana", "k1"); n != 1 {
		t.Errorf("%d rows for ana's key k1, want 1", n)
	}

	t.Run("replay", func(t *testing.T) {
		before, conv := e.exportRows(t), e.snapshot(t, c)
		for i, st := range []parley.Store{e.st, e.db.Open(t)} {
			// The limit is not consulted for a replay (1 active job, limit 1).
			r, err := st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: "k1", Scope: "all", MaxActive: 1})
			if wantCode(t, err, "") {
				wantSameJob(t, fmt.Sprintf("replay %d", i), r, want)
				if !r.Replayed {
					t.Errorf("replay %d: Replayed false", i)
				}
			}
		}
		e.exportUnchanged(t, before)
		e.unchanged(t, c, conv)
	})

	mismatch := parley.CheckExportReplay("all", "conv:"+c)
	rejects := []struct {
		name string
		p    parley.Principal
		r    parley.ExportRequest
		want parley.Code
	}{
		{"same_key_other_scope", ana, parley.ExportRequest{Key: "k1", Scope: "conv:" + c}, parley.ErrorCode(mismatch)},
		{"same_key_unknown_conv", ana, parley.ExportRequest{Key: "k1", Scope: "conv:c-nope"}, parley.CodeIdempotencyMismatch},
		{"same_key_other_scope_over_limit", ana, parley.ExportRequest{Key: "k1", Scope: "conv:" + c, MaxActive: 1}, parley.CodeIdempotencyMismatch},
		{"empty_key", ana, parley.ExportRequest{Scope: "all"}, parley.CodeInvalidArgument},
		{"empty_key_unknown_conv", ana, parley.ExportRequest{Scope: "conv:c-nope"}, parley.CodeInvalidArgument},
		{"key_65_chars", ana, parley.ExportRequest{Key: strings.Repeat("é", parley.MaxCMIDChars+1), Scope: "all"}, parley.CodeInvalidArgument},
		{"key_nul", ana, parley.ExportRequest{Key: "k\x001", Scope: "all"}, parley.CodeInvalidArgument},
		{"key_invalid_utf8", ana, parley.ExportRequest{Key: "k\xff", Scope: "all"}, parley.CodeInvalidArgument},
		{"empty_scope", ana, parley.ExportRequest{Key: "k2"}, parley.CodeInvalidArgument},
		{"scope_upper_case", ana, parley.ExportRequest{Key: "k2", Scope: "ALL"}, parley.CodeInvalidArgument},
		{"scope_trailing_space", ana, parley.ExportRequest{Key: "k2", Scope: "all "}, parley.CodeInvalidArgument},
		{"scope_unknown", ana, parley.ExportRequest{Key: "k2", Scope: "mine"}, parley.CodeInvalidArgument},
		{"scope_conv_without_id", ana, parley.ExportRequest{Key: "k2", Scope: "conv:"}, parley.CodeInvalidArgument},
		{"scope_conv_no_colon", ana, parley.ExportRequest{Key: "k2", Scope: "conv" + c}, parley.CodeInvalidArgument},
		{"scope_malformed_conv", ana, parley.ExportRequest{Key: "k2", Scope: "conv:c ab"}, parley.CodeInvalidArgument},
		{"scope_conv_too_long", ana, parley.ExportRequest{Key: "k2", Scope: "conv:" + strings.Repeat("c", 65)}, parley.CodeInvalidArgument},
		// Validation comes before the key lookup.
		{"known_key_bad_scope", ana, parley.ExportRequest{Key: "k1", Scope: "everything"}, parley.CodeInvalidArgument},
	}
	for _, tc := range rejects {
		t.Run(tc.name, func(t *testing.T) {
			before, conv := e.exportRows(t), e.snapshot(t, c)
			_, err := e.st.CreateExport(ctx(t), tc.p, tc.r)
			wantCode(t, err, tc.want)
			e.exportUnchanged(t, before)
			e.unchanged(t, c, conv)
		})
	}
	wantSameJob(t, "the job after the rejected requests", e.job(t, j1.ID), want)

	t.Run("cancelled", func(t *testing.T) {
		dead, cancel := context.WithCancel(ctx(t))
		cancel()
		before := e.exportRows(t)
		_, err := e.st.CreateExport(dead, ana, parley.ExportRequest{Key: "k-dead", Scope: "all"})
		wantCode(t, err, parley.CodeUnavailable)
		_, _, err = e.st.ClaimExport(dead, "w1", time.Hour)
		wantCode(t, err, parley.CodeUnavailable)
		e.exportUnchanged(t, before)
	})

	t.Run("keys_per_user", func(t *testing.T) {
		jb := e.newExport(t, ben, "k1", "all")
		if jb.ID == j1.ID || jb.User != "ben" {
			t.Errorf("ben's job with ana's key: %s; want a job of ben's own", jobLine(jb))
		}
		if r, err := e.st.CreateExport(ctx(t), ben, parley.ExportRequest{Key: "k1", Scope: "all"}); wantCode(t, err, "") && (r.ID != jb.ID || !r.Replayed) {
			t.Errorf("ben's replay: %s, want a replay of %s", jobLine(r), jb.ID)
		}
		wantSameJob(t, "ana's job after ben's", e.job(t, j1.ID), want)
	})

	t.Run("key_bounds", func(t *testing.T) {
		key := strings.Repeat("é", parley.MaxCMIDChars) // 64 characters, 128 bytes
		j := e.newExport(t, ana, key, "conv:"+c)
		r, err := e.st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: key, Scope: "conv:" + c})
		if wantCode(t, err, "") && (r.ID != j.ID || !r.Replayed || r.Key != key) {
			t.Errorf("replay of a 64-character key: %s, want a replay of %s", jobLine(r), j.ID)
		}
		// Keys are compared exactly.
		other := e.newExport(t, ana, strings.Repeat("é", parley.MaxCMIDChars-1)+"e", "conv:"+c)
		if other.ID == j.ID {
			t.Errorf("a key one character different replayed job %s", j.ID)
		}
	})

	t.Run("concurrent_same_key", func(t *testing.T) {
		const n = 8
		stores := make([]parley.Store, n)
		for i := range stores {
			stores[i] = e.db.Open(t)
		}
		jobs := make([]parley.ExportJob, n)
		errs := make([]error, n)
		startc := make(chan struct{})
		var wg sync.WaitGroup
		for i, st := range stores {
			wg.Go(func() {
				<-startc
				jobs[i], errs[i] = st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: "k-race", Scope: "all"})
			})
		}
		close(startc)
		wg.Wait()
		fresh, id := 0, ""
		for i := range n {
			if !wantCode(t, errs[i], "") {
				continue
			}
			if !jobs[i].Replayed {
				fresh++
			}
			if id == "" {
				id = jobs[i].ID
			}
			if jobs[i].ID != id {
				t.Errorf("create %d: job %s, others got %s", i, jobs[i].ID, id)
			}
		}
		if fresh != 1 {
			t.Errorf("%d creations answered Replayed false, want exactly 1", fresh)
		}
		if k := e.db.Int(t, "SELECT count(*) FROM export_jobs WHERE user_id = ? AND idem_key = ?", "ana", "k-race"); k != 1 {
			t.Errorf("%d rows for the key, want 1", k)
		}
	})
}

// testExportScopeNotMember: a conv:<id> scope of a conversation that does
// not exist and of one the caller never had a period in answer the same
// NOT_MEMBER (an admin too), before the active limit, and store nothing; a
// former member may export the conversation, and the snapshot holds only
// it.
func testExportScopeNotMember(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := us[0], us[1], us[2]
	_, err := e.st.CreateUser(ctx(t), parley.NewUser{ID: "root", Role: parley.RoleAdmin})
	ok(t, err, "create admin")
	root := parley.Principal{User: "root", Role: parley.RoleAdmin, DeviceID: "d1", InstallID: "i1"}
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.group(t, ana, "c-x")
	e.group(t, ben, "c-ben")
	e.send(t, ana, c, "k3", "m3")
	if _, err := e.st.RemoveMember(ctx(t), ben, c, "ben"); err != nil { // 4: ben leaves
		t.Fatal(err)
	}
	e.send(t, ana, c, "k5", "m5")
	// cy's one active job makes the limit of 1 reached.
	e.newExport(t, cy, "k-all", "all")

	var msgs []string
	for _, tc := range []struct {
		name string
		p    parley.Principal
		conv string
		max  int
	}{
		{"unknown_conv", cy, "c-nope", 0},
		{"never_a_member", cy, c, 0},
		{"unknown_conv_over_limit", cy, "c-nope", 1},
		{"never_a_member_over_limit", cy, c, 1},
		{"other_members_conv", ben, "c-x", 0},
		{"admin_never_a_member", root, c, 0},
		{"admin_unknown_conv", root, "c-nope", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, conv := e.exportRows(t), e.snapshot(t, tc.conv)
			_, err := e.st.CreateExport(ctx(t), tc.p, parley.ExportRequest{Key: "k-" + tc.name, Scope: "conv:" + tc.conv, MaxActive: tc.max})
			wantCode(t, err, parley.CodeNotMember)
			msgs = append(msgs, parley.ErrorMessage(err))
			e.exportUnchanged(t, before)
			e.unchanged(t, tc.conv, conv)
		})
	}
	if len(slices.Compact(slices.Clone(msgs))) != 1 {
		t.Errorf("NOT_MEMBER messages differ, which tells a missing conversation from a foreign one: %q", msgs)
	}

	t.Run("former_member", func(t *testing.T) {
		j := e.newExport(t, ben, "k-ab", "conv:"+c)
		wantSnapshot(t, "a former member's snapshot of one conversation", exportSnapshot(t, e.st, j.ID),
			parley.ExportConv{Conv: c, Head: 5, Periods: parley.Periods{{From: 1, To: 4}}, Messages: 1})
		wantEvents(t, "a former member's export", exportEvents(t, e.st, j.ID, c, 10), `3 message ana/d1 "m3"`)
		// ben's "all" holds both of his conversations.
		all := e.newExport(t, ben, "k-everything", "all")
		wantSnapshot(t, "a former member's snapshot of all", exportSnapshot(t, e.st, all.ID),
			parley.ExportConv{Conv: c, Head: 5, Periods: parley.Periods{{From: 1, To: 4}}, Messages: 1},
			parley.ExportConv{Conv: "c-ben", Head: 1, Periods: parley.Periods{{From: 1, To: 1}}})
	})
}

// testExportActiveLimit: with MaxActive 2 a third queued or running job is
// RATE_LIMITED and stores nothing, while a replay still answers; a job that
// is done, failed or revoked frees its place, one queued again for a retry
// does not; the limit is per user, MaxActive 0 is no limit, and
// concurrent creations do not exceed it.
func testExportActiveLimit(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := us[0], us[1], us[2]
	const c = "c-ab"
	e.group(t, ana, c, "ben", "cy")
	create := func(t *testing.T, p parley.Principal, key string, max int) (parley.ExportJob, error) {
		t.Helper()
		j, err := e.st.CreateExport(ctx(t), p, parley.ExportRequest{Key: key, Scope: "all", MaxActive: max})
		time.Sleep(3 * time.Millisecond) // claims go oldest first (newExport)
		return j, err
	}
	accepted := func(t *testing.T, p parley.Principal, key string, max int) parley.ExportJob {
		t.Helper()
		j, err := create(t, p, key, max)
		ok(t, err, "create "+key)
		if j.Replayed || j.State != parley.ExportQueued {
			t.Fatalf("create %s: %s, want a new queued job", key, jobLine(j))
		}
		return j
	}
	limited := func(t *testing.T, p parley.Principal, key string) {
		t.Helper()
		before, conv := e.exportRows(t), e.snapshot(t, c)
		_, err := create(t, p, key, 2)
		wantCode(t, err, parley.CodeRateLimited)
		e.exportUnchanged(t, before)
		e.unchanged(t, c, conv)
	}

	j1 := accepted(t, ana, "k1", 2)
	j2 := accepted(t, ana, "k2", 2)
	limited(t, ana, "k3")
	if r, err := create(t, ana, "k1", 2); wantCode(t, err, "") && (r.ID != j1.ID || !r.Replayed) {
		t.Errorf("replay at the limit: %s, want a replay of %s", jobLine(r), j1.ID)
	}
	if _, err := e.st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: "k2", Scope: "conv:" + c, MaxActive: 2}); !wantCode(t, err, parley.CodeIdempotencyMismatch) {
		t.Errorf("a mismatch at the limit must be told as a mismatch")
	}

	e.claim(t, e.st, "w1", time.Hour, j1.ID)
	limited(t, ana, "k3") // running counts
	ok(t, e.st.FinishExport(ctx(t), "w1", j1.ID, shaOf("j1"), 10, time.Hour), "finish j1")
	e.touch(t, ana, c)              // so k3 is not a reuse of j1's artifact
	j3 := accepted(t, ana, "k3", 2) // done frees a place

	e.claim(t, e.st, "w1", time.Hour, j2.ID)
	ok(t, e.st.FailExport(ctx(t), "w1", j2.ID, "disk full", time.Hour), "fail j2 for a retry")
	e.wantState(t, j2.ID, parley.ExportQueued, "disk full")
	limited(t, ana, "k4") // queued for a retry counts

	e.claim(t, e.st, "w1", time.Hour, j3.ID)
	ok(t, e.st.FailExport(ctx(t), "w1", j3.ID, "corrupt", 0), "fail j3")
	j4 := accepted(t, ana, "k4", 2) // failed frees a place
	limited(t, ana, "k5")

	if r, err := e.st.RevokeExport(ctx(t), j2.ID); wantCode(t, err, "") && r.State != parley.ExportRevoked {
		t.Errorf("revoke j2: %s", jobLine(r))
	}
	accepted(t, ana, "k5", 2) // revoked frees a place
	limited(t, ana, "k6")
	accepted(t, ben, "k6", 2) // per user
	accepted(t, ana, "k6", 0) // no limit
	accepted(t, ana, "k7", -1)
	if n := e.db.Int(t, "SELECT count(*) FROM export_jobs WHERE user_id = ? AND state IN ('queued', 'running')", "ana"); n != 4 {
		t.Errorf("ana has %d active jobs, want 4", n)
	}
	e.wantState(t, j4.ID, parley.ExportQueued, "")

	t.Run("concurrent", func(t *testing.T) {
		const n = 8
		stores := make([]parley.Store, n)
		for i := range stores {
			stores[i] = e.db.Open(t)
		}
		errs := make([]error, n)
		startc := make(chan struct{})
		var wg sync.WaitGroup
		for i, st := range stores {
			wg.Go(func() {
				<-startc
				_, errs[i] = st.CreateExport(ctx(t), cy, parley.ExportRequest{Key: fmt.Sprintf("race-%d", i), Scope: "all", MaxActive: 2})
			})
		}
		close(startc)
		wg.Wait()
		created := 0
		for i, err := range errs {
			switch parley.ErrorCode(err) {
			case "":
				created++
			case parley.CodeRateLimited:
			default:
				t.Errorf("create %d: %v (code %s), want success or RATE_LIMITED", i, err, parley.ErrorCode(err))
			}
		}
		if rows := e.db.Int(t, "SELECT count(*) FROM export_jobs WHERE user_id = ?", "cy"); created != 2 || rows != 2 {
			t.Errorf("%d concurrent creations succeeded and cy has %d jobs; want 2 and 2 (MaxActive)", created, rows)
		}
	})
}

// testExportSnapshotVisibility (docs/design.md#exports): ana joins c-team
// after 50 events, so her export of it starts at her join event; she
// leaves c-big, so it ends at her leave event; c-dual she left and rejoined
// (two periods); c-private she was never in. The export holds the message
// events in her periods up to the head, ascending, with the recalls
// committed up to the head; sends, recalls and membership changes after
// the snapshot change nothing.
func testExportSnapshotVisibility(t *testing.T, e *env) {
	us := e.users(t, "ana", "bo", "zed", "dan")
	ana, bo := us[0], us[1]

	// c-team: 1 bo joins, 2..50 bo's messages, 51 ana joins, 52..151 bo,
	// 152..154 three sends, 155 the recall of 152, 156..305 bo.
	e.group(t, bo, "c-team")
	e.fill(t, bo, "c-team", 49)
	if ch, err := e.st.AddMember(ctx(t), bo, "c-team", "ana"); err != nil || ch.Seq != 51 {
		t.Fatalf("add ana to c-team: %+v %v", ch, err)
	}
	e.fill(t, bo, "c-team", 100)
	e.send(t, ana, "c-team", "k-early", "recalled before the export") // 152
	e.send(t, ana, "c-team", "k-late", "recalled after the export")   // 153
	e.send(t, bo, "c-team", "k-plain", "plain")                       // 154
	if r := e.recall(t, ana, "c-team", 152, "r-early"); r.Seq != 155 {
		t.Fatalf("recall of 152 at %d, want 155", r.Seq)
	}
	e.fill(t, bo, "c-team", 150)

	// c-big: 1 ana joins, 2 bo joins, 3..102 ana's messages, 103 ana
	// leaves, 104..113 bo's messages.
	e.group(t, ana, "c-big", "bo")
	e.fill(t, ana, "c-big", 100)
	if ch, err := e.st.RemoveMember(ctx(t), ana, "c-big", "ana"); err != nil || ch.Seq != 103 {
		t.Fatalf("ana leaves c-big: %+v %v", ch, err)
	}
	e.fill(t, bo, "c-big", 10)

	// c-dual: 1 bo, 2 ana (initial members are in from seq 1), 3..12, 13
	// ana removed, 14..18, 19 ana added back, 20..24.
	e.group(t, bo, "c-dual", "ana")
	e.fill(t, bo, "c-dual", 10)
	if _, err := e.st.RemoveMember(ctx(t), bo, "c-dual", "ana"); err != nil {
		t.Fatal(err)
	}
	e.fill(t, bo, "c-dual", 5)
	if _, err := e.st.AddMember(ctx(t), bo, "c-dual", "ana"); err != nil {
		t.Fatal(err)
	}
	e.fill(t, bo, "c-dual", 5)

	// c-private: bo alone.
	e.group(t, bo, "c-private")
	e.fill(t, bo, "c-private", 20)

	// What ana can read at the moment of the snapshot.
	convs := []string{"c-big", "c-dual", "c-team"} // conversation id order
	visible := map[string][]parley.Event{}
	for _, c := range convs {
		visible[c] = messagesOf(e.syncAll(t, ana, c, 0))
	}
	j := e.newExport(t, ana, "k-all", "all")
	jt := e.newExport(t, ana, "k-team", "conv:c-team")

	wantSnap := []parley.ExportConv{
		{Conv: "c-big", Head: 113, Periods: parley.Periods{{From: 1, To: 103}}, Messages: 100},
		{Conv: "c-dual", Head: 24, Periods: parley.Periods{{From: 1, To: 13}, {From: 19, To: 24}}, Messages: 15},
		{Conv: "c-team", Head: 305, Periods: parley.Periods{{From: 51, To: 305}}, Messages: 103 + 150},
	}
	check := func(t *testing.T, when string) {
		t.Helper()
		wantSnapshot(t, "snapshot "+when, exportSnapshot(t, e.st, j.ID), wantSnap...)
		wantSnapshot(t, "conv:c-team snapshot "+when, exportSnapshot(t, e.st, jt.ID), wantSnap[2])
		for _, c := range convs {
			wantEventLines(t, c+" exported "+when+", as ana could read it at the snapshot",
				exportEvents(t, e.st, j.ID, c, parley.MaxPage), visible[c])
		}
		wantEventLines(t, "c-team exported by the conv:c-team job "+when,
			exportEvents(t, e.st, jt.ID, "c-team", 1000), visible["c-team"])
	}

	t.Run("at_the_snapshot", func(t *testing.T) {
		check(t, "at creation")
		team := exportEvents(t, e.st, j.ID, "c-team", parley.MaxPage)
		if got, want := seqs(team), append(span(52, 154), span(156, 305)...); !slices.Equal(got, want) {
			t.Errorf("c-team seqs %v, want 52..154 and 156..305", got)
		}
		if got, want := seqs(exportEvents(t, e.st, j.ID, "c-big", 7)), span(3, 102); !slices.Equal(got, want) {
			t.Errorf("c-big seqs %v, want 3..102", got)
		}
		if got, want := seqs(exportEvents(t, e.st, j.ID, "c-dual", 3)), append(span(3, 12), span(20, 24)...); !slices.Equal(got, want) {
			t.Errorf("c-dual seqs %v, want 3..12 and 20..24", got)
		}
		for _, ev := range team {
			switch ev.Seq {
			case 152:
				if !ev.Recalled || ev.Body != "" || ev.Sender != "ana" {
					t.Errorf("message recalled before the snapshot: %s, want recalled with an empty body", eventLine(ev))
				}
			case 153:
				if ev.Recalled || ev.Body != "recalled after the export" || ev.Sender != "ana" || ev.Device != "d1" {
					t.Errorf("message 153: %s", eventLine(ev))
				}
			}
		}
	})

	t.Run("paging", func(t *testing.T) {
		for _, tc := range []struct {
			conv  string
			after int64
			limit int
			want  []int64
		}{
			{"c-team", 0, 3, span(52, 54)},             // from the join event on
			{"c-team", 51, 2, span(52, 53)},            // the join event itself is no line
			{"c-team", 153, 3, []int64{154, 156, 157}}, // the recall event is no line
			{"c-team", 300, 10, span(301, 305)},
			{"c-team", 305, 10, nil}, // at the head
			{"c-team", 5000, 10, nil},
			{"c-team", 0, 1000, append(span(52, 154), span(156, 305)...)[:parley.MaxPage]}, // capped at MaxPage
			{"c-big", 100, 10, span(101, 102)},                                             // ends at the leave
			{"c-big", 102, 10, nil},
			{"c-dual", 11, 3, []int64{12, 20, 21}}, // skips the gap between the periods
			{"c-dual", 13, 10, span(20, 24)},
		} {
			evs, err := e.st.ExportEvents(ctx(t), j.ID, tc.conv, tc.after, tc.limit)
			if wantCode(t, err, "") && !slices.Equal(seqs(evs), tc.want) {
				t.Errorf("%s after %d limit %d: seqs %v, want %v", tc.conv, tc.after, tc.limit, seqs(evs), tc.want)
			}
		}
	})

	t.Run("lookups", func(t *testing.T) {
		before := e.exportRows(t)
		for _, tc := range []struct {
			name, id, conv string
			want           parley.Code
		}{
			{"never_a_member", j.ID, "c-private", parley.CodeNotFound},
			{"unknown_conv", j.ID, "c-nope", parley.CodeNotFound},
			{"outside_conv_scope", jt.ID, "c-big", parley.CodeNotFound},
			{"unknown_job", parley.NewID(), "c-team", parley.CodeNotFound},
			{"malformed_job", "job 1", "c-team", parley.ErrorCode(parley.CheckExportID("job 1"))},
			{"malformed_conv", j.ID, "c team", parley.CodeInvalidArgument},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := e.st.ExportEvents(ctx(t), tc.id, tc.conv, 0, 10)
				wantCode(t, err, tc.want)
			})
		}
		_, err := e.st.ExportSnapshot(ctx(t), parley.NewID())
		wantCode(t, err, parley.CodeNotFound)
		e.exportUnchanged(t, before)
	})

	t.Run("empty_snapshot", func(t *testing.T) {
		// dan is in no conversation: "all" is accepted and exports nothing.
		d := e.newExport(t, as("dan"), "k", "all")
		if s := exportSnapshot(t, e.st, d.ID); len(s) != 0 || parley.ExportShardTotal(s) != 0 {
			t.Errorf("dan's snapshot: %+v, want empty", s)
		}
	})

	// Later writes change nothing: a recall, sends, members added and
	// removed, ana removed from c-team and added to c-private and back to
	// c-big, a new conversation.
	if r := e.recall(t, ana, "c-team", 153, "r-late"); r.Seq != 306 {
		t.Fatalf("recall of 153 at %d, want 306", r.Seq)
	}
	e.send(t, bo, "c-team", "k-after", "after the snapshot")
	e.send(t, bo, "c-big", "k-after", "after the snapshot")
	e.send(t, bo, "c-dual", "k-after", "after the snapshot")
	for _, step := range []struct {
		add        bool
		conv, user string
	}{
		{true, "c-team", "zed"}, {false, "c-team", "zed"}, {false, "c-team", "ana"},
		{true, "c-private", "ana"}, {true, "c-big", "ana"}, {false, "c-dual", "ana"},
	} {
		var err error
		if step.add {
			_, err = e.st.AddMember(ctx(t), bo, step.conv, step.user)
		} else {
			_, err = e.st.RemoveMember(ctx(t), bo, step.conv, step.user)
		}
		ok(t, err, fmt.Sprintf("member change %+v", step))
	}
	e.group(t, ana, "c-new", "bo")
	e.send(t, ana, "c-new", "k", "new")
	e.send(t, bo, "c-private", "k-after", "ana sees this now")
	t.Run("after_later_writes", func(t *testing.T) {
		check(t, "after later writes")
		evs, err := e.st.ExportEvents(ctx(t), j.ID, "c-team", 152, 1)
		if wantCode(t, err, "") && (len(evs) != 1 || evs[0].Seq != 153 || evs[0].Recalled || evs[0].Body != "recalled after the export") {
			t.Errorf("message 153, recalled after the snapshot: %s; want its body, not recalled", strings.Join(eventLines(evs), " | "))
		}
		_, err = e.st.ExportEvents(ctx(t), j.ID, "c-private", 0, 10)
		wantCode(t, err, parley.CodeNotFound)
		_, err = e.st.ExportEvents(ctx(t), j.ID, "c-new", 0, 10)
		wantCode(t, err, parley.CodeNotFound)
	})
}

// testExportSnapshotStable: a job's snapshot and events read the same,
// through any store on the database, whatever is written later and
// whatever state the job moves through.
func testExportSnapshotStable(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben", "dan")
	ana, ben := us[0], us[1]
	e.group(t, ana, "c-ab", "ben")
	e.fill(t, ana, "c-ab", 30)                       // 3..32
	e.send(t, ana, "c-ab", "k-r", "recall me later") // 33
	e.send(t, ben, "c-ab", "k-b", "ben's")           // 34
	e.group(t, ana, "c-cd", "dan")                   // 1, 2
	e.fill(t, ana, "c-cd", 12)                       // 3..14
	e.send(t, ana, "c-cd", "k-r", "recall me too")   // 15
	e.recall(t, ana, "c-cd", 15, "r-15")             // 16

	jAll := e.newExport(t, ana, "k-all", "all")
	jConv := e.newExport(t, ben, "k-ab", "conv:c-ab")
	other := e.db.Open(t)
	dumps := map[string][]string{}
	for _, j := range []parley.ExportJob{jAll, jConv} {
		dumps[j.ID] = exportDump(t, e.st, j.ID)
		wantDump(t, "the dump through another store", exportDump(t, other, j.ID), dumps[j.ID])
		if len(dumps[j.ID]) < 30 {
			t.Fatalf("job %s exports only %d lines", j.ID, len(dumps[j.ID]))
		}
	}
	same := func(t *testing.T, when string) {
		t.Helper()
		for _, j := range []parley.ExportJob{jAll, jConv} {
			for i, st := range []parley.Store{e.st, other} {
				wantDump(t, fmt.Sprintf("job %s %s (store %d)", j.Scope, when, i), exportDump(t, st, j.ID), dumps[j.ID])
			}
			var paged []string
			for _, c := range exportSnapshot(t, e.st, j.ID) {
				paged = append(paged, convLine(c))
				paged = append(paged, eventLines(exportEvents(t, e.st, j.ID, c.Conv, 7))...)
			}
			wantDump(t, fmt.Sprintf("job %s %s, in pages of 7", j.Scope, when), paged, dumps[j.ID])
		}
	}

	e.recall(t, ana, "c-ab", 33, "r-33")
	e.send(t, ben, "c-ab", "k-later", "later")
	e.fill(t, ana, "c-ab", 20)
	if _, err := e.st.RemoveMember(ctx(t), ben, "c-ab", "ben"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.AddMember(ctx(t), ana, "c-ab", "dan"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.AddMember(ctx(t), ana, "c-ab", "ben"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.RemoveMember(ctx(t), ana, "c-cd", "ana"); err != nil {
		t.Fatal(err)
	}
	e.send(t, as("dan"), "c-cd", "k", "dan alone")
	e.group(t, ana, "c-new", "ben")
	e.send(t, ben, "c-new", "k", "new")
	t.Run("after_later_writes", func(t *testing.T) { same(t, "after later writes") })

	t.Run("through_the_job_states", func(t *testing.T) {
		e.claim(t, e.st, "w1", time.Hour, jAll.ID)
		ok(t, e.st.ExtendExport(ctx(t), "w1", jAll.ID, 2, time.Hour), "extend")
		ok(t, e.st.RecordShard(ctx(t), "w1", parley.ExportShard{Job: jAll.ID, Index: 0, Conv: "c-ab", After: 0, Last: 34, Count: 32, SHA256: shaOf("s0")}), "record shard")
		e.claim(t, other, "w2", time.Hour, jConv.ID)
		ok(t, other.FailExport(ctx(t), "w2", jConv.ID, "try again", time.Hour), "fail for a retry")
		same(t, "while running and queued again")
		ok(t, e.st.FinishExport(ctx(t), "w1", jAll.ID, shaOf("artifact"), 1000, time.Hour), "finish")
		same(t, "done and queued again")
	})
}

// testExportClaimLease: claims take the oldest claimable job, never one
// leased to another worker; a job whose lease ended is taken over (Attempts
// one higher) and its former owner's calls answer ErrLeaseLost and change
// nothing, as do calls on a job never claimed or by another owner; an
// unknown job is NOT_FOUND everywhere.
func testExportClaimLease(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben")
	ana, ben := us[0], us[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.fill(t, ana, c, 10)

	t.Run("nothing_to_claim", func(t *testing.T) {
		before := e.exportRows(t)
		e.claim(t, e.st, "w1", time.Hour, "")
		e.exportUnchanged(t, before)
	})

	j1 := e.newExport(t, ana, "k1", "all")
	j2 := e.newExport(t, ben, "k1", "all")
	got := e.claim(t, e.st, "w1", time.Hour, j1.ID) // the oldest
	if got.Attempts != 1 || got.User != "ana" || got.Key != "k1" || !got.CreatedAt.Equal(j1.CreatedAt) {
		t.Errorf("first claim: %s, want ana's job with attempts 1", jobLine(got))
	}
	e.claim(t, e.db.Open(t), "w2", time.Hour, j2.ID) // not w1's
	e.claim(t, e.st, "w3", time.Hour, "")            // both are leased
	e.claim(t, e.st, "w1", time.Hour, "")            // the holder does not claim again

	t.Run("other_owner", func(t *testing.T) { e.wantOwnerCallsLost(t, "w2", j1.ID, c) })
	t.Run("never_claimed", func(t *testing.T) {
		q := e.newExport(t, ana, "k-queued", "conv:"+c)
		e.wantOwnerCallsLost(t, "w1", q.ID, c)
		if _, err := e.st.RevokeExport(ctx(t), q.ID); err != nil { // out of the way of the claims below
			t.Fatal(err)
		}
	})

	t.Run("take_over", func(t *testing.T) {
		j3 := e.newExport(t, ana, "k3", "conv:"+c)
		e.claim(t, e.st, "w3", time.Millisecond, j3.ID)
		time.Sleep(50 * time.Millisecond)
		took := e.claim(t, e.db.Open(t), "w4", time.Hour, j3.ID)
		if took.Attempts != 2 {
			t.Errorf("taken over: attempts %d, want 2", took.Attempts)
		}
		e.wantOwnerCallsLost(t, "w3", j3.ID, c)
		ok(t, e.st.ExtendExport(ctx(t), "w4", j3.ID, 1, time.Hour), "the new owner extends")
	})

	t.Run("lease_ended", func(t *testing.T) {
		// Nobody took the job over, but the lease ended: the owner lost it.
		j4 := e.newExport(t, ana, "k4", "conv:"+c)
		e.claim(t, e.st, "w5", time.Millisecond, j4.ID)
		time.Sleep(50 * time.Millisecond)
		e.wantOwnerCallsLost(t, "w5", j4.ID, c)
		again := e.claim(t, e.st, "w5", time.Hour, j4.ID) // claimable again, by anyone
		if again.Attempts != 2 {
			t.Errorf("claimed again: attempts %d, want 2", again.Attempts)
		}
	})

	t.Run("extend", func(t *testing.T) {
		before := e.job(t, j1.ID)
		time.Sleep(5 * time.Millisecond)
		start := time.Now()
		ok(t, e.st.ExtendExport(ctx(t), "w1", j1.ID, 4, 2*time.Hour), "extend")
		end := time.Now()
		j := e.job(t, j1.ID)
		if !within(j.LeaseUntil, start.Add(2*time.Hour), end.Add(2*time.Hour)) || !j.LeaseUntil.After(before.LeaseUntil) {
			t.Errorf("lease until %v after the extension (was %v), want the database clock plus 2h near %v", j.LeaseUntil, before.LeaseUntil, start.Add(2*time.Hour))
		}
		if j.Total != 4 || j.State != parley.ExportRunning || j.LeaseOwner != "w1" || j.Attempts != 1 {
			t.Errorf("after the extension: %s", jobLine(j))
		}
	})

	t.Run("empty_owner", func(t *testing.T) {
		for _, call := range ownerCalls(t, e.st, "", j1.ID, c) {
			before, job := e.exportRows(t), e.job(t, j1.ID)
			err := call.do()
			if code := parley.ErrorCode(err); code != parley.CodeInvalidArgument && !errors.Is(err, parley.ErrLeaseLost) {
				t.Errorf("%s with an empty owner: %v (code %s), want INVALID_ARGUMENT or ErrLeaseLost", call.name, err, code)
			}
			e.exportUnchanged(t, before)
			wantSameJob(t, call.name+" with an empty owner", e.job(t, j1.ID), job)
		}
	})

	for _, tc := range []struct {
		name string
		id   string
		want parley.Code
	}{
		{"unknown", parley.NewID(), parley.CodeNotFound},
		{"malformed", "no such job", parley.ErrorCode(parley.CheckExportID("no such job"))},
		{"too_long", strings.Repeat("a", 65), parley.ErrorCode(parley.CheckExportID(strings.Repeat("a", 65)))},
		{"empty", "", parley.ErrorCode(parley.CheckExportID(""))},
	} {
		t.Run("job_"+tc.name, func(t *testing.T) {
			before := e.exportRows(t)
			for _, call := range ownerCalls(t, e.st, "w1", tc.id, c) {
				if err := call.do(); !wantCode(t, err, tc.want) {
					t.Errorf("(%s of a job %s)", call.name, tc.name)
				}
			}
			for name, do := range map[string]func() error{
				"job":      func() error { _, err := e.st.ExportJob(ctx(t), tc.id); return err },
				"snapshot": func() error { _, err := e.st.ExportSnapshot(ctx(t), tc.id); return err },
				"events":   func() error { _, err := e.st.ExportEvents(ctx(t), tc.id, c, 0, 10); return err },
				"shards":   func() error { _, err := e.st.ExportShards(ctx(t), tc.id); return err },
				"revoke":   func() error { _, err := e.st.RevokeExport(ctx(t), tc.id); return err },
			} {
				if err := do(); !wantCode(t, err, tc.want) {
					t.Errorf("(%s of a job %s)", name, tc.name)
				}
			}
			e.exportUnchanged(t, before)
		})
	}
}

// testExportShardsProgress: ExtendExport records the shard total,
// RecordShard stores a shard and sets Done to the number of shard records
// (a re-recorded index replaces its record), ExportShards lists them by
// index; a malformed record is rejected and stores nothing.
func testExportShardsProgress(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	const c = "c-ab"
	e.group(t, ana, c)
	e.fill(t, ana, c, 450)
	j := e.newExport(t, ana, "k1", "all")
	e.claim(t, e.st, "w1", time.Hour, j.ID)
	snap := exportSnapshot(t, e.st, j.ID)
	total := parley.ExportShardTotal(snap)
	if total != 3 {
		t.Fatalf("shard total %d of snapshot %+v, want 3 (450 messages)", total, snap)
	}

	shards, err := e.st.ExportShards(ctx(t), j.ID)
	if wantCode(t, err, "") && len(shards) != 0 {
		t.Errorf("shards before any: %+v", shards)
	}
	ok(t, e.st.ExtendExport(ctx(t), "w1", j.ID, total, time.Hour), "extend with the total")
	if got := e.job(t, j.ID); got.Total != 3 || got.Done != 0 {
		t.Errorf("after planning: done %d/%d, want 0/3", got.Done, got.Total)
	}

	shard := func(i int, sum string) parley.ExportShard {
		after := int64(1 + i*parley.ExportShardSize)
		n := min(parley.ExportShardSize, 450-i*parley.ExportShardSize)
		return parley.ExportShard{Job: j.ID, Index: i, Conv: c, After: after, Last: after + int64(n), Count: n, SHA256: shaOf(sum)}
	}
	record := func(t *testing.T, s parley.ExportShard, done int) {
		t.Helper()
		ok(t, e.st.RecordShard(ctx(t), "w1", s), fmt.Sprintf("record shard %d", s.Index))
		if got := e.job(t, j.ID); got.Done != done || got.Total != 3 || got.State != parley.ExportRunning {
			t.Errorf("after shard %d: %s, want done %d/3, running", s.Index, jobLine(got), done)
		}
	}
	record(t, shard(2, "two"), 1) // out of order
	record(t, shard(0, "zero"), 2)
	record(t, shard(0, "zero again"), 2) // replaced, not added
	record(t, shard(1, "one"), 3)
	shards, err = e.st.ExportShards(ctx(t), j.ID)
	if wantCode(t, err, "") && !slices.Equal(shards, []parley.ExportShard{shard(0, "zero again"), shard(1, "one"), shard(2, "two")}) {
		t.Errorf("shards %+v, want 0, 1, 2 with the replaced record of 0", shards)
	}
	if got := e.job(t, j.ID); got.Done != got.Total {
		t.Errorf("done %d of %d after every shard", got.Done, got.Total)
	}
	ok(t, e.st.ExtendExport(ctx(t), "w1", j.ID, 4, time.Hour), "a new total")
	if got := e.job(t, j.ID); got.Total != 4 || got.Done != 3 {
		t.Errorf("after a new total: done %d/%d, want 3/4", got.Done, got.Total)
	}

	valid := shard(1, "valid")
	with := func(f func(*parley.ExportShard)) parley.ExportShard { s := valid; f(&s); return s }
	for _, tc := range []struct {
		name  string
		s     parley.ExportShard
		want  parley.Code
		owner string
	}{
		{"negative_index", with(func(s *parley.ExportShard) { s.Index = -1 }), parley.CodeInvalidArgument, "w1"},
		{"no_events", with(func(s *parley.ExportShard) { s.Count = 0 }), parley.CodeInvalidArgument, "w1"},
		{"too_many_events", with(func(s *parley.ExportShard) { s.Count = parley.ExportShardSize + 1 }), parley.CodeInvalidArgument, "w1"},
		{"negative_after", with(func(s *parley.ExportShard) { s.After = -1 }), parley.CodeInvalidArgument, "w1"},
		{"last_at_after", with(func(s *parley.ExportShard) { s.Last = s.After }), parley.CodeInvalidArgument, "w1"},
		{"short_sha", with(func(s *parley.ExportShard) { s.SHA256 = s.SHA256[:63] }), parley.CodeInvalidArgument, "w1"},
		{"empty_sha", with(func(s *parley.ExportShard) { s.SHA256 = "" }), parley.CodeInvalidArgument, "w1"},
		{"malformed_conv", with(func(s *parley.ExportShard) { s.Conv = "c ab" }), parley.CodeInvalidArgument, "w1"},
		{"empty_conv", with(func(s *parley.ExportShard) { s.Conv = "" }), parley.CodeInvalidArgument, "w1"},
		{"malformed_job", with(func(s *parley.ExportShard) { s.Job = "job 1" }), parley.ErrorCode(parley.CheckExportID("job 1")), "w1"},
		{"unknown_job", with(func(s *parley.ExportShard) { s.Job = parley.NewID() }), parley.CodeNotFound, "w1"},
		{"other_owner", valid, parley.ErrorCode(parley.ErrLeaseLost), "w2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, job := e.exportRows(t), e.job(t, j.ID)
			err := e.st.RecordShard(ctx(t), tc.owner, tc.s)
			wantCode(t, err, tc.want)
			if tc.owner != "w1" {
				wantLeaseLost(t, "a shard by another owner", err)
			}
			e.exportUnchanged(t, before)
			wantSameJob(t, "the job after a rejected shard", e.job(t, j.ID), job)
		})
	}
	shards, err = e.st.ExportShards(ctx(t), j.ID)
	if wantCode(t, err, "") && !slices.Equal(shards, []parley.ExportShard{shard(0, "zero again"), shard(1, "one"), shard(2, "two")}) {
		t.Errorf("shards after the rejected records %+v", shards)
	}
}

// testExportShardBatch: RecordShard takes a batch of one job's records in
// one call: Done grows by the indexes new to the job (a re-recorded index
// replaces its record and is not counted twice, in a batch with new ones
// too); a batch with one bad record, a record of another job, an index
// twice, no record or more than MaxShardBatch stores nothing, and neither
// does a batch of an owner whose lease is lost.
func testExportShardBatch(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	const c = "c-ab"
	e.group(t, ana, c)
	e.fill(t, ana, c, 5)
	j := e.newExport(t, ana, "k1", "all")
	other := e.newExport(t, ana, "k2", "all")
	e.claim(t, e.st, "w1", time.Hour, j.ID)
	ok(t, e.st.ExtendExport(ctx(t), "w1", j.ID, 8, time.Hour), "extend")
	shard := func(job string, i int, sum string) parley.ExportShard {
		after := int64(1 + i*parley.ExportShardSize)
		return parley.ExportShard{Job: job, Index: i, Conv: c, After: after, Last: after + 3, Count: 3, SHA256: shaOf(sum)}
	}
	record := func(t *testing.T, done int, shards ...parley.ExportShard) {
		t.Helper()
		ok(t, e.st.RecordShard(ctx(t), "w1", shards...), fmt.Sprintf("record %d shards", len(shards)))
		if got := e.job(t, j.ID); got.Done != done || got.State != parley.ExportRunning {
			t.Errorf("after a batch of %d: %s, want done %d, running", len(shards), jobLine(got), done)
		}
	}
	record(t, 3, shard(j.ID, 4, "four"), shard(j.ID, 0, "zero"), shard(j.ID, 2, "two"))
	record(t, 5, shard(j.ID, 0, "zero again"), shard(j.ID, 1, "one"), shard(j.ID, 3, "three")) // 0 replaced
	record(t, 5, shard(j.ID, 4, "four again"))
	want := []parley.ExportShard{shard(j.ID, 0, "zero again"), shard(j.ID, 1, "one"), shard(j.ID, 2, "two"),
		shard(j.ID, 3, "three"), shard(j.ID, 4, "four again")}
	shards, err := e.st.ExportShards(ctx(t), j.ID)
	if wantCode(t, err, "") && !slices.Equal(shards, want) {
		t.Errorf("shards %+v, want %+v", shards, want)
	}

	bad := shard(j.ID, 6, "six")
	bad.Count = 0
	many := make([]parley.ExportShard, parley.MaxShardBatch+1)
	for i := range many {
		many[i] = shard(j.ID, 5+i, fmt.Sprint(i))
	}
	for _, tc := range []struct {
		name   string
		owner  string
		shards []parley.ExportShard
		want   parley.Code
	}{
		{"none", "w1", nil, parley.CodeInvalidArgument},
		{"one_bad", "w1", []parley.ExportShard{shard(j.ID, 5, "five"), bad}, parley.CodeInvalidArgument},
		{"two_jobs", "w1", []parley.ExportShard{shard(j.ID, 5, "five"), shard(other.ID, 0, "zero")}, parley.CodeInvalidArgument},
		{"index_twice", "w1", []parley.ExportShard{shard(j.ID, 5, "five"), shard(j.ID, 6, "six"), shard(j.ID, 5, "five")}, parley.CodeInvalidArgument},
		{"index_past_int32", "w1", []parley.ExportShard{shard(j.ID, 5, "five"), shard(j.ID, 1<<31, "big")}, parley.CodeInvalidArgument},
		{"too_many", "w1", many, parley.CodeInvalidArgument},
		{"other_owner", "w2", []parley.ExportShard{shard(j.ID, 5, "five"), shard(j.ID, 0, "zero")}, parley.ErrorCode(parley.ErrLeaseLost)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, job := e.exportRows(t), e.job(t, j.ID)
			err := e.st.RecordShard(ctx(t), tc.owner, tc.shards...)
			wantCode(t, err, tc.want)
			if tc.owner != "w1" {
				wantLeaseLost(t, "a batch by another owner", err)
			}
			e.exportUnchanged(t, before)
			wantSameJob(t, "the job after a rejected batch", e.job(t, j.ID), job)
		})
	}
	record(t, 7, shard(j.ID, 5, "five"), shard(j.ID, 6, "six"), shard(j.ID, 4, "four"))
}

// testExportFinishFailRetry: FinishExport makes a job done with its
// artifact's sha256 and size, expiring after keep; FailExport with a retry
// queues it again with the reason, claimable only after retryAfter; without
// one the job is failed for good; after any of them the worker's lease is
// gone.
func testExportFinishFailRetry(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	const c = "c-ab"
	e.group(t, ana, c)
	e.fill(t, ana, c, 5)

	t.Run("finish", func(t *testing.T) {
		j := e.newExport(t, ana, "k-done", "all")
		e.claim(t, e.st, "w1", time.Hour, j.ID)
		ok(t, e.st.ExtendExport(ctx(t), "w1", j.ID, 1, time.Hour), "extend")
		ok(t, e.st.RecordShard(ctx(t), "w1", parley.ExportShard{Job: j.ID, Index: 0, Conv: c, After: 0, Last: 6, Count: 5, SHA256: shaOf("s")}), "shard")
		for _, tc := range []struct{ name, sha string }{{"empty_sha", ""}, {"short_sha", shaOf("a")[:10]}} {
			t.Run(tc.name, func(t *testing.T) {
				before, job := e.exportRows(t), e.job(t, j.ID)
				wantCode(t, e.st.FinishExport(ctx(t), "w1", j.ID, tc.sha, 10, time.Hour), parley.CodeInvalidArgument)
				e.exportUnchanged(t, before)
				wantSameJob(t, "the job after a rejected finish", e.job(t, j.ID), job)
			})
		}
		e.recordFiles(t, j.ID)
		start := time.Now()
		ok(t, e.st.FinishExport(ctx(t), "w1", j.ID, shaOf("artifact"), 5038, time.Hour), "finish")
		end := time.Now()
		got := e.wantState(t, j.ID, parley.ExportDone, "")
		if got.SHA256 != shaOf("artifact") || got.Bytes != 5038 || got.LeaseOwner != "" || got.Done != 1 || got.Total != 1 || got.Attempts != 1 ||
			got.FilesSHA256 != shaOf("files") || got.FilesBytes != 77 {
			t.Errorf("done job: %s", jobLine(got))
		}
		if !within(got.ExpiresAt, start.Add(time.Hour), end.Add(time.Hour)) || !got.ExpiresAt.After(time.Now()) {
			t.Errorf("expires at %v, want the database clock plus 1h near %v", got.ExpiresAt, start.Add(time.Hour))
		}
		e.claim(t, e.st, "w2", time.Hour, "") // a done job is not claimable
		e.wantOwnerCallsLost(t, "w1", j.ID, c)
	})

	t.Run("fail_for_good", func(t *testing.T) {
		e.touch(t, ana, c) // the jobs below are new, not a reuse of k-done
		for i, retry := range []time.Duration{0, -time.Minute} {
			j := e.newExport(t, ana, fmt.Sprintf("k-failed-%d", i), "all")
			e.claim(t, e.st, "w1", time.Hour, j.ID)
			ok(t, e.st.FailExport(ctx(t), "w1", j.ID, "corrupt input", retry), "fail")
			got := e.wantState(t, j.ID, parley.ExportFailed, "corrupt input")
			if got.LeaseOwner != "" || got.SHA256 != "" || got.Attempts != 1 {
				t.Errorf("failed job: %s", jobLine(got))
			}
			e.claim(t, e.st, "w2", time.Hour, "") // a failed job is not claimable
			e.wantOwnerCallsLost(t, "w1", j.ID, c)
		}
	})

	t.Run("long_reason", func(t *testing.T) {
		e.touch(t, ana, c)
		j := e.newExport(t, ana, "k-long", "all")
		e.claim(t, e.st, "w1", time.Hour, j.ID)
		reason := strings.Repeat("é", parley.MaxExportReason+100)
		ok(t, e.st.FailExport(ctx(t), "w1", j.ID, reason, 0), "fail with a long reason")
		e.wantState(t, j.ID, parley.ExportFailed, parley.ExportReason(reason))
	})

	t.Run("retry", func(t *testing.T) {
		const retry = 2 * time.Second
		e.touch(t, ana, c)
		j := e.newExport(t, ana, "k-retry", "all")
		e.claim(t, e.st, "w1", time.Hour, j.ID)
		start := time.Now()
		ok(t, e.st.FailExport(ctx(t), "w1", j.ID, "disk full", retry), "fail for a retry")
		end := time.Now()
		got := e.wantState(t, j.ID, parley.ExportQueued, parley.ExportReason("disk full"))
		if got.LeaseOwner != "" || got.Attempts != 1 {
			t.Errorf("queued for a retry: %s, want no lease owner and attempts 1", jobLine(got))
		}
		if !within(got.NotBefore, start.Add(retry), end.Add(retry)) {
			t.Errorf("not before %v, want the database clock plus %v near %v", got.NotBefore, retry, start.Add(retry))
		}
		e.claim(t, e.st, "w2", time.Hour, "") // not yet
		e.wantOwnerCallsLost(t, "w1", j.ID, c)
		time.Sleep(time.Until(got.NotBefore) + 300*time.Millisecond)
		again := e.claim(t, e.st, "w2", time.Hour, j.ID)
		if again.Attempts != 2 {
			t.Errorf("claimed after the retry delay: attempts %d, want 2", again.Attempts)
		}
		ok(t, e.st.FinishExport(ctx(t), "w2", j.ID, shaOf("x"), 1, time.Hour), "finish after the retry")
		if got := e.wantState(t, j.ID, parley.ExportDone, ""); got.Attempts != 2 {
			t.Errorf("done after a retry: %s", jobLine(got))
		}
	})
}

// recordFiles checks RecordExportFiles on job id, claimed by w1: bad
// arguments are INVALID_ARGUMENT and change nothing; a record replaces the
// one before, "" and 0 clear it. It leaves sha256 of "files", 77 bytes.
func (e *env) recordFiles(t *testing.T, id string) {
	t.Helper()
	for _, tc := range []struct {
		name, sha string
		bytes     int64
	}{{"short_sha", shaOf("a")[:10], 10}, {"sha_without_size", shaOf("a"), 0}, {"size_without_sha", "", 10}, {"negative", shaOf("a"), -1}} {
		before, job := e.exportRows(t), e.job(t, id)
		wantCode(t, e.st.RecordExportFiles(ctx(t), "w1", id, tc.sha, tc.bytes), parley.CodeInvalidArgument)
		e.exportUnchanged(t, before)
		wantSameJob(t, "the job after a rejected files record ("+tc.name+")", e.job(t, id), job)
	}
	for _, rec := range []struct {
		sha   string
		bytes int64
	}{{shaOf("old"), 5}, {"", 0}, {shaOf("files"), 77}} {
		ok(t, e.st.RecordExportFiles(ctx(t), "w1", id, rec.sha, rec.bytes), "record files")
		if got := e.job(t, id); got.FilesSHA256 != rec.sha || got.FilesBytes != rec.bytes || got.State != parley.ExportRunning {
			t.Errorf("after recording files %q %d: %s", rec.sha, rec.bytes, jobLine(got))
		}
	}
}

// testExportRevokeExpire: RevokeExport revokes a job in any state but
// revoked and expired (again: a no-op), takes the lease from a worker and
// makes the job unclaimable; ExpireExports marks expired the done jobs
// whose ExpiresAt passed and returns their ids.
func testExportRevokeExpire(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	const c = "c-ab"
	e.group(t, ana, c)
	e.fill(t, ana, c, 5)
	revoke := func(t *testing.T, id string) parley.ExportJob {
		t.Helper()
		r, err := e.st.RevokeExport(ctx(t), id)
		ok(t, err, "revoke "+id)
		if r.ID != id || r.State != parley.ExportRevoked || r.LeaseOwner != "" {
			t.Errorf("revoke %s: %s, want revoked without a lease", id, jobLine(r))
		}
		wantSameJob(t, "the revoked job read back", e.job(t, id), r)
		return r
	}

	done := e.newExport(t, ana, "k-done", "all")
	e.claim(t, e.st, "w1", time.Hour, done.ID)
	ok(t, e.st.FinishExport(ctx(t), "w1", done.ID, shaOf("a"), 10, time.Hour), "finish")
	r := revoke(t, done.ID)
	if r.SHA256 != shaOf("a") || r.Bytes != 10 {
		t.Errorf("a revoked job keeps its artifact's record: %s", jobLine(r))
	}
	t.Run("again", func(t *testing.T) {
		before := e.exportRows(t)
		again := revoke(t, done.ID)
		wantSameJob(t, "revoked twice", again, r)
		e.exportUnchanged(t, before)
	})

	t.Run("queued", func(t *testing.T) {
		q := e.newExport(t, ana, "k-queued", "all")
		revoke(t, q.ID)
		e.claim(t, e.st, "w1", time.Hour, "")
	})
	t.Run("running", func(t *testing.T) {
		j := e.newExport(t, ana, "k-running", "all")
		e.claim(t, e.st, "w1", time.Hour, j.ID)
		revoke(t, j.ID)
		e.wantOwnerCallsLost(t, "w1", j.ID, c)
		e.claim(t, e.st, "w2", time.Hour, "")
	})
	t.Run("failed", func(t *testing.T) {
		j := e.newExport(t, ana, "k-failed", "all")
		e.claim(t, e.st, "w1", time.Hour, j.ID)
		ok(t, e.st.FailExport(ctx(t), "w1", j.ID, "broken", 0), "fail")
		revoke(t, j.ID)
	})

	t.Run("expire", func(t *testing.T) {
		kept := e.newExport(t, ana, "k-kept", "all")
		e.claim(t, e.st, "w1", time.Hour, kept.ID)
		ok(t, e.st.FinishExport(ctx(t), "w1", kept.ID, shaOf("kept"), 10, time.Hour), "finish kept")
		e.touch(t, ana, c)
		short := e.newExport(t, ana, "k-short", "all")
		e.claim(t, e.st, "w1", time.Hour, short.ID)
		ok(t, e.st.FinishExport(ctx(t), "w1", short.ID, shaOf("short"), 10, time.Millisecond), "finish short")
		e.touch(t, ana, c)
		queued := e.newExport(t, ana, "k-still-queued", "all")
		time.Sleep(50 * time.Millisecond)

		ids, err := e.st.ExpireExports(ctx(t))
		if wantCode(t, err, "") && !slices.Equal(ids, []string{short.ID}) {
			t.Errorf("expired %v, want only %s", ids, short.ID)
		}
		got := e.wantState(t, short.ID, parley.ExportExpired, "")
		if got.SHA256 != shaOf("short") {
			t.Errorf("expired job: %s", jobLine(got))
		}
		e.wantState(t, kept.ID, parley.ExportDone, "")
		e.wantState(t, queued.ID, parley.ExportQueued, "")
		e.wantState(t, done.ID, parley.ExportRevoked, "")

		before := e.exportRows(t)
		ids, err = e.st.ExpireExports(ctx(t))
		if wantCode(t, err, "") && len(ids) != 0 {
			t.Errorf("expired again: %v, want none", ids)
		}
		// An expired job stays expired (the contract leaves open whether
		// RevokeExport answers an error for it, but not UNAVAILABLE).
		if _, err := e.st.RevokeExport(ctx(t), short.ID); parley.ErrorCode(err) == parley.CodeUnavailable {
			t.Errorf("revoke an expired job: %v", err)
		}
		e.wantState(t, short.ID, parley.ExportExpired, "")
		e.exportUnchanged(t, before)
		revoke(t, kept.ID) // a done job not yet expired can be
	})

	t.Run("unknown", func(t *testing.T) {
		before := e.exportRows(t)
		_, err := e.st.RevokeExport(ctx(t), parley.NewID())
		wantCode(t, err, parley.CodeNotFound)
		_, err = e.st.RevokeExport(ctx(t), "Job!")
		wantCode(t, err, parley.ErrorCode(parley.CheckExportID("Job!")))
		e.exportUnchanged(t, before)
	})
}

// testExportPurgePinned: a queued or running job pins its snapshot: a purge
// deletes nothing from the lowest seq the job exports on (PinnedCut), so
// the job reads the same after it; a done or revoked job pins nothing.
func testExportPurgePinned(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben")
	ana, ben := us[0], us[1]
	// c-ab: 1 ana, 2..101 ana's messages, 102 ben joins, 103..150.
	e.group(t, ana, "c-ab")
	e.fill(t, ana, "c-ab", 100)
	if ch, err := e.st.AddMember(ctx(t), ana, "c-ab", "ben"); err != nil || ch.Seq != 102 {
		t.Fatalf("add ben: %+v %v", ch, err)
	}
	e.fill(t, ana, "c-ab", 48)
	// c-x: 1 ana, 2..50.
	e.group(t, ana, "c-x")
	e.fill(t, ana, "c-x", 49)

	jb := e.newExport(t, ben, "k-ab", "conv:c-ab") // pins c-ab from 102
	ja := e.newExport(t, ana, "k-x", "conv:c-x")   // pins c-x from 1
	dumpB := exportDump(t, e.st, jb.ID)
	dumpA := exportDump(t, e.st, ja.ID)
	for _, c := range []string{"c-ab", "c-x"} {
		ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 5}), "retention of "+c)
	}
	purge := func(t *testing.T, conv string, minSeq, head int64) {
		t.Helper()
		pr, err := e.st.Purge(ctx(t), conv)
		if wantCode(t, err, "") && pr.MinSeq != minSeq {
			t.Errorf("purge %s: %+v, want min_seq %d", conv, pr, minSeq)
		}
		if h := e.conv(t, conv); h.MinSeq != minSeq || h.Head != head {
			t.Errorf("%s after the purge: min_seq %d, head %d; want %d, %d", conv, h.MinSeq, h.Head, minSeq, head)
		}
		if n := e.db.Int(t, "SELECT count(*) FROM events WHERE conv_id = ? AND seq >= ?", conv, minSeq); n != head-minSeq+1 {
			t.Errorf("%s: %d events stored from seq %d, want %d", conv, n, minSeq, head-minSeq+1)
		}
	}

	t.Run("queued_pins", func(t *testing.T) {
		// The policy cuts at 145; ben's job exports from 102.
		purge(t, "c-ab", parley.PinnedCut(145, 102)+1, 150)
		purge(t, "c-x", 1, 50)
		wantDump(t, "ben's job after the purge", exportDump(t, e.st, jb.ID), dumpB)
		wantDump(t, "ana's job after the purge", exportDump(t, e.st, ja.ID), dumpA)
	})
	t.Run("running_pins", func(t *testing.T) {
		e.claim(t, e.st, "w1", time.Hour, jb.ID)
		e.fill(t, ana, "c-ab", 10) // 151..160: the policy cuts at 155
		purge(t, "c-ab", 102, 160)
		wantDump(t, "ben's running job after the purge", exportDump(t, e.st, jb.ID), dumpB)
	})
	t.Run("done_releases", func(t *testing.T) {
		ok(t, e.st.FinishExport(ctx(t), "w1", jb.ID, shaOf("b"), 10, time.Hour), "finish")
		purge(t, "c-ab", 156, 160)
	})
	t.Run("revoked_releases", func(t *testing.T) {
		if _, err := e.st.RevokeExport(ctx(t), ja.ID); err != nil {
			t.Fatal(err)
		}
		purge(t, "c-x", 46, 50)
	})
	t.Run("failed_releases", func(t *testing.T) {
		j := e.newExport(t, ana, "k-x2", "conv:c-x") // pins c-x from 1 again
		e.fill(t, ana, "c-x", 10)                    // 51..60
		purge(t, "c-x", 46, 60)
		e.claim(t, e.st, "w1", time.Hour, j.ID)
		ok(t, e.st.FailExport(ctx(t), "w1", j.ID, "gave up", 0), "fail")
		purge(t, "c-x", 56, 60)
	})
	t.Run("queued_for_retry_pins", func(t *testing.T) {
		j := e.newExport(t, ana, "k-x3", "all") // pins c-ab from 1, c-x from 1
		e.fill(t, ana, "c-x", 10)               // 61..70
		e.claim(t, e.st, "w1", time.Hour, j.ID)
		ok(t, e.st.FailExport(ctx(t), "w1", j.ID, "retry", time.Hour), "fail for a retry")
		purge(t, "c-x", 56, 70)
	})
}

// testExportRollbackFailsPinned: a rollback below the head a queued or
// running job recorded fails the job (ExportRolledBack) and takes its
// lease; jobs whose head is at or below the restore point, jobs of other
// conversations and jobs that are done keep their state.
func testExportRollbackFailsPinned(t *testing.T, e *env) {
	us := e.users(t, "ana", "ben")
	ana, ben := us[0], us[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	e.fill(t, ana, c, 8) // 3..10
	e.group(t, ana, "c-x")
	e.fill(t, ana, "c-x", 4)

	// At head 10.
	running10 := e.newExport(t, ana, "k-r10", "conv:"+c)
	queued10 := e.newExport(t, ben, "k-q10", "conv:"+c)
	e.fill(t, ana, c, 5) // 11..15
	done15 := e.newExport(t, ben, "k-d15", "conv:"+c)
	running15 := e.newExport(t, ben, "k-r15", "all")
	queued15 := e.newExport(t, ana, "k-q15", "all") // c-ab and c-x
	other := e.newExport(t, ana, "k-x", "conv:c-x")

	e.claim(t, e.st, "w-r10", time.Hour, running10.ID)
	// queued10 is queued again with a retry delay, so the claims below pass it by.
	e.claim(t, e.st, "w-q10", time.Hour, queued10.ID)
	ok(t, e.st.FailExport(ctx(t), "w-q10", queued10.ID, "retry later", time.Hour), "queue again")
	e.claim(t, e.st, "w-d15", time.Hour, done15.ID)
	ok(t, e.st.FinishExport(ctx(t), "w-d15", done15.ID, shaOf("d"), 10, time.Hour), "finish")
	e.claim(t, e.st, "w-r15", time.Hour, running15.ID)

	before := map[string]parley.ExportJob{}
	for _, j := range []parley.ExportJob{running10, queued10, done15, other} {
		before[j.ID] = e.job(t, j.ID)
	}
	rr, err := e.st.Rollback(ctx(t), c, 12)
	ok(t, err, "rollback to 12")
	if rr.Head != 12 {
		t.Fatalf("rollback: %+v, want head 12", rr)
	}
	reason := parley.ExportRolledBack(c, 12)
	for _, id := range []string{running15.ID, queued15.ID} {
		if got := e.wantState(t, id, parley.ExportFailed, reason); got.LeaseOwner != "" {
			t.Errorf("failed by the rollback: %s, want no lease owner", jobLine(got))
		}
	}
	e.wantOwnerCallsLost(t, "w-r15", running15.ID, c)
	for id, j := range before {
		wantSameJob(t, "a job the rollback must leave", e.job(t, id), j)
	}
	ok(t, e.st.ExtendExport(ctx(t), "w-r10", running10.ID, 1, time.Hour), "the running job at head 10 keeps its lease")

	t.Run("at_the_head", func(t *testing.T) {
		at12 := e.newExport(t, ben, "k-q12", "conv:"+c)
		_, err := e.st.Rollback(ctx(t), c, 12) // the job's head is 12: kept
		ok(t, err, "rollback to 12 again")
		e.wantState(t, at12.ID, parley.ExportQueued, "")
		e.wantState(t, running15.ID, parley.ExportFailed, reason) // not rewritten
		_, err = e.st.Rollback(ctx(t), c, 11)
		ok(t, err, "rollback to 11")
		e.wantState(t, at12.ID, parley.ExportFailed, parley.ExportRolledBack(c, 11))
		e.wantState(t, queued10.ID, parley.ExportQueued, "retry later")
		e.wantState(t, running10.ID, parley.ExportRunning, "")
		e.wantState(t, done15.ID, parley.ExportDone, "")
		e.wantState(t, other.ID, parley.ExportQueued, "")
	})
}

// testExportConcurrentClaims: workers on several stores claiming at once
// each get a different job, and every job is claimed exactly once.
func testExportConcurrentClaims(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	e.group(t, ana, "c-ab")
	const jobs, workers = 12, 6
	want := map[string]bool{}
	for i := range jobs {
		j, err := e.st.CreateExport(ctx(t), ana, parley.ExportRequest{Key: fmt.Sprintf("k%d", i), Scope: "all"})
		ok(t, err, "create")
		want[j.ID] = true
	}
	stores := make([]parley.Store, workers)
	for i := range stores {
		if i%2 == 0 {
			stores[i] = e.st
		} else {
			stores[i] = e.db.Open(t)
		}
	}
	claimed := make([][]parley.ExportJob, workers)
	startc := make(chan struct{})
	var wg sync.WaitGroup
	for w, st := range stores {
		wg.Go(func() {
			<-startc
			owner := fmt.Sprintf("w%d", w)
			for range jobs + 1 {
				j, got, err := st.ClaimExport(ctx(t), owner, time.Hour)
				if err != nil {
					t.Errorf("claim by %s: %v", owner, err)
					return
				}
				if !got {
					return
				}
				claimed[w] = append(claimed[w], j)
			}
		})
	}
	close(startc)
	wg.Wait()

	by := map[string]string{}
	for w, js := range claimed {
		owner := fmt.Sprintf("w%d", w)
		for _, j := range js {
			if prev, dup := by[j.ID]; dup {
				t.Errorf("job %s claimed by %s and by %s", j.ID, prev, owner)
			}
			by[j.ID] = owner
			if !want[j.ID] || j.LeaseOwner != owner || j.Attempts != 1 || j.State != parley.ExportRunning {
				t.Errorf("claimed by %s: %s", owner, jobLine(j))
			}
			if got := e.job(t, j.ID); got.LeaseOwner != owner || got.Attempts != 1 {
				t.Errorf("job %s claimed by %s reads %s", j.ID, owner, jobLine(got))
			}
		}
	}
	if len(by) != jobs {
		t.Errorf("%d jobs claimed, want all %d", len(by), jobs)
	}
	e.claim(t, e.st, "late", time.Hour, "")
	if n := e.db.Int(t, "SELECT count(*) FROM export_jobs WHERE state = 'running' AND attempts = 1"); n != jobs {
		t.Errorf("%d jobs running with one attempt, want %d", n, jobs)
	}
}

// testExportJobsByIDs: ExportJobs reads the jobs of many ids at once (the
// janitor's one query), whatever their owners and states, in id order;
// missing and malformed ids are left out, and nothing changes.
func testExportJobsByIDs(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	e.group(t, ana, "c-ab")
	e.fill(t, ana, "c-ab", 3)
	a1 := e.newExport(t, ana, "k1", "all")
	a2 := e.newExport(t, ana, "k2", "all")
	b1 := e.newExport(t, ben, "k1", "all")
	e.claim(t, e.st, "w1", time.Hour, a1.ID)
	ok(t, e.st.FinishExport(ctx(t), "w1", a1.ID, shaOf("a"), 10, time.Hour), "finish")
	_, err := e.st.RevokeExport(ctx(t), a2.ID)
	ok(t, err, "revoke")
	want := map[string]parley.ExportJob{}
	for _, id := range []string{a1.ID, a2.ID, b1.ID} {
		want[id] = e.job(t, id)
	}
	missing := parley.NewID()
	for _, tc := range []struct {
		name string
		ids  []string
		want []string
	}{
		{"none", nil, nil},
		{"one", []string{b1.ID}, []string{b1.ID}},
		{"all, any order, with a repeat", []string{b1.ID, a2.ID, a1.ID, b1.ID}, []string{a1.ID, a2.ID, b1.ID}},
		{"missing and malformed left out", []string{missing, "", "no.dots", a2.ID, strings.Repeat("x", 500)}, []string{a2.ID}},
		{"only missing", []string{missing}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.exportRows(t)
			got, err := e.st.ExportJobs(ctx(t), tc.ids)
			ok(t, err, "export jobs")
			wantIDs := slices.Clone(tc.want)
			slices.Sort(wantIDs)
			var gotIDs []string
			for _, j := range got {
				gotIDs = append(gotIDs, j.ID)
				wantSameJob(t, "job "+j.ID, j, want[j.ID])
			}
			if !slices.Equal(gotIDs, wantIDs) {
				t.Errorf("ids %v; want %v", gotIDs, wantIDs)
			}
			e.exportUnchanged(t, before)
		})
	}
}

// testExportCounts: ExportCounts counts every user's jobs by state, and a
// state without jobs is absent.
func testExportCounts(t *testing.T, e *env) {
	got, err := e.st.ExportCounts(ctx(t))
	ok(t, err, "export counts")
	if len(got) != 0 {
		t.Errorf("counts with no job: %v", got)
	}
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	e.group(t, ana, "c-ab")
	e.fill(t, ana, "c-ab", 3)
	a1 := e.newExport(t, ana, "k1", "all")
	a2 := e.newExport(t, ana, "k2", "all")
	b1 := e.newExport(t, ben, "k1", "all")
	b2 := e.newExport(t, ben, "k2", "all")
	e.claim(t, e.st, "w1", time.Hour, a1.ID)
	ok(t, e.st.FinishExport(ctx(t), "w1", a1.ID, shaOf("a"), 10, time.Hour), "finish")
	_, err = e.st.RevokeExport(ctx(t), a2.ID)
	ok(t, err, "revoke")
	e.claim(t, e.st, "w1", time.Hour, b1.ID)
	before := e.exportRows(t)
	got, err = e.st.ExportCounts(ctx(t))
	ok(t, err, "export counts")
	want := map[parley.ExportState]int64{parley.ExportDone: 1, parley.ExportRevoked: 1, parley.ExportRunning: 1, parley.ExportQueued: 1}
	if !maps.Equal(got, want) {
		t.Errorf("counts %v; want %v (b2 %s)", got, want, b2.ID)
	}
	e.exportUnchanged(t, before)
}

// testExportSigningKey: the store keeps one export link signing key for
// the deployment. Concurrent first calls, from several handles on one
// database (gateways starting together), all get the same key; later
// calls and new handles get it again; it is random, of the documented size.
func testExportSigningKey(t *testing.T, e *env) {
	stores := []parley.Store{e.st}
	for range 3 {
		stores = append(stores, e.db.Open(t))
	}
	type got struct {
		id  string
		key []byte
		err error
	}
	results := make(chan got, 2*len(stores))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, st := range stores {
		for range 2 {
			wg.Go(func() {
				<-start
				id, key, err := st.ExportSigningKey(ctx(t))
				results <- got{id, key, err}
			})
		}
	}
	close(start)
	wg.Wait()
	close(results)
	var first []byte
	for r := range results {
		ok(t, r.err, "export signing key")
		if r.id != parley.ExportSigningKeyID || len(r.key) != parley.ExportSigningKeySize {
			t.Fatalf("key id %q, %d bytes; want %q, %d bytes", r.id, len(r.key), parley.ExportSigningKeyID, parley.ExportSigningKeySize)
		}
		if first == nil {
			first = r.key
		} else if !slices.Equal(r.key, first) {
			t.Fatal("concurrent first calls got different keys")
		}
	}
	if slices.Equal(first, make([]byte, len(first))) {
		t.Error("the key is all zeros")
	}
	if n := e.db.Int(t, "SELECT count(*) FROM export_signing_keys"); n != 1 {
		t.Errorf("%d stored keys; want 1", n)
	}
	for i, st := range []parley.Store{e.st, e.db.Open(t)} {
		_, key, err := st.ExportSigningKey(ctx(t))
		ok(t, err, "export signing key again")
		if !slices.Equal(key, first) {
			t.Errorf("call %d after the first: another key", i)
		}
	}
}
