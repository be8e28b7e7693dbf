-- An export's files archive (export/files.go), PostgreSQL dialect. Names
-- match sqlite/migrations/0014_export_files.sql. Additive: a server of the
-- previous version never reads these columns.

-- files_sha256 and files_bytes describe the archive of the files the
-- job's lines attach, recorded before the job is done; '' and 0 when it
-- has none.
ALTER TABLE export_jobs ADD COLUMN files_sha256 TEXT NOT NULL DEFAULT '';
ALTER TABLE export_jobs ADD COLUMN files_bytes BIGINT NOT NULL DEFAULT 0;
