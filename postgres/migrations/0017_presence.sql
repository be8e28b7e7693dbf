-- Presence (signal.go in the root, postgres/presence.go). Names match
-- sqlite/migrations/0015_presence.sql.
--
-- One lease per (user, gateway holding sockets of the user): online when a
-- socket of the user there is online, away when all are. A gateway renews
-- its leases while its sockets are open; one that dies stops, and its
-- leases expire (expires_at, the database clock).
CREATE TABLE presence_leases (
    user_id    TEXT NOT NULL,
    gateway    TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('online', 'away')),
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, gateway)
);
-- The sweep finds expired leases oldest first.
CREATE INDEX presence_leases_expiry ON presence_leases (expires_at);

-- Per user: the presence last announced (so that exactly one gateway
-- announces each change: its row is locked while a change is decided)
-- and when the user was last seen connected.
CREATE TABLE presence (
    user_id   TEXT PRIMARY KEY,
    state     TEXT NOT NULL CHECK (state IN ('online', 'away', 'offline')),
    last_seen TIMESTAMPTZ NOT NULL
);
