package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sqlite"
	"github.com/parleychat/parley/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, backend{})
}

// TestContractFlushed runs the search checks with every send and edit
// moving its index row into FTS5 at once: TestContract finds most of its
// messages among the queued rows (search.go), this one through FTS5.
func TestContractFlushed(t *testing.T) {
	storetest.RunMatching(t, backend{flushAt: 1}, "search_")
}

// backend opens SQLite stores; flushAt, when set, is their search queue's
// (sqlite.SetSearchFlushAt).
type backend struct{ flushAt int }

func (b backend) New(t testing.TB, opts parley.Options) storetest.DB {
	t.Helper()
	file := filepath.Join(t.TempDir(), "parley.db")
	h := &handle{file: file, opts: opts, flushAt: b.flushAt}
	h.store = h.Open(t).(*sqlite.DB)
	raw, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	h.raw = raw
	return h
}

type handle struct {
	file    string
	opts    parley.Options
	flushAt int
	store   *sqlite.DB
	raw     *sql.DB
}

func (h *handle) Store() parley.Store { return h.store }

func (h *handle) Open(t testing.TB) parley.Store {
	t.Helper()
	db, err := h.OpenWith(t, h.opts)
	if err != nil {
		t.Fatalf("open %s: %v", h.file, err)
	}
	return db
}

func (h *handle) OpenWith(t testing.TB, opts parley.Options) (parley.Store, error) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), h.file, opts)
	if err != nil {
		return nil, err
	}
	if h.flushAt > 0 {
		sqlite.SetSearchFlushAt(db, h.flushAt)
	}
	t.Cleanup(func() { db.Close() })
	return db, nil
}

func (h *handle) Text(t testing.TB, query string, args ...any) string {
	t.Helper()
	var b []byte
	if err := h.raw.QueryRow(query, args...).Scan(&b); err != nil {
		t.Fatalf("query %q: %v", query, err)
	}
	return string(b)
}

func (h *handle) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := h.raw.Exec(query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func (h *handle) Int(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var n sql.NullInt64
	if err := h.raw.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("query %q: %v", query, err)
	}
	return n.Int64
}

func (h *handle) BackdateTokens(t testing.TB, d time.Duration) {
	t.Helper()
	h.Exec(t, `UPDATE tokens SET created_at = created_at - ?1, last_used_at = last_used_at - ?1, replaced_at = replaced_at - ?1`, d.Milliseconds())
}

func (h *handle) Backdate(t testing.TB, conv string, upTo int64, d time.Duration) {
	t.Helper()
	h.Exec(t, `UPDATE events SET created_at = created_at - ? WHERE conv_id = ? AND seq <= ?`, d.Milliseconds(), conv, upTo)
}
