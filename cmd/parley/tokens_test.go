package main

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sqlite"
)

// sweepRecorder passes SweepTokens to the real store and reports what each
// call deleted.
type sweepRecorder struct {
	parley.Store
	calls chan int
}

func (r sweepRecorder) SweepTokens(ctx context.Context, limit int) (int, error) {
	n, err := r.Store.SweepTokens(ctx, limit)
	r.calls <- n
	return n, err
}

// TestSweepTokens: serve's sweeper deletes expired tokens at once when it
// starts, in calls of at most batch rows, at most batches calls per run,
// and leaves live tokens alone; the rest goes on the next run.
func TestSweepTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "parley.db")
	ctx := t.Context()
	store, err := sqlite.Open(ctx, file, parley.Options{TokenIdle: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.CreateUser(ctx, parley.NewUser{ID: "ana", Password: "correct horse"}); err != nil {
		t.Fatal(err)
	}
	login := func(device string) string {
		s, err := store.Login(ctx, parley.LoginRequest{Login: "ana", Password: "correct horse", DeviceID: device, InstallID: "i1"})
		if err != nil {
			t.Fatal(err)
		}
		return s.Token
	}
	for _, d := range []string{"d1", "d2", "d3", "d4", "d5"} {
		login(d)
	}
	raw, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE tokens SET last_used_at = last_used_at - ?`, (4 * time.Hour).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	live := login("d6")
	count := func() int {
		t.Helper()
		var n int
		if err := raw.QueryRow(`SELECT count(*) FROM tokens`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	run := func(want []int) {
		t.Helper()
		rec := sweepRecorder{Store: store, calls: make(chan int, 10)}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sweepTokens(rctx, rec, time.Hour, 2, 2, slog.New(slog.DiscardHandler))
		}()
		var got []int
		for range want {
			select {
			case n := <-rec.calls:
				got = append(got, n)
			case <-time.After(10 * time.Second):
				t.Fatalf("sweep calls %v, want %v", got, want)
			}
		}
		cancel()
		<-done
		close(rec.calls)
		for n := range rec.calls {
			got = append(got, n)
		}
		if !slices.Equal(got, want) {
			t.Errorf("one run's sweep calls deleted %v, want %v", got, want)
		}
	}
	run([]int{2, 2}) // the run stops at its bound, with one expired token left
	if n := count(); n != 2 {
		t.Errorf("%d tokens after the first run, want 2", n)
	}
	run([]int{1})
	if n := count(); n != 1 {
		t.Errorf("%d tokens after the second run, want 1", n)
	}
	if _, err := store.Authenticate(ctx, live); err != nil {
		t.Errorf("the live token: %v", err)
	}
}
