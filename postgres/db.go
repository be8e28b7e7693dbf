// Package postgres implements parley.Store on PostgreSQL (15 or later) with
// pgx and its connection pool, for deployments with several gateways in
// front of one database.
//
// Guarantees, beyond those of parley.Store:
//   - Every write is one READ COMMITTED transaction that first locks its
//     conversation row (a batch of sends: the rows of its conversations,
//     in id order, so batches do not deadlock). Writers that append events (Send, Recall, Edit,
//     React, membership changes) take FOR NO KEY UPDATE, which queues them on each other
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
// a lost connection, a timeout, a serialization or deadlock failure, a
// lock wait past lock_timeout (55P03), a session ended by
// idle_in_transaction_session_timeout (25P03) — is
// returned wrapped with the operation ("postgres: send: ...") and without a
// protocol code, which parley.ErrorCode reads as UNAVAILABLE: its outcome is
// unknown and the client retries with the same key.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sendqueue"
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

// Server-side guards set on every pooled connection (as run-time
// parameters of its startup message) unless the DSN sets them itself, e.g.
// postgres://…?lock_timeout=2s&idle_in_transaction_session_timeout=20s.
//
// A write of several statements (membership changes, Rollback, Purge, Edit,
// React, a Send that replies or may mention; a plain Send and Recall only
// in lab runs with store.before_commit armed) holds its
// conversation row lock across round trips to the gateway. A gateway that stops between them
// (SIGSTOP, a partition, a full GC pause) would hold the lock forever and
// queue every writer of the conversation behind it:
//   - DefaultLockTimeout bounds a writer's wait for a row lock: it fails
//     with SQLSTATE 55P03, which the store returns without a protocol code,
//     so the client gets UNAVAILABLE and retries with the same key. It is
//     half the default timeouts.store (10s), so the wait ends with an answer
//     the caller can still deliver, not with the caller's own deadline.
//   - DefaultIdleInTransactionTimeout ends the session of a transaction left
//     idle that long (SQLSTATE 25P03): the server rolls it back and its locks
//     go. A live gateway is never idle inside a transaction for more than a
//     round trip, and gives up on the whole store call after timeouts.store
//     (10s by default) anyway, rolling back; so a session idle for as long
//     as that belongs to a gateway that is not coming back in time.
const (
	DefaultLockTimeout              = "5s"
	DefaultIdleInTransactionTimeout = "10s"
)

// rollbackTimeout bounds a rollback. It runs on a context of its own: the
// caller's may be the one that expired.
const rollbackTimeout = 2 * time.Second

// rollbackContext returns a context for rolling back a transaction begun
// under ctx: ctx's values without its cancellation, and a short deadline.
func rollbackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
}

