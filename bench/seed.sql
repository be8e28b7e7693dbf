-- The conversations bench/send.sql and bench/send_hot.sql write to, for a
-- database that `parley serve` (or any Open) migrated: users ana and ben and
-- the 64 groups bench-0 … bench-63 of both, as storetest.SeedSenders makes
-- them (member_joined at seqs 1 and 2). Idempotent:
--   psql -d DBNAME -f bench/seed.sql
INSERT INTO users (id) VALUES ('ana'), ('ben') ON CONFLICT DO NOTHING;
INSERT INTO conversations (id, kind, title, owner, next_seq)
SELECT 'bench-' || i, 'group', 'bench-' || i, 'ana', 3 FROM generate_series(0, 63) AS i
ON CONFLICT DO NOTHING;
INSERT INTO events (conv_id, seq, mid, kind, sender_user, subject_user)
SELECT 'bench-' || i, m.seq, gen_random_uuid()::text, 'member_joined', 'ana', m.u
FROM generate_series(0, 63) AS i, (VALUES (1, 'ana'), (2, 'ben')) AS m (seq, u)
ON CONFLICT DO NOTHING;
INSERT INTO periods (conv_id, user_id, from_seq)
SELECT 'bench-' || i, m.u, m.seq
FROM generate_series(0, 63) AS i, (VALUES (1, 'ana'), (2, 'ben')) AS m (seq, u)
ON CONFLICT DO NOTHING;
