// Package postgres implements parley.Store on PostgreSQL (15 or later) with
// pgx and its connection pool, for deployments with several gateways in
// front of one database.
//
// Guarantees, beyond those of parley.Store:
//   - Every write is one READ COMMITTED transaction that first locks its
//     conversation row. Writers that append events (Send, Recall, membership
//     changes) take FOR NO KEY UPDATE, which queues them on each other
//     exactly like FOR UPDATE but lets cursor moves (Ack, Read) and export
//     snapshots (CreateExport) — both FOR KEY SHARE — run beside them;
//     Rollback and Purge take FOR UPDATE and so exclude both (a purge must
//     see the pin of an export being created). Seqs
//     are therefore assigned and committed in order per conversation, and
//     each statement after the lock reads everything committed before it.
//   - Time is the database clock: created_at is clock_timestamp() of the
//     inserting statement, and the recall window and retention ages are
//     judged by clock_timestamp() inside the locked transaction.
//   - Reads work over indexes: a sync page costs O(page) index lookups per
//     visible range, a Convs page one statement that orders the caller's
//     conversations by activity and counts unread and reads the latest
//     message for the page's entries only, never with history.
//   - Open applies the embedded migrations (migrations/*.sql) in one
//     transaction under a transaction-level advisory lock, so servers that
//     start together do not race; applied versions are recorded in
//     schema_migrations.
//
// Driver errors are translated once, here: a unique violation (SQLSTATE
// 23505) on users is ALREADY_EXISTS, on conversations ALREADY_EXISTS, on the
// request-key index events_idempotency the dup reply of a replayed request
// (the transaction is retried and finds the original); 22021 (a NUL
// character, which PostgreSQL text cannot store) is INVALID_ARGUMENT.
// Every other error —
// a lost connection, a timeout, a serialization or deadlock failure — is
// returned wrapped with the operation ("postgres: send: ...") and without a
// protocol code, which parley.ErrorCode reads as UNAVAILABLE: its outcome is
// unknown and the client retries with the same key.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the schema migrations Open applies: the files
// NNNN_name.sql, applied in name order. Test helpers (postgres/pgtest) hash
// them to tell a template database built for another schema.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the directory is embedded: cannot happen
	}
	return sub
}

// migrationLock is the advisory lock key that serialises migrations of one
// database ("parley.m" in ASCII).
const migrationLock int64 = 0x7061726c65792e6d

// DefaultMaxConns is the pool size when the DSN sets no pool_max_conns.
const DefaultMaxConns = 32

// DB is a parley.Store on a PostgreSQL database.
type DB struct {
	pool *pgxpool.Pool
	opts parley.Options
}

var _ parley.Store = (*DB)(nil)

// Open connects to the database at dsn (a postgres:// URL or keyword/value
// string; pgxpool settings such as pool_max_conns are accepted) and applies
// pending migrations.
func Open(ctx context.Context, dsn string, opts parley.Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// pgxpool's default (4 on a small machine) starves a gateway:
		// concurrent sends to different conversations wait for a
		// connection, not for PostgreSQL.
		cfg.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	db := &DB{pool: pool, opts: opts.WithDefaults()}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// Close closes the pool's connections.
func (db *DB) Close() error {
	db.pool.Close()
	return nil
}

// migrate applies the embedded migrations that schema_migrations lacks, in
// version order, in one transaction.
func (db *DB) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	sort.Strings(names)
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// Two servers starting at once: the second waits here, then finds
		// the versions the first applied.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    BIGINT PRIMARY KEY,
			applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return err
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		done := make(map[int64]bool, len(applied))
		for _, v := range applied {
			done[v] = true
		}
		for _, name := range names {
			version, err := strconv.ParseInt(strings.SplitN(path.Base(name), "_", 2)[0], 10, 64)
			if err != nil {
				return fmt.Errorf("migration %s: name must start with a number", name)
			}
			if done[version] {
				continue
			}
			text, err := migrations.ReadFile(name)
			if err != nil {
				return err
			}
			// Exec without arguments uses the simple protocol, which runs
			// a file of several statements.
			if _, err := tx.Exec(ctx, string(text)); err != nil {
				return fmt.Errorf("migration %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, version); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

// write runs fn in one transaction. Errors with a protocol code pass
// through; others are wrapped with op.
func (db *DB) write(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	return wrap(op, pgx.BeginFunc(ctx, db.pool, fn))
}

// wrap returns err unchanged when it carries a protocol code, else wrapped
// with the operation: an internal error, UNAVAILABLE to clients.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *parley.Error
	if errors.As(err, &pe) {
		return err
	}
	var pge *pgconn.PgError
	if errors.As(err, &pge) && pge.Code == sqlstateCharacterNotInRepertoire {
		// Input is valid UTF-8 by then, so this is U+0000, which no
		// PostgreSQL text column can hold. Repeating cannot succeed:
		// terminal, not an internal error a client would retry forever.
		return errNUL
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

var errNUL = parley.Errorf(parley.CodeInvalidArgument, "text must not contain the NUL character (U+0000)")

// SQLSTATE codes the store answers itself.
const (
	sqlstateUniqueViolation          = "23505"
	sqlstateCharacterNotInRepertoire = "22021" // "invalid byte sequence for encoding": 0x00
)

// isUnique reports whether err is a unique violation, on one of the named
// constraints or indexes when any are given.
func isUnique(err error, constraints ...string) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != sqlstateUniqueViolation {
		return false
	}
	if len(constraints) == 0 {
		return true
	}
	for _, c := range constraints {
		if pe.ConstraintName == c {
			return true
		}
	}
	return false
}

// optString and optInt turn zero values into SQL NULL.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optInt(n int64) *int64 {
	if n == 0 {
		return nil
	}
	return &n
}

// ms turns a database time into what the store hands out: UTC at
// millisecond precision, as the wire carries it and as SQLite keeps it.
func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
