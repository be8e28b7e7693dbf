-- Admin listings and the retention worker, SQLite dialect. Names match
-- postgres/migrations/0006_admin_retention.sql. The listings page over the
-- primary keys (BINARY collation: byte order), so they need no index here.

-- The retention claim walks the conversations that have a policy, in id
-- order; most conversations have none.
CREATE INDEX conversations_with_policy ON conversations (id)
    WHERE retain_max_age_ms > 0 OR retain_last_n > 0;

-- One row per conversation the retention worker has claimed: the start of
-- the round of its last claim (Unix ms of the database clock, rounded down
-- to a multiple of the round length; a time, not a round number, so a
-- changed --retention-every still compares). A claim is an upsert that
-- only moves round_start forward, so one claim wins each
-- conversation per round.
CREATE TABLE retention_runs (
    conv_id     TEXT PRIMARY KEY,
    round_start INTEGER NOT NULL,
    run_at      INTEGER NOT NULL
) STRICT;
