-- Web Push (postgres/push.go). Names match sqlite/migrations/0016_push.sql.

-- The deployment's VAPID key: a P-256 scalar, sealed like the other
-- secrets. The first gateway to need it inserts one (ON CONFLICT DO
-- NOTHING); every gateway reads the one that won.
CREATE TABLE push_keys (
    id         TEXT PRIMARY KEY,
    secret     BYTEA NOT NULL,
    sealed     BOOLEAN NOT NULL DEFAULT false,
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

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
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX push_subscriptions_by_device ON push_subscriptions (user_id, device_id);

-- A user's push level in a conversation when it is not the default (all).
CREATE TABLE push_settings (
    user_id TEXT NOT NULL,
    conv_id TEXT NOT NULL,
    level   TEXT NOT NULL CHECK (level IN ('mentions', 'none')),
    PRIMARY KEY (user_id, conv_id)
);
