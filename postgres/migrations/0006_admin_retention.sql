-- Admin listings and the retention worker, PostgreSQL dialect. Names match
-- sqlite/migrations/0006_admin_retention.sql.

-- The admin listings page by id in byte order (COLLATE "C", as SQLite
-- compares): these indexes serve `id COLLATE "C" > $after ORDER BY id
-- COLLATE "C" LIMIT n` without sorting the table.
CREATE INDEX users_id_bytes ON users (id COLLATE "C");
CREATE INDEX conversations_id_bytes ON conversations (id COLLATE "C");
CREATE INDEX export_jobs_id_bytes ON export_jobs (id COLLATE "C");
CREATE INDEX hooks_id_bytes ON hooks (id COLLATE "C");

-- The retention claim walks the conversations that have a policy, in id
-- order; most conversations have none.
CREATE INDEX conversations_with_policy ON conversations (id COLLATE "C")
    WHERE retain_max_age_ms > 0 OR retain_last_n > 0;

-- One row per conversation the retention worker has claimed: the start of
-- the round of its last claim (Unix ms of the database clock, rounded down
-- to a multiple of the round length; a time, not a round number, so a
-- changed --retention-every still compares). A claim is an upsert that
-- only moves round_start forward, so of several gateways claiming
-- together exactly one wins each conversation per round. Kept apart from
-- conversations so that claims never wait on (or hold) a conversation's
-- row lock, which every send takes.
CREATE TABLE retention_runs (
    conv_id     TEXT PRIMARY KEY,
    round_start BIGINT NOT NULL,
    run_at      TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
