-- Export jobs and their durable snapshots, SQLite dialect. Times are Unix
-- milliseconds from the database clock. Names match
-- postgres/migrations/0003_exports.sql.

-- One row per job. A key is the caller's: (user_id, idem_key) is unique for
-- as long as the job record lives.
CREATE TABLE export_jobs (
    id          TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL,
    idem_key    TEXT NOT NULL,
    scope       TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'revoked', 'expired')),
    error       TEXT NOT NULL DEFAULT '',
    done        INTEGER NOT NULL DEFAULT 0,
    total       INTEGER NOT NULL DEFAULT 0,
    sha256      TEXT NOT NULL DEFAULT '',
    bytes       INTEGER NOT NULL DEFAULT 0,
    attempts    INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_until INTEGER,
    not_before  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    expires_at  INTEGER,
    created_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    updated_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    UNIQUE (user_id, idem_key)
) STRICT;
-- Claiming walks queued jobs by not_before (and running ones by state);
-- CreateExport counts a user's queued and running jobs.
CREATE INDEX export_jobs_claim ON export_jobs (state, not_before);
CREATE INDEX export_jobs_active ON export_jobs (user_id, state);

-- The snapshot: per conversation, the head at creation.
CREATE TABLE export_convs (
    job_id  TEXT NOT NULL REFERENCES export_jobs (id) ON DELETE CASCADE,
    conv_id TEXT NOT NULL,
    head    INTEGER NOT NULL,
    PRIMARY KEY (job_id, conv_id)
) STRICT;
-- Purge and rollback find the jobs that pin a conversation.
CREATE INDEX export_convs_pins ON export_convs (conv_id);

-- The caller's membership periods at creation, cut at the head.
CREATE TABLE export_periods (
    job_id   TEXT NOT NULL REFERENCES export_jobs (id) ON DELETE CASCADE,
    conv_id  TEXT NOT NULL,
    from_seq INTEGER NOT NULL,
    to_seq   INTEGER NOT NULL,
    PRIMARY KEY (job_id, conv_id, from_seq)
) STRICT;

-- The records of written shards.
CREATE TABLE export_shards (
    job_id    TEXT NOT NULL REFERENCES export_jobs (id) ON DELETE CASCADE,
    idx       INTEGER NOT NULL,
    conv_id   TEXT NOT NULL,
    after_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    sha256    TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)
) STRICT;
