-- Secrets at rest, SQLite dialect. Names match
-- postgres/migrations/0010_secrets.sql.
--
-- sealed = 1: the secret column holds the AEAD of the secret under the
-- server's secret key (hooks.secret as unpadded base64 text), not the
-- secret. Rows from before this migration are in clear (sealed = 0) until
-- the store opens with a key and seals them.
ALTER TABLE hooks ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1));
ALTER TABLE export_signing_keys ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1));

-- The check value: a fixed text sealed under the key, so a server started
-- with another key refuses to start instead of failing every webhook.
CREATE TABLE secret_check (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    sealed     BLOB NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;
