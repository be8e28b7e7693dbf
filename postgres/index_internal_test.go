package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// IndexedStatements are statements the store runs that must be served by
// an index, by the index's name: each scanned its whole table before
// migration 0004. Args are values for the statement's parameters.
var IndexedStatements = []struct {
	Name, Query, Index string
	Args               []any
}{
	{"disable user: revoke tokens", qSetDisabled, "tokens_by_user", []any{true, "ana"}},
	{"login: mark replaced install", qMarkReplaced, "tokens_by_user", []any{"ana", "d1", "i2"}},
	{"rollback: clamp delivered cursors", qClampCursors[0], "delivered_cursors_by_conv", []any{"c", int64(3)}},
	{"rollback: clamp read cursors", qClampCursors[1], "read_cursors_by_conv", []any{"c", int64(3)}},
	{"sweep: idle tokens", qSweepIdle, "tokens_idle", []any{int64(1000), int64(100)}},
	{"sweep: replaced installs", qSweepReplaced, "tokens_replaced", []any{int64(1000), int64(100)}},
	// Migration 0006: the admin listings page over byte-order indexes; the
	// retention claim walks the conversations with a policy.
	{"admin: users page", qAdminUsers, "users_id_bytes", []any{"", 51}},
	{"admin: users last seen", qAdminUsers, "tokens_by_user", []any{"", 51}},
	{"admin: users files", qAdminUsers, "files_by_owner", []any{"", 51}},
	{"admin: convs page", qAdminConvs, "conversations_id_bytes", []any{"", 51}},
	{"admin: exports page", qAdminExports, "export_jobs_id_bytes", []any{"", 51}},
	{"admin: hooks page", qAdminHooks, "hooks_id_bytes", []any{"", 51}},
	{"retention: claim", qClaimRetention, "conversations_with_policy", []any{int64(600000), 50}},
	// Migration 0009: derived state is read per message of a page, never
	// by walking the log.
	{"derived: edits and reactions", derivedSQL, "events_targets", []any{"c", []int64{1}, []int64{100}, []int64{3, 4}}},
	{"derived: replies", derivedSQL, "events_replies", []any{"c", []int64{1}, []int64{100}, []int64{3, 4}}},
	{"versions: edits", versionsSQL, "events_targets", []any{"c", []int64{1}, []int64{100}, int64(3)}},
	{"thread: replies", threadSQL, "events_replies", []any{"c", []int64{1}, []int64{100}, 51, int64(3)}},
	{"convs: unread mentions", convsSQL, "mentions_pkey", []any{"ana", "d1", parley.UnreadCap + 1, "", int64(0), 51}},
	{"rollback: reactions", qRebuildReactions, "events_targets", []any{"c", int64(3)}},
	// Migration 0014: a file's access is decided over its links and the
	// reader's periods; the quota sums the owner's files; the collector
	// walks each state oldest first; recall, purge and rollback find a
	// message's links by seq, and a rollback the messages with files.
	{"file: access by link", fileSQL, "file_links_pkey", []any{"f", "ana"}},
	{"file: access in periods", fileSQL, "periods_by_user", []any{"f", "ana"}},
	{"upload: quota sum", createFileSQL, "files_by_owner", []any{"f", "ana", "a.txt", int64(10), int64(100)}},
	{"stale files", staleSQL, "files_stale", []any{time.Unix(1e9, 0), time.Unix(1e9, 0), 100}},
	{"stale files: unlinked", staleSQL, "file_links_pkey", []any{time.Unix(1e9, 0), time.Unix(1e9, 0), 100}},
	{"send: attachments", attachSQL, "files_pkey", []any{[]string{"f"}, "ana"}},
	{"purge: links", qPurgeLinks, "file_links_by_event", []any{"c", int64(3)}},
	{"rollback: links", qRollbackLinks, "file_links_by_event", []any{"c", int64(3)}},
	{"rollback: rebuild links", qRebuildLinks, "events_attachments", []any{"c", int64(3)}},
}

// The search's statement and literal builders, for the black-box tests
// that run them on a server (search_test.go).
var (
	SearchSQL       = searchSQL
	SearchWalkSQL   = searchWalkSQL
	TsvectorLiteral = tsvectorLiteral
	TsqueryLiteral  = tsqueryLiteral
)

// SearchHits runs searchHits with a walk of walk rows (0: the GIN query
// alone) in a snapshot as Search does: the hits as conv/seq/vseq.
func SearchHits(ctx context.Context, db *DB, user string, q parley.SearchQuery, convs []string, walk int) ([]string, error) {
	var out []string
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		hits, err := searchHits(ctx, tx, user, q, convs, walk)
		for _, h := range hits {
			out = append(out, fmt.Sprintf("%s/%d/%d", h.conv, h.seq, h.vseq))
		}
		return err
	})
	return out, err
}

// TokenFreq is DB.tokenFreq: the least share of rows among tokens by the
// statistics.
func TokenFreq(ctx context.Context, db *DB, tokens []string) float64 {
	return db.tokenFreq(ctx, tokens)
}

// WalkFor is walkFor.
var WalkFor = walkFor

// SetSearchMoveSync makes db move the search queue into search_docs after
// every write that queues a row, before the write returns: searches then
// find rows through the index, not the queue.
func SetSearchMoveSync(db *DB) { db.mover.sync = true }

// StopSearchMover stops db's mover, as a crash would: the rows queued from
// then on stay queued.
func StopSearchMover(db *DB) { db.stopMover() }

// MoveSearchQueue moves db's search queue into search_docs now.
func MoveSearchQueue(ctx context.Context, db *DB) error { return db.moveQueue(ctx) }

// MoveSQL is the mover's statement, its lock MoveLock.
const (
	MoveSQL  = moveSQL
	MoveLock = moveLock
)