// DefaultConnectTimeout bounds one connection attempt when the DSN sets no
// connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// Unreachable reports whether err (from Open, or any call) means the
// database could not be reached or is not accepting work right now — a
// refused or dropped connection, a timeout, a server starting up or
// shutting down, too many connections — so the same call may succeed
// later. Errors of configuration (a bad DSN, a wrong password, a missing
// database) and of SQL are not: retrying cannot mend them.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pge *pgconn.PgError
	if errors.As(err, &pge) {
		switch {
		case strings.HasPrefix(pge.Code, "08"): // connection exception
			return true
		case pge.Code == "57P01", pge.Code == "57P02", pge.Code == "57P03": // admin/crash shutdown, cannot connect now
			return true
		case pge.Code == "53300": // too many connections
			return true
		}
		return false // the server answered: a decision, not an outage
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true // no server answered (a refusal by one is a PgError above)
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// DB is a parley.Store on a PostgreSQL database.
type DB struct {
	pool  *pgxpool.Pool
	opts  parley.Options
	sends *sendqueue.Queue // group commit of Send, sendLanes lanes
	stats searchStats      // search_docs' common lexemes (search.go)
	mover searchMover      // moves search_queue into search_docs (searchqueue.go)
}

// sendLanes is how many batches of sends a gateway runs at once. A lane
// is a hash of the conversation, so one conversation always takes the same
// lane (its order is the arrival order at the lane's leader) and senders in
// different conversations share a batch: one round trip and one commit for
// several sends, where one lane per conversation paid both for each send.
// Fewer lanes make bigger batches but make a send wait for its lane's
// running batch; more lanes shrink the batches back towards one send each.
//
// One lane: end to end through `parley serve` on a quiet 2-core machine
// (docs/benchmarks.md, "one send lane"), it gave batches twice as large as
// two lanes (7.8 against 3.8 sends at 16 senders, 31 against 14.5 at 64),
// about a third fewer context switches and a quarter less server CPU per
// send, more sends/s and a lower p99 at both 16 and 64 senders: a send's
// wait behind the running batch costs less than the round trip, commit and
// wake-ups a smaller batch pays per send. (On a machine loaded by other
// work, 2 lanes had matched 1 lane's throughput; the group commit section.)
const sendLanes = 1

// laneSeed hashes conversations to lanes; any seed is fine within a process.
var laneSeed = maphash.MakeSeed()

// laneKeys are the sendqueue.Queue keys of the lanes.
var laneKeys = func() (k [sendLanes]string) {
	for i := range k {
		k[i] = strconv.Itoa(i)
	}
	return k
}()

// sendLane is the sendqueue.Queue key of conv's lane.
func sendLane(conv string) string { return laneKeys[maphash.String(laneSeed, conv)%sendLanes] }

var (
	_ parley.Store       = (*DB)(nil)
	_ parley.SendBatcher = (*DB)(nil)
)

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
	params := cfg.ConnConfig.RuntimeParams
	if _, ok := params["lock_timeout"]; !ok {
		params["lock_timeout"] = DefaultLockTimeout
	}
	if _, ok := params["idle_in_transaction_session_timeout"]; !ok {
		params["idle_in_transaction_session_timeout"] = DefaultIdleInTransactionTimeout
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A server that does not answer (a dropped route, a stopped
		// host) must fail a connection attempt, not hang it: callers
		// retry (serve at start) or answer UNAVAILABLE.
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	db := &DB{pool: pool, opts: opts.WithDefaults()}
	db.sends = sendqueue.New(db.SendBatch, sendLane, sendqueue.DefaultMaxBatch)
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := db.sealSecrets(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	db.startMover()
	return db, nil
}

// Close stops the search queue's mover and closes the pool's connections.
func (db *DB) Close() error {
	db.stopMover()
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
	err = inTx(ctx, db.pool, func(tx pgx.Tx) error {
		// Two servers starting at once: the second waits here, then finds
		// the versions the first applied, however long that takes (no
		// lock_timeout: a migration's DDL may wait for running queries too).
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
			return err
		}
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
	return wrap(op, inTx(ctx, db.pool, fn))
}

// inTx runs fn in a transaction and commits it, like pgx.BeginFunc, but
// rolls back on a context of its own (rollbackContext): after ctx expired,
// a rollback under ctx would fail at once and cost the connection, or,
// worse, leave the locks held until the server notices.
func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// After a successful Commit this is a no-op (ErrTxClosed).
		rctx, cancel := rollbackContext(ctx)
		defer cancel()
		tx.Rollback(rctx)
	}()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
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
	if err == nil {
		// Every successful write asks: errors.As checks its target by
		// reflection on each call, nil or not.
		return false
	}
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

// Stat is the connection pool's state now, for the pool metrics
// (in use, idle, waits for a free connection).
func (db *DB) Stat() *pgxpool.Stat { return db.pool.Stat() }

// SendStats returns how many group-commit batches Send ran and how many
// sends they held (their ratio is the mean batch size; /metrics).
func (db *DB) SendStats() (batches, sends int64) { return db.sends.Stats() }
