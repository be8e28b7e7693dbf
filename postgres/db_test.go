package postgres_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/storetest"
)

func TestContract(t *testing.T) {
	pgtest.Server(t) // skip, with instructions, without a server
	storetest.Run(t, backend{})
}

// TestContractMoved runs the search checks with every send's index row
// moved from the queue into search_docs before the send returns:
// TestContract finds most of its messages among the queued rows
// (searchqueue.go), this one through the indexes.
func TestContractMoved(t *testing.T) {
	pgtest.Server(t)
	storetest.RunMatching(t, backend{moveSync: true}, "search_")
}

// backend gives every test a database of its own (pgtest.DSN); with
// moveSync, its stores move the search queue at once
// (postgres.SetSearchMoveSync).
type backend struct{ moveSync bool }

func (b backend) New(t testing.TB, opts parley.Options) storetest.DB {
	t.Helper()
	h := &handle{dsn: pgtest.DSN(t), opts: opts, moveSync: b.moveSync}
	h.store = h.Open(t).(*postgres.DB)
	cfg, err := pgxpool.ParseConfig(h.dsn)
	if err != nil {
		t.Fatalf("raw pool: %v", err)
	}
	cfg.MaxConns = 2
	raw, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("raw pool: %v", err)
	}
	t.Cleanup(raw.Close)
	h.raw = raw
	return h
}

type handle struct {
	dsn      string
	opts     parley.Options
	store    *postgres.DB
	raw      *pgxpool.Pool
	moveSync bool
}

func (h *handle) Store() parley.Store { return h.store }

func (h *handle) Open(t testing.TB) parley.Store {
	t.Helper()
	db, err := h.OpenWith(t, h.opts)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	return db
}

func (h *handle) OpenWith(t testing.TB, opts parley.Options) (parley.Store, error) {
	t.Helper()
	db, err := postgres.Open(context.Background(), h.dsn, opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { db.Close() })
	if h.moveSync {
		postgres.SetSearchMoveSync(db)
	}
	return db, nil
}

func (h *handle) Text(t testing.TB, query string, args ...any) string {
	t.Helper()
	var b []byte
	if err := h.raw.QueryRow(context.Background(), indexRows(placeholders(query)), args...).Scan(&b); err != nil {
		t.Fatalf("query %q: %v", query, err)
	}
	return string(b)
}

func (h *handle) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := h.raw.Exec(context.Background(), placeholders(query), args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func (h *handle) Int(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var v any
	query = indexRows(query)
	if err := h.raw.QueryRow(context.Background(), placeholders(query), args...).Scan(&v); err != nil {
		t.Fatalf("query %q: %v", query, err)
	}
	switch n := v.(type) {
	case nil:
		return 0
	case int64:
		return n
	case int32:
		return int64(n)
	case int16:
		return int64(n)
	case bool:
		if n {
			return 1
		}
		return 0
	case float64:
		return int64(n)
	}
	// numeric (sum, avg) and anything else: let the server convert.
	var n int64
	if err := h.raw.QueryRow(context.Background(), `SELECT coalesce((`+placeholders(query)+`)::bigint, 0)`, args...).Scan(&n); err != nil {
		t.Fatalf("query %q as bigint: %v", query, err)
	}
	return n
}

func (h *handle) BackdateTokens(t testing.TB, d time.Duration) {
	t.Helper()
	h.Exec(t, `UPDATE tokens SET created_at = created_at - ?::bigint * interval '1 microsecond',
		last_used_at = last_used_at - ?::bigint * interval '1 microsecond',
		replaced_at = replaced_at - ?::bigint * interval '1 microsecond'`, d.Microseconds(), d.Microseconds(), d.Microseconds())
}

func (h *handle) Backdate(t testing.TB, conv string, upTo int64, d time.Duration) {
	t.Helper()
	h.Exec(t, `UPDATE events SET created_at = created_at - ?::bigint * interval '1 microsecond' WHERE conv_id = ? AND seq <= ?`,
		d.Microseconds(), conv, upTo)
}

// indexRows makes a query of the suite that reads search_docs read the
// rows of the search queue as well (searchqueue.go): the index rows the
// suite counts are the indexed and the queued ones, as on SQLite, whose
// search_docs holds both.
func indexRows(q string) string {
	return strings.ReplaceAll(q, "FROM search_docs", `FROM (SELECT conv_id, seq, vseq, sender_user, at FROM search_docs
		UNION ALL SELECT conv_id, seq, seq, sender_user, at FROM search_queue) search_docs`)
}

// placeholders turns the suite's ? placeholders into $1..$n, leaving
// quoted strings and identifiers alone.
func placeholders(q string) string {
	var b strings.Builder
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
