package sqlite

// The derived rows of an export page are read per target range over the
// indexes of migration 0007, never by walking the conversation's log.
func init() {
	type statement = struct {
		Name, Query, Index string
		Args               int
	}
	IndexedStatements = append(IndexedStatements,
		statement{"export: edits and reactions", qExportDerived, "events_targets", 12},
		statement{"export: replies", qExportDerived, "events_replies", 12},
	)
}
