-- Operations records, SQLite dialect: the audit log of the operations API
-- and the incoming webhooks. Names match postgres/migrations/0002_ops.sql.

-- AUTOINCREMENT: an id is never reused, so keyset paging (id < before)
-- stays exact for the life of the file.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    operator   TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL DEFAULT '',
    params     TEXT NOT NULL DEFAULT '',
    outcome    TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;

-- The secret is kept in clear: the HMAC check needs it. A deleted hook's
-- row goes, so its secret stops working at once.
CREATE TABLE hooks (
    id         TEXT PRIMARY KEY,
    conv_id    TEXT NOT NULL,
    bot_user   TEXT NOT NULL,
    secret     TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;
