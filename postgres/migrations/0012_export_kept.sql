-- Export reuse and the per-user bound on kept artifacts, PostgreSQL
-- dialect. Names match sqlite/migrations/0010_export_kept.sql.

-- The snapshot also records each conversation's epoch and min_seq, so a
-- later request can tell that a rollback or a purge changed what an export
-- of the same scope would hold. Rows written before this migration have
-- NULL here and are never reused (NULL compares unequal).
ALTER TABLE export_convs ADD COLUMN epoch BIGINT;
ALTER TABLE export_convs ADD COLUMN min_seq BIGINT;

-- max_kept: the export.max_kept in force when the job was created (0: no
-- bound); applied when the job finishes. finished_at: when the job became
-- done, which orders a user's artifacts from the oldest.
ALTER TABLE export_jobs ADD COLUMN max_kept INT NOT NULL DEFAULT 0;
ALTER TABLE export_jobs ADD COLUMN finished_at TIMESTAMPTZ;
