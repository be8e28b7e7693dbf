// Package sqlite implements parley.Store on an embedded SQLite file with the
// pure-Go driver modernc.org/sqlite, so the default server needs nothing but
// its own binary.
//
// The file runs in WAL mode with synchronous=FULL (an acknowledged message
// survives a power cut, not only a crash). Writes go through one writer
// connection and begin with BEGIN IMMEDIATE, so the write lock is taken up
// front: the first statement of a write transaction is the conversation
// "lock" of the contract, and a second process on the same file (say
// `parley user add` next to a server) waits on the busy timeout instead of
// failing. Reads use a small pool of reader connections, each read a
// transaction on one WAL snapshot.
//
// Driver errors are translated: unique violations become the contract's
// answers (ALREADY_EXISTS, or the dup reply of a replayed send); everything
// else is returned wrapped with the operation, an internal error.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sendqueue"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/*.sql
var migrations embed.FS

// nowMS is the database clock in Unix milliseconds. SQLite keeps 'now'
// fixed for the duration of one statement.
const nowMS = "CAST(unixepoch('subsec') * 1000 AS INTEGER)"

// BusyTimeout is how long a write waits for another process's write lock
// before it fails (an internal error: UNAVAILABLE to clients).
const BusyTimeout = 10 * time.Second

// DB is a parley.Store on one SQLite file.
type DB struct {
	w *sql.DB // the single writer connection
	// turn hands the writer to waiting writers first come, first served:
	// database/sql gives a freed connection to a random waiter, which made
	// the p99 of 64 concurrent senders six times the median. Goroutines
	// blocked on a channel receive are woken in order.
	turn chan struct{}
	// prepared holds the statements of the send path, prepared once on the
	// writer connection: parsing them again on every call cost a fifth of
	// the server's CPU, half of it inside the writer's turn.
	prepared map[string]*sql.Stmt
	r        *sql.DB // readers
	opts     parley.Options
	sends    *sendqueue.Queue // group commit of Send: one lane, the writer
	queue    searchQueue      // the search index's queued rows (search.go): the writer's
}

var (
	_ parley.Store       = (*DB)(nil)
	_ parley.SendBatcher = (*DB)(nil)
)

// Open opens (creating if needed) the database file at path and applies
// pending migrations.
func Open(ctx context.Context, file string, opts parley.Options) (*DB, error) {
	if file == "" || strings.HasPrefix(file, ":memory:") || strings.Contains(file, "mode=memory") {
		return nil, errors.New("sqlite: a file path is required (an in-memory database is private to one connection)")
	}
	if err := createPrivate(file); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", file, err)
	}
	base := "file:" + (&url.URL{Path: file}).EscapedPath() + "?" + url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()),
			"journal_mode(WAL)",
			"synchronous(FULL)",
			"foreign_keys(ON)",
		},
	}.Encode()
	w, err := sql.Open("sqlite", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", file, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", file, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	db := &DB{w: w, r: r, opts: opts.WithDefaults(), turn: make(chan struct{}, 1)}
	db.sends = sendqueue.New(db.SendBatch, func(string) string { return "" }, sendqueue.DefaultMaxBatch)
	db.turn <- struct{}{}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.sealSecrets(ctx); err != nil {
		db.Close()
		return nil, err
	}
	db.queue.flushAt = searchFlushAt
	if err := db.w.QueryRowContext(ctx, `SELECT count(*) FROM search_queue`).Scan(&db.queue.n); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	db.prepared = make(map[string]*sql.Stmt, len(hotWrites))
	for _, q := range hotWrites {
		st, err := db.w.PrepareContext(ctx, q)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlite: prepare: %w", err)
		}
		db.prepared[q] = st
	}
	return db, nil
}

// createPrivate creates file, empty and readable by its owner alone, when
// it does not exist: the database holds password hashes, tokens' hashes and
// every message. SQLite gives the -wal and -shm files it creates beside it
// the database file's permissions. An existing file keeps its mode.
func createPrivate(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// Close closes the connections.
func (db *DB) Close() error {
	for _, st := range db.prepared {
		st.Close()
	}
	return errors.Join(db.r.Close(), db.w.Close())
}

// txn is a transaction whose statements in prepared (write transactions:
// DB.prepared) run as statements prepared once, and the rest as given.
type txn struct {
	*sql.Tx
	prepared map[string]*sql.Stmt
}

func (t *txn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.prepared[query]; st != nil {
		return t.Tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

func (t *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.prepared[query]; st != nil {
		return t.Tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.prepared[query]; st != nil {
		return t.Tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

// hotWrites are the statements of a send and a recall.
var hotWrites = []string{qLoadConv, qKeyLookup, qTombstone, qOpenMember, qInsertEvent, qAdvanceConv, qDocSlots,
	qAttachable, qInsertLink}

// migrate applies the embedded migrations that schema_migrations lacks, each
// in its own immediate transaction.
func (db *DB) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	if _, err := db.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	for _, name := range names {
		version, err := strconv.Atoi(strings.SplitN(path.Base(name), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: name must start with a number", name)
		}
		text, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = db.write(ctx, "migrate", func(tx *txn) error {
			var done int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, version).Scan(&done); err != nil || done > 0 {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(text)); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, `+nowMS+`)`, version)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// write runs fn in an immediate transaction on the writer connection.
// Errors with a protocol code pass through; others are wrapped with op.
func (db *DB) write(ctx context.Context, op string, fn func(tx *txn) error) error {
	select {
	case <-db.turn:
		defer func() { db.turn <- struct{}{} }()
	case <-ctx.Done():
		return fmt.Errorf("sqlite: %s: waiting for the writer: %w", op, ctx.Err())
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", op, err)
	}
	if err := fn(&txn{tx, db.prepared}); err != nil {
		tx.Rollback()
		return wrap(op, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: %s: commit: %w", op, err)
	}
	return nil
}

// read runs fn in a read transaction: every statement sees one snapshot.
func (db *DB) read(ctx context.Context, op string, fn func(tx *txn) error) error {
	tx, err := db.r.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", op, err)
	}
	defer tx.Rollback()
	if err := fn(&txn{tx, nil}); err != nil {
		return wrap(op, err)
	}
	return nil
}

func wrap(op string, err error) error {
	var pe *parley.Error
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// isUnique reports whether err is a unique or primary-key violation.
func isUnique(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// errDupKey reports a unique violation on the request-key index during an
// insert: the caller retries, and the retry answers with the dup reply.
var errDupKey = errors.New("request key inserted concurrently")

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// Stats is the state of the two connection pools now, the single writer
// and the readers, for the pool metrics.
func (db *DB) Stats() (writer, readers sql.DBStats) { return db.w.Stats(), db.r.Stats() }

// SendStats returns how many group-commit batches Send ran and how many
// sends they held (their ratio is the mean batch size; /metrics).
func (db *DB) SendStats() (batches, sends int64) { return db.sends.Stats() }
