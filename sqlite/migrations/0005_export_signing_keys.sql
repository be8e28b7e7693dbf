-- The export link signing keys of the deployment, SQLite dialect. Times are
-- Unix milliseconds from the database clock. Names match
-- postgres/migrations/0005_export_signing_keys.sql.
--
-- The first process to need a key inserts a random one with
-- INSERT OR IGNORE, so processes starting together agree on one.
-- Secrets: never logged, never in the effective configuration.
CREATE TABLE export_signing_keys (
    id         TEXT PRIMARY KEY,
    secret     BLOB NOT NULL CHECK (length(secret) >= 32),
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;
