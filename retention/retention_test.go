package retention_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/retention"
	"github.com/parleychat/parley/sqlite"
)

// backends runs fn on SQLite and, when PARLEY_TEST_POSTGRES is set, on
// PostgreSQL (skipped with instructions otherwise). open opens another
// store on the same fresh database each time it is called.
func backends(t *testing.T, fn func(t *testing.T, open func() parley.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "parley.db")
		fn(t, func() parley.Store {
			s, err := sqlite.Open(context.Background(), file, parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.Server(t) // skips without PARLEY_TEST_POSTGRES
		dsn := pgtest.DSN(t)
		fn(t, func() parley.Store {
			s, err := postgres.Open(context.Background(), dsn, parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// must returns v; a setup call that fails panics (the test fails with
// the error and its stack).
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("setup call failed: %v (code %s)", err, parley.ErrorCode(err)))
	}
	return v
}

// world is a store with ana (owner of every conversation) logged in.
func world(t *testing.T, st parley.Store) parley.Principal {
	t.Helper()
	ctx := t.Context()
	for _, u := range []parley.NewUser{{ID: "ana", Password: "password-ana"}, {ID: "ben"}} {
		if _, err := st.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	s, err := st.Login(ctx, parley.LoginRequest{Login: "ana", Password: "password-ana", DeviceID: "d1", InstallID: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	return s.Principal
}

// systemPurges returns the targets of the worker's audit entries with
// their outcomes.
func systemPurges(t *testing.T, st parley.Store) []string {
	t.Helper()
	var out []string
	for _, e := range must(st.Audit(t.Context(), parley.AuditQuery{Limit: parley.MaxAuditPage})) {
		if e.Operator == retention.SystemOperator {
			if e.Action != "conv.purge" {
				t.Errorf("system audit entry %+v: want action conv.purge", e)
			}
			out = append(out, e.Target+":"+e.Outcome)
		}
	}
	slices.Sort(out)
	return out
}

// TestWorkerPurgesByPolicy: a round purges exactly what each policy no
// longer keeps (tombstones written: a late resend is ORIGINAL_EXPIRED),
// leaves conversations without a policy alone, audits each purge as the
// system (pending before, ok after), and does nothing more in the same
// round.
func TestWorkerPurgesByPolicy(t *testing.T) {
	backends(t, func(t *testing.T, open func() parley.Store) {
		ctx := t.Context()
		st := open()
		ana := world(t, st)
		for _, c := range []string{"keep2", "none"} {
			must(st.CreateConversation(ctx, ana, parley.NewConversation{ID: c, Kind: parley.KindGroup, Title: c, Members: []string{"ben"}}))
			for i := range 5 {
				must(st.Send(ctx, ana, parley.SendRequest{Conv: c, CMID: fmt.Sprintf("m%d", i), Body: "hello"}))
			}
		}
		// seqs: 1, 2 joins; 3..7 messages m0..m4. KeepLast 2 keeps 6 and 7.
		if err := st.SetRetention(ctx, "keep2", parley.Retention{KeepLast: 2}); err != nil {
			t.Fatal(err)
		}

		w := retention.New(retention.Options{Store: st, Every: time.Hour})
		if n, err := w.Round(ctx); n != 1 || err != nil {
			t.Fatalf("round: %d purged, %v; want 1", n, err)
		}
		page := must(st.Sync(ctx, ana, parley.SyncRequest{Conv: "keep2", Limit: 50}))
		var seqs []int64
		for _, ev := range page.Events {
			seqs = append(seqs, ev.Seq)
		}
		if !slices.Equal(seqs, []int64{6, 7}) || page.MinSeq != 6 {
			t.Errorf("keep2 after the round: seqs %v min_seq %d; want [6 7] and 6", seqs, page.MinSeq)
		}
		_, err := st.Send(ctx, ana, parley.SendRequest{Conv: "keep2", CMID: "m0", Body: "hello"})
		if parley.ErrorCode(err) != parley.CodeOriginalExpired {
			t.Errorf("late resend of a purged message: %v, want ORIGINAL_EXPIRED", err)
		}
		if c := must(st.Conversation(ctx, "none")); c.MinSeq != 1 || c.Head != 7 {
			t.Errorf("a conversation without a policy changed: %+v", c)
		}
		if got, want := systemPurges(t, st), []string{"keep2:ok"}; !slices.Equal(got, want) {
			t.Errorf("system audit entries %q, want %q", got, want)
		}

		// The same round again: nothing claimed, nothing audited.
		if n, err := w.Round(ctx); n != 0 || err != nil {
			t.Errorf("second round in the same window: %d purged, %v", n, err)
		}
		if got := systemPurges(t, st); len(got) != 1 {
			t.Errorf("system audit entries after a second round: %q", got)
		}
	})
}

// TestWorkersShareRounds: several workers on one database (as several
// gateways) run a round at the same time: each conversation with a policy
// is purged once in all, audited once, and no worker fails.
func TestWorkersShareRounds(t *testing.T) {
	backends(t, func(t *testing.T, open func() parley.Store) {
		ctx := t.Context()
		st := open()
		ana := world(t, st)
		var want []string
		for i := range 30 {
			id := fmt.Sprintf("c%02d", i)
			must(st.CreateConversation(ctx, ana, parley.NewConversation{ID: id, Kind: parley.KindGroup, Title: id}))
			must(st.Send(ctx, ana, parley.SendRequest{Conv: id, CMID: "m", Body: "x"}))
			if err := st.SetRetention(ctx, id, parley.Retention{KeepLast: 1}); err != nil {
				t.Fatal(err)
			}
			want = append(want, id+":ok")
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		for range 3 {
			w := retention.New(retention.Options{Store: open(), Every: time.Hour})
			wg.Go(func() {
				n, err := w.Round(ctx)
				if err != nil {
					t.Errorf("round: %v", err)
				}
				mu.Lock()
				total += n
				mu.Unlock()
			})
		}
		wg.Wait()
		if total != len(want) {
			t.Errorf("workers purged %d conversations in all, want %d", total, len(want))
		}
		if got := systemPurges(t, st); !slices.Equal(got, want) {
			t.Errorf("system audit entries %q, want each conversation once: %q", got, want)
		}
		for i := range 30 {
			if c := must(st.Conversation(ctx, fmt.Sprintf("c%02d", i))); c.MinSeq != c.Head {
				t.Errorf("%s: min_seq %d head %d, want only the last seq kept", c.ID, c.MinSeq, c.Head)
			}
		}
	})
}

// TestRunTicks: Run purges by itself every interval, and does nothing
// (returns at once) when the interval is 0.
func TestRunTicks(t *testing.T) {
	backends(t, func(t *testing.T, open func() parley.Store) {
		ctx := t.Context()
		st := open()
		ana := world(t, st)
		must(st.CreateConversation(ctx, ana, parley.NewConversation{ID: "c", Kind: parley.KindGroup, Title: "c"}))
		must(st.Send(ctx, ana, parley.SendRequest{Conv: "c", CMID: "m", Body: "x"}))
		if err := st.SetRetention(ctx, "c", parley.Retention{KeepLast: 1}); err != nil {
			t.Fatal(err)
		}
		retention.New(retention.Options{Store: st}).Run(ctx) // Every 0: off, returns

		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { retention.New(retention.Options{Store: st, Every: 50 * time.Millisecond}).Run(rctx) })
		t.Cleanup(func() { cancel(); wg.Wait() })
		deadline := time.Now().Add(10 * time.Second)
		for must(st.Conversation(ctx, "c")).MinSeq != 2 {
			if time.Now().After(deadline) {
				t.Fatal("the worker did not purge within 10s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
