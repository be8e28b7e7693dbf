package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the driver the sqlite store uses
)

// sizeCommand prints the search index's size per message: on SQLite from
// dbstat (the pages of the index's tables and indexes), on PostgreSQL
// pg_total_relation_size of search_docs (its heap, TOAST and indexes, the
// GIN index included); beside it the events table's, for scale.
func sizeCommand(ctx context.Context, fs *flag.FlagSet, args []string, db *string, stdout io.Writer) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var parts []part
	var messages, rows int64
	var err error
	switch {
	case strings.HasPrefix(*db, "sqlite:"):
		parts, messages, rows, err = sqliteSizes(ctx, strings.TrimPrefix(*db, "sqlite:"))
	case strings.HasPrefix(*db, "postgres://"), strings.HasPrefix(*db, "postgresql://"):
		parts, messages, rows, err = postgresSizes(ctx, *db)
	default:
		return fmt.Errorf("--db %q: want sqlite:FILE or postgres://…", *db)
	}
	if err != nil {
		return err
	}
	var index int64
	fmt.Fprintf(stdout, "messages %d, index rows %d\n", messages, rows)
	for _, p := range parts {
		per := float64(p.bytes) / float64(max(messages, 1))
		fmt.Fprintf(stdout, "%-32s %12d bytes %8.1f bytes/message\n", p.name, p.bytes, per)
		if p.index {
			index += p.bytes
		}
	}
	fmt.Fprintf(stdout, "%-32s %12d bytes %8.1f bytes/message\n", "search index, all", index, float64(index)/float64(max(messages, 1)))
	return nil
}

// part is one table or index and its size; index marks the search index's.
type part struct {
	name  string
	bytes int64
	index bool
}

func sqliteSizes(ctx context.Context, file string) ([]part, int64, int64, error) {
	if _, err := os.Stat(file); err != nil {
		return nil, 0, 0, err
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: file}).EscapedPath()+"?mode=ro")
	if err != nil {
		return nil, 0, 0, err
	}
	defer db.Close()
	var messages, rows int64
	if err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM events WHERE kind = 'message'), (SELECT COUNT(*) FROM search_docs)`).Scan(&messages, &rows); err != nil {
		return nil, 0, 0, err
	}
	q, err := db.QueryContext(ctx, `SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC`)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("dbstat: %w", err)
	}
	defer q.Close()
	var parts []part
	var file64 int64
	for q.Next() {
		var p part
		if err := q.Scan(&p.name, &p.bytes); err != nil {
			return nil, 0, 0, err
		}
		file64 += p.bytes
		p.index = strings.HasPrefix(p.name, "search_") || strings.HasPrefix(p.name, "sqlite_autoindex_search_")
		if p.index || strings.HasPrefix(p.name, "events") {
			parts = append(parts, p)
		}
	}
	parts = append(parts, part{name: "all pages (the file)", bytes: file64})
	return parts, messages, rows, q.Err()
}

func postgresSizes(ctx context.Context, dsn string) ([]part, int64, int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, 0, 0, err
	}
	defer conn.Close(ctx)
	var messages, rows int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT COUNT(*) FROM events WHERE kind = 'message'), (SELECT COUNT(*) FROM search_docs)`).Scan(&messages, &rows); err != nil {
		return nil, 0, 0, err
	}
	q, err := conn.Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid), c.relname LIKE 'search%'
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r' AND (c.relname LIKE 'search%' OR c.relname = 'events')
		UNION ALL
		SELECT '  index ' || i.relname, pg_relation_size(i.oid), false
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = current_schema() AND t.relname LIKE 'search%'
		UNION ALL
		SELECT 'the database', pg_database_size(current_database()), false
		ORDER BY 1`)
	if err != nil {
		return nil, 0, 0, err
	}
	defer q.Close()
	var parts []part
	for q.Next() {
		var p part
		if err := q.Scan(&p.name, &p.bytes, &p.index); err != nil {
			return nil, 0, 0, err
		}
		parts = append(parts, p)
	}
	return parts, messages, rows, q.Err()
}
