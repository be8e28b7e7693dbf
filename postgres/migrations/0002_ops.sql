-- Operations records, PostgreSQL dialect: the audit log of the operations
-- API and the incoming webhooks. Names match sqlite/migrations/0002_ops.sql.

-- Identity ids increase but may have gaps; keyset paging (id < before)
-- needs no more.
CREATE TABLE audit_log (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operator   TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL DEFAULT '',
    params     TEXT NOT NULL DEFAULT '',
    outcome    TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- The secret is kept in clear: the HMAC check needs it. A deleted hook's
-- row goes, so its secret stops working at once.
CREATE TABLE hooks (
    id         TEXT PRIMARY KEY,
    conv_id    TEXT NOT NULL,
    bot_user   TEXT NOT NULL,
    secret     TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
