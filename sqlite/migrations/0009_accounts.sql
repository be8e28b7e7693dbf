-- Accounts a person manages, SQLite dialect. Names match
-- postgres/migrations/0011_accounts.sql.

-- display_name: the name the user chose ('' when none; clients then show
-- the id). Checked by parley.CheckDisplayName before it is written.
ALTER TABLE users ADD COLUMN display_name TEXT NOT NULL DEFAULT '';

-- The sweep walks the oldest tokens by issue time for the absolute
-- lifetime (Options.TokenMax), as it walks tokens_idle for the idle one.
CREATE INDEX tokens_created ON tokens (created_at);
