package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// A queued row survives its server: sends committed while no mover runs
// stay queued and searchable, a move killed before its commit loses none of
// them and indexes none, and the next server's mover moves each exactly
// once.
func TestSearchQueueSurvivesCrash(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	a, err := postgres.Open(ctx, dsn, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	postgres.StopSearchMover(a) // the server's mover is gone: what it queues stays
	ana := parley.Principal{User: "ana", DeviceID: "d", InstallID: "i"}
	if _, err := a.CreateUser(ctx, parley.NewUser{ID: "ana", Password: "password-ana"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-q", Kind: parley.KindGroup}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		if _, err := a.Send(ctx, ana, parley.SendRequest{Conv: "c-q", CMID: fmt.Sprintf("m%d", i), Body: fmt.Sprintf("kumquat %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	pool := postgres.Pool(a)
	count := func(q string) int {
		t.Helper()
		var c int
		if err := pool.QueryRow(ctx, q).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	found := func(db *postgres.DB) int {
		t.Helper()
		page, err := db.Search(ctx, ana, parley.SearchRequest{Query: "kumquat", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Hits)
	}
	if q, d := count(`SELECT count(*) FROM search_queue`), count(`SELECT count(*) FROM search_docs`); q != n || d != 0 || found(a) != n {
		t.Fatalf("before a move: %d queued, %d indexed, %d found; want %d, 0, %d", q, d, found(a), n, n)
	}

	// A move whose connection dies before it commits.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var moved int
	if err := tx.QueryRow(ctx, postgres.MoveSQL, 10, postgres.MoveLock).Scan(&moved); err != nil || moved != 10 {
		t.Fatalf("move in a transaction: %d rows (%v)", moved, err)
	}
	pid := conn.Conn().PgConn().PID()
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the killed move committed")
	}
	conn.Release()
	if q, d := count(`SELECT count(*) FROM search_queue`), count(`SELECT count(*) FROM search_docs`); q != n || d != 0 {
		t.Fatalf("after the killed move: %d queued, %d indexed; want %d, 0", q, d, n)
	}

	// The next server's mover resumes: every row indexed once, none queued.
	b, err := postgres.Open(ctx, dsn, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	deadline := time.Now().Add(30 * time.Second)
	for count(`SELECT count(*) FROM search_queue`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the new server's mover did not move the queue")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d, k := count(`SELECT count(*) FROM search_docs`), count(`SELECT count(DISTINCT (conv_id, seq, vseq)) FROM search_docs`); d != n || k != n {
		t.Fatalf("after the move: %d rows indexed, %d distinct; want %d", d, k, n)
	}
	if got := found(b); got != n {
		t.Errorf("after the move: %d found, want %d", got, n)
	}
}

// Writers that delete index rows delete queued ones in their transaction:
// a recall, a purge, a rollback and a rebuild leave no queued row of what
// they removed, and the queue never holds an edit.
func TestSearchQueueDeletes(t *testing.T) {
	ctx := context.Background()
	e := newSearchEnv(t)
	db, err := postgres.Open(ctx, e.dsn, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	postgres.StopSearchMover(db)
	postgres.StopSearchMover(e.db)
	e.db = db
	queued := func(q string, args ...any) int {
		t.Helper()
		var c int
		if err := e.raw.QueryRow(ctx, q, args...).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	var seqs []int64
	for i := range 6 {
		seqs = append(seqs, e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: fmt.Sprintf("quince %d", i)}))
	}
	if _, err := db.Edit(ctx, e.ana, parley.EditRequest{Conv: "c-x", Target: seqs[5], CMID: "e1", Body: "quince edited"}); err != nil {
		t.Fatal(err)
	}
	if q, d := queued(`SELECT count(*) FROM search_queue`), queued(`SELECT count(*) FROM search_docs`); q != 6 || d != 1 {
		t.Fatalf("after six sends and an edit: %d queued, %d indexed; want 6 and the edit's 1", q, d)
	}
	if _, err := db.Recall(ctx, e.ana, parley.RecallRequest{Conv: "c-x", Target: seqs[4], CMID: "r1"}); err != nil {
		t.Fatal(err)
	}
	if n := queued(`SELECT count(*) FROM search_queue WHERE seq = $1`, seqs[4]); n != 0 {
		t.Errorf("recalled message still queued")
	}
	if _, err := db.Rollback(ctx, "c-x", seqs[3]); err != nil {
		t.Fatal(err)
	}
	if n := queued(`SELECT count(*) FROM search_queue`); n != 0 {
		t.Errorf("after the rollback: %d queued, want 0 (rebuilt into search_docs)", n)
	}
	e.wantHits(t, e.ana, "quince", "c-x/6 quince 3", "c-x/5 quince 2", "c-x/4 quince 1", "c-x/3 quince 0")
	late := e.send(t, e.ana, parley.SendRequest{Conv: "c-x", Body: "quince late"})
	if err := db.SetRetention(ctx, "c-x", parley.Retention{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Purge(ctx, "c-x"); err != nil {
		t.Fatal(err)
	}
	if n := queued(`SELECT count(*) FROM search_docs WHERE conv_id = 'c-x'`) + queued(`SELECT count(*) FROM search_queue WHERE conv_id = 'c-x'`); n != 1 {
		t.Errorf("after the purge: %d index rows, want the last message's 1", n)
	}
	e.wantHits(t, e.ana, "quince", fmt.Sprintf("c-x/%d quince late", late))
}
