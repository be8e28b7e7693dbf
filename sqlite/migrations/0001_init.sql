-- Parley schema, SQLite dialect. Times are Unix milliseconds from the
-- database clock. Table and column names match postgres/migrations so the
-- contract suite's raw checks read the same on both.

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    email         TEXT UNIQUE,
    password_hash TEXT NOT NULL DEFAULT '',
    role          TEXT NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
    disabled      INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;

-- One row per (user, device): the device's current install.
CREATE TABLE devices (
    user_id    TEXT NOT NULL REFERENCES users (id),
    device_id  TEXT NOT NULL,
    install_id TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    PRIMARY KEY (user_id, device_id)
) STRICT;

-- Tokens are stored as sha256 of their text.
CREATE TABLE tokens (
    token_hash BLOB PRIMARY KEY,
    user_id    TEXT NOT NULL,
    device_id  TEXT NOT NULL,
    install_id TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;

CREATE TABLE conversations (
    id                TEXT PRIMARY KEY,
    kind              TEXT NOT NULL CHECK (kind IN ('direct', 'group')),
    title             TEXT NOT NULL DEFAULT '',
    owner             TEXT NOT NULL DEFAULT '',
    next_seq          INTEGER NOT NULL DEFAULT 1,
    min_seq           INTEGER NOT NULL DEFAULT 1,
    epoch             INTEGER NOT NULL DEFAULT 1,
    retain_max_age_ms INTEGER NOT NULL DEFAULT 0,
    retain_last_n     INTEGER NOT NULL DEFAULT 0,
    last_at           INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    created_at        INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;

-- The log. A message's recall_seq is set when it is recalled; its body is
-- kept (an export pinned before the recall still needs it) but never served.
CREATE TABLE events (
    conv_id       TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    mid           TEXT NOT NULL,
    kind          TEXT NOT NULL,
    sender_user   TEXT NOT NULL,
    sender_device TEXT NOT NULL DEFAULT '',
    cmid          TEXT,
    request_hash  BLOB,
    body          TEXT NOT NULL DEFAULT '',
    target        INTEGER,
    subject_user  TEXT,
    recall_seq    INTEGER,
    created_at    INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    PRIMARY KEY (conv_id, seq)
) STRICT;

-- The last line of defence for "one request key, one event".
CREATE UNIQUE INDEX events_idempotency ON events (conv_id, sender_user, cmid) WHERE cmid IS NOT NULL;
-- Unread counting and "latest message" walk message events only; sender
-- and recall_seq ride along so counting unread reads the index alone.
CREATE INDEX events_messages ON events (conv_id, seq, sender_user, recall_seq) WHERE kind = 'message';

-- Membership periods: visible iff from_seq <= seq and (to_seq IS NULL or
-- seq <= to_seq). At most one open period per (conv, user).
CREATE TABLE periods (
    conv_id  TEXT NOT NULL,
    user_id  TEXT NOT NULL,
    from_seq INTEGER NOT NULL,
    to_seq   INTEGER,
    PRIMARY KEY (conv_id, user_id, from_seq)
) STRICT;
CREATE UNIQUE INDEX periods_one_open ON periods (conv_id, user_id) WHERE to_seq IS NULL;
CREATE INDEX periods_by_user ON periods (user_id, conv_id);

CREATE TABLE delivered_cursors (
    user_id   TEXT NOT NULL,
    device_id TEXT NOT NULL,
    conv_id   TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (user_id, device_id, conv_id)
) STRICT;

CREATE TABLE read_cursors (
    user_id TEXT NOT NULL,
    conv_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (user_id, conv_id)
) STRICT;

-- Request keys of purged events, so a late resend is ORIGINAL_EXPIRED.
CREATE TABLE tombstones (
    conv_id      TEXT NOT NULL,
    sender_user  TEXT NOT NULL,
    cmid         TEXT NOT NULL,
    request_hash BLOB NOT NULL,
    purged_at    INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    PRIMARY KEY (conv_id, sender_user, cmid)
) STRICT;
CREATE INDEX tombstones_age ON tombstones (conv_id, purged_at);
