-- The export link signing keys of the deployment, PostgreSQL dialect.
-- Names match sqlite/migrations/0005_export_signing_keys.sql.
--
-- Every gateway on one database signs and verifies download links with the
-- same key, with no configuration (export.signing_keys, when set, takes
-- precedence). The first gateway to need it inserts a random key with
-- ON CONFLICT DO NOTHING, so gateways starting together agree on one.
-- Secrets: never logged, never in the effective configuration.
CREATE TABLE export_signing_keys (
    id         TEXT PRIMARY KEY,
    secret     BYTEA NOT NULL CHECK (length(secret) >= 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
