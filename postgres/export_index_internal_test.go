package postgres

// The derived rows of an export page are read per target range over the
// indexes of migration 0009, never by walking the conversation's log.
func init() {
	type statement = struct {
		Name, Query, Index string
		Args               []any
	}
	args := []any{"j", "c", int64(3), int64(200)}
	IndexedStatements = append(IndexedStatements,
		statement{"export: edits and reactions", exportDerivedSQL, "events_targets", args},
		statement{"export: replies", exportDerivedSQL, "events_replies", args},
	)
}
