-- Secrets at rest, PostgreSQL dialect. Names match
-- sqlite/migrations/0008_secrets.sql.
--
-- sealed: the secret column holds the AEAD of the secret under the
-- server's secret key (hooks.secret as unpadded base64 text), not the
-- secret. Rows from before this migration are in clear (sealed = false)
-- until the store opens with a key and seals them.
ALTER TABLE hooks ADD COLUMN sealed BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE export_signing_keys ADD COLUMN sealed BOOLEAN NOT NULL DEFAULT false;

-- The check value: a fixed text sealed under the key, so a server started
-- with another key refuses to start instead of failing every webhook.
CREATE TABLE secret_check (
    id         SMALLINT PRIMARY KEY CHECK (id = 1),
    sealed     BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
