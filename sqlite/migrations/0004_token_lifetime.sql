-- Token lifetime and the indexes of the paths that scanned whole tables,
-- SQLite dialect. Names match postgres/migrations/0004_token_lifetime.sql.

-- last_used_at: the database clock when the token was last refreshed (at
-- login, then by Authenticate at most once per Options.TokenRefresh); a
-- token idle longer than Options.TokenIdle is refused and deleted.
-- ADD COLUMN takes only a constant default: existing tokens start their
-- idle lifetime now.
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
UPDATE tokens SET last_used_at = CAST(unixepoch('subsec') * 1000 AS INTEGER);

-- replaced_at: when a login replaced the token's install. The token answers
-- STALE_INSTALL for Options.StaleInstallGrace after that, then it goes.
-- Tokens of installs replaced before this migration start their grace now.
ALTER TABLE tokens ADD COLUMN replaced_at INTEGER;
UPDATE tokens SET replaced_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)
WHERE NOT EXISTS (SELECT 1 FROM devices d
    WHERE d.user_id = tokens.user_id AND d.device_id = tokens.device_id AND d.install_id = tokens.install_id);

-- Disabling a user deletes their tokens, and a login that replaces an
-- install marks the device's other tokens: both ran a full scan inside the
-- one writer.
CREATE INDEX tokens_by_user ON tokens (user_id, device_id, install_id);
-- The sweep walks the oldest tokens and the replaced ones.
CREATE INDEX tokens_idle ON tokens (last_used_at);
CREATE INDEX tokens_replaced ON tokens (replaced_at) WHERE replaced_at IS NOT NULL;

-- A rollback clamps every cursor of the conversation under its lock. The
-- index holds conv_id only: with seq in it, every ack and read (frequent)
-- would rewrite an index entry to speed up rollbacks (rare).
CREATE INDEX delivered_cursors_by_conv ON delivered_cursors (conv_id);
CREATE INDEX read_cursors_by_conv ON read_cursors (conv_id);
