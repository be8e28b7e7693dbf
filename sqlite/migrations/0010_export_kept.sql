-- Export reuse and the per-user bound on kept artifacts, SQLite dialect.
-- Times are Unix milliseconds from the database clock. Names match
-- postgres/migrations/0012_export_kept.sql.

-- The snapshot also records each conversation's epoch and min_seq, so a
-- later request can tell that a rollback or a purge changed what an export
-- of the same scope would hold. Rows written before this migration have
-- NULL here and are never reused (NULL compares unequal).
ALTER TABLE export_convs ADD COLUMN epoch INTEGER;
ALTER TABLE export_convs ADD COLUMN min_seq INTEGER;

-- max_kept: the export.max_kept in force when the job was created (0: no
-- bound); applied when the job finishes. finished_at: when the job became
-- done, which orders a user's artifacts from the oldest.
ALTER TABLE export_jobs ADD COLUMN max_kept INTEGER NOT NULL DEFAULT 0;
ALTER TABLE export_jobs ADD COLUMN finished_at INTEGER;
