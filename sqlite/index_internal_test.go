package sqlite

// IndexedStatements are statements the store runs that must be served by
// an index, by the index's name: each ran as a full table scan inside the
// one writer before migration 0004. Arguments: placeholders to bind.
var IndexedStatements = []struct {
	Name, Query, Index string
	Args               int
}{
	{"disable user: revoke tokens", qRevokeUser, "tokens_by_user", 1},
	{"login: mark replaced install", qMarkReplaced, "tokens_by_user", 3},
	{"rollback: clamp delivered cursors", qClampCursors[0], "delivered_cursors_by_conv", 3},
	{"rollback: clamp read cursors", qClampCursors[1], "read_cursors_by_conv", 3},
	{"sweep: idle tokens", qSweepIdle, "tokens_idle", 2},
	{"sweep: replaced installs", qSweepReplaced, "tokens_replaced", 2},
	// Migration 0006: the admin listings walk the primary keys; the
	// retention claim walks the conversations with a policy.
	{"admin: users page", qAdminUsers, "sqlite_autoindex_users_1", 2},
	{"admin: users last seen", qAdminUsers, "tokens_by_user", 2},
	{"admin: users files", qAdminUsers, "files_by_owner (owner=?)", 2},
	{"admin: convs page", qAdminConvs, "sqlite_autoindex_conversations_1", 2},
	{"admin: exports page", qAdminExports, "sqlite_autoindex_export_jobs_1", 2},
	{"admin: hooks page", qAdminHooks, "sqlite_autoindex_hooks_1", 2},
	{"retention: claim", qClaimRetention, "conversations_with_policy", 2},
	// Migration 0007: a page's derived rows are probes per message, not a
	// walk of the conversation's log.
	{"derived: edits and reactions", derivedSQL, "events_targets", 4},
	{"derived: replies", derivedSQL, "events_replies", 4},
	{"convs: mentions unread", convsSQL, "sqlite_autoindex_mentions_1 (conv_id=? AND user_id=? AND seq>?", 6},
	// Migration 0011: a search probes periods and the newer versions of
	// each row FTS5 found; a recall or a purge finds a message's rows by
	// the docs' unique index.
	{"search: periods", searchSQL, "sqlite_autoindex_periods_1", 9},
	// Migration 0013: a recall or a purge finds the messages by key, then
	// their rows by the id range of each one's time (TestSearchPlan).
	{"unindex: messages", qUnindexRows, "events_messages (conv_id=? AND seq>? AND seq<?)", 4},
	// Migration 0012: the quota sums a user's files from their index; a
	// read of a file probes its links and, per link, the reader's periods;
	// the collector walks each state by age; a send finds its files, and
	// a recall, a purge or a rollback a message's links, by key.
	{"files: quota", qFileUsage, "files_by_owner (owner=?)", 1},
	{"files: attachable", qAttachable, "sqlite_autoindex_files_1 (id=?)", 2},
	{"files: access by file", qFileAccess, "sqlite_autoindex_files_1 (id=?)", 2},
	{"files: access links", qFileAccess, "sqlite_autoindex_file_links_1 (file_id=?)", 2},
	{"files: access periods", qFileAccess, "sqlite_autoindex_periods_1 (conv_id=? AND user_id=? AND from_seq<?)", 2},
	{"files: stale uploads", qStaleFiles, "files_stale (state=? AND created_at<?)", 3},
	{"files: stale unlinked", qStaleFiles, "sqlite_autoindex_file_links_1 (file_id=?)", 3},
	{"files: delete", qDeleteFile, "sqlite_autoindex_files_1 (id=?)", 3},
	{"recall: unlink", qUnlinkMessage, "file_links_by_event (conv_id=? AND seq=?)", 2},
	{"purge: unlink", qUnlinkUpTo, "file_links_by_event (conv_id=? AND seq<?)", 2},
	{"rollback: unlink", qUnlinkConv, "file_links_by_event (conv_id=?)", 1},
	{"rollback: relink", qRelink, "events_attachments (conv_id=?)", 1},
}

// SearchSQL walks the index for a search, UnindexSQL reads the rows of
// messages (TestSearchPlan).
var SearchSQL, UnindexSQL = searchSQL, qUnindexRows

// SetSearchFlushAt sets how many queued index rows db's writer moves into
// FTS5 at once (1: at every send and edit), before db's first write.
func SetSearchFlushAt(db *DB, n int) { db.queue.flushAt = n }
