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
}
