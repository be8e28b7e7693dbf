-- Web Push, SQLite dialect. Names match postgres/migrations/0018_push.sql.

-- The deployment's VAPID key: a P-256 scalar, sealed like the other
-- secrets (sealed = 1). The first process to need it inserts one with
-- INSERT OR IGNORE, so processes starting together agree on one.
CREATE TABLE push_keys (
    id         TEXT PRIMARY KEY,
    secret     BLOB NOT NULL,
    sealed     INTEGER NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1)),
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;

-- A browser's push subscription, bound to one device of one user. An
-- endpoint belongs to one device: subscribing it from another moves it.
-- p256dh and auth: unpadded base64url.
CREATE TABLE push_subscriptions (
    id         TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL,
    device_id  TEXT NOT NULL,
    endpoint   TEXT NOT NULL UNIQUE,
    p256dh     TEXT NOT NULL,
    auth       TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;
CREATE INDEX push_subscriptions_by_device ON push_subscriptions (user_id, device_id);

-- A user's push level in a conversation when it is not the default (all).
CREATE TABLE push_settings (
    user_id TEXT NOT NULL,
    conv_id TEXT NOT NULL,
    level   TEXT NOT NULL CHECK (level IN ('mentions', 'none')),
    PRIMARY KEY (user_id, conv_id)
) STRICT;
