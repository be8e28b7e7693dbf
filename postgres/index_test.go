package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// TestIndexesUsed asks PostgreSQL's planner how it runs the statements of
// postgres.IndexedStatements, exactly as the store runs them, and requires
// each to scan its index: disabling a user, replacing an install, a
// rollback's cursor clamp and the token sweep must not read their whole
// tables. The tables of a fresh database are empty, so sequential scans
// are switched off for the EXPLAIN (enable_seqscan only raises their cost:
// without a usable index the plan still is a Seq Scan).
func TestIndexesUsed(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx) // one session: SET holds for it
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	for _, st := range postgres.IndexedStatements {
		t.Run(st.Name, func(t *testing.T) {
			rows, err := conn.Query(ctx, "EXPLAIN "+st.Query, st.Args...)
			if err != nil {
				t.Fatalf("explain: %v", err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("explain: %v", err)
			}
			text := strings.Join(plan, "\n")
			if !strings.Contains(text, " "+st.Index+" ") && !strings.Contains(text, " "+st.Index+"\n") && !strings.HasSuffix(text, " "+st.Index) {
				t.Errorf("plan does not use index %s:\n%s", st.Index, text)
			}
		})
	}
}
