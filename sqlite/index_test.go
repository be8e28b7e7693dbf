package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sqlite"
)

// TestIndexesUsed asks SQLite's planner how it runs the statements of
// sqlite.IndexedStatements, exactly as the store runs them, and requires
// each to search its index: disabling a user, replacing an install, a
// rollback's cursor clamp and the token sweep must not scan their tables.
func TestIndexesUsed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "parley.db")
	db, err := sqlite.Open(context.Background(), file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	raw, err := sql.Open("sqlite", "file:"+file)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, st := range sqlite.IndexedStatements {
		t.Run(st.Name, func(t *testing.T) {
			args := make([]any, st.Args)
			for i := range args {
				args[i] = "x"
			}
			rows, err := raw.Query("EXPLAIN QUERY PLAN "+st.Query, args...)
			if err != nil {
				t.Fatalf("explain: %v", err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			if !strings.Contains(text, "INDEX "+st.Index+" ") && !strings.Contains(text, "INDEX "+st.Index+"\n") && !strings.HasSuffix(text, "INDEX "+st.Index) {
				t.Errorf("plan does not use index %s:\n%s", st.Index, text)
			}
		})
	}
}
