-- Export jobs and their durable snapshots, PostgreSQL dialect. Times come
-- from clock_timestamp(). Names match sqlite/migrations/0003_exports.sql.

-- One row per job. A key is the caller's: (user_id, idem_key) is unique for
-- as long as the job record lives.
CREATE TABLE export_jobs (
    id          TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL,
    idem_key    TEXT NOT NULL,
    scope       TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'revoked', 'expired')),
    error       TEXT NOT NULL DEFAULT '',
    done        INT NOT NULL DEFAULT 0,
    total       INT NOT NULL DEFAULT 0,
    sha256      TEXT NOT NULL DEFAULT '',
    bytes       BIGINT NOT NULL DEFAULT 0,
    attempts    INT NOT NULL DEFAULT 0,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_until TIMESTAMPTZ,
    not_before  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    expires_at  TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT export_jobs_idem UNIQUE (user_id, idem_key)
);
-- Claiming walks queued jobs by not_before (and running ones by state);
-- CreateExport counts a user's queued and running jobs.
CREATE INDEX export_jobs_claim ON export_jobs (state, not_before);
CREATE INDEX export_jobs_active ON export_jobs (user_id, state);

-- The snapshot: per conversation, the head at creation.
CREATE TABLE export_convs (
    job_id  TEXT NOT NULL REFERENCES export_jobs (id) ON DELETE CASCADE,
    conv_id TEXT NOT NULL,
    head    BIGINT NOT NULL,
    PRIMARY KEY (job_id, conv_id)
);
-- Purge and rollback find the jobs that pin a conversation.
CREATE INDEX export_convs_pins ON export_convs (conv_id);

-- The caller's membership periods at creation, cut at the head.
CREATE TABLE export_periods (
    job_id   TEXT NOT NULL REFERENCES export_jobs (id) ON DELETE CASCADE,
    conv_id  TEXT NOT NULL,
    from_seq BIGINT NOT NULL,
    to_seq   BIGINT NOT NULL,
    PRIMARY KEY (job_id, conv_id, from_seq)
);

-- The records of written shards.
CREATE TABLE export_shards (
    job_id    TEXT NOT NULL REFERENCES export_jobs (id) ON DELETE CASCADE,
    idx       INT NOT NULL,
    conv_id   TEXT NOT NULL,
    after_seq BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    count     INT NOT NULL,
    sha256    TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)
);
