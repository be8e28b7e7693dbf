-- pgbench script: the send transaction (docs/protocol.md) written by hand,
-- in the two pipelines Store.Send used before it became one call of
-- parley_send (postgres/event.go):
--   {BEGIN; lock the conversation row; look the request key up}
--   {append the event and its queued search row, advance the head; COMMIT}
-- on the 64 two-member conversations bench-0 … bench-63 that
-- storetest.SeedSenders (or bench/seed.sql) creates. Run by BenchmarkSendVsPgbench as
--   pgbench -n -M prepared -c 16 -j 2 -T 10 -f bench/send.sql DBNAME
\set conv random(0, 63)
\set k random(1, 9000000000000000000)
\startpipeline
BEGIN;
SELECT kind, owner, next_seq, min_seq, epoch, retain_max_age_ms, retain_last_n
	FROM conversations WHERE id = 'bench-' || :conv FOR NO KEY UPDATE;
SELECT e.seq, e.mid, e.kind, e.request_hash,
	EXISTS (SELECT 1 FROM tombstones t WHERE t.conv_id = 'bench-' || :conv AND t.sender_user = 'ana' AND t.cmid = 'pgb-' || :client_id || '-' || :k),
	EXISTS (SELECT 1 FROM periods p WHERE p.conv_id = 'bench-' || :conv AND p.user_id = 'ana' AND p.to_seq IS NULL)
	FROM (VALUES (1)) AS one (x)
	LEFT JOIN events e ON e.conv_id = 'bench-' || :conv AND e.sender_user = 'ana' AND e.cmid = 'pgb-' || :client_id || '-' || :k;
\endpipeline
\startpipeline
WITH c AS (SELECT next_seq FROM conversations WHERE id = 'bench-' || :conv),
ev AS (
	INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, body, target, subject_user)
	SELECT 'bench-' || :conv, c.next_seq, gen_random_uuid()::text, 'message', 'ana', 'd1', 'pgb-' || :client_id || '-' || :k,
		'\x0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'::bytea,
		'a benchmark message of ordinary length', NULL, NULL FROM c
	RETURNING seq, created_at),
d AS (
	INSERT INTO search_queue (conv_id, seq, sender_user, at, tsv)
	SELECT 'bench-' || :conv, ev.seq, 'ana', floor(extract(epoch FROM ev.created_at) * 1000)::bigint,
		('''a'':1 ''benchmark'':2 ''message'':3 ''of'':4 ''ordinary'':5 ''length'':6 ''' || chr(57344) || 'c'
			|| encode(convert_to('bench-' || :conv, 'UTF8'), 'hex') || ''':7 ''' || chr(57344) || 'u616e61'':8')::tsvector
	FROM ev)
UPDATE conversations SET next_seq = ev.seq + 1, last_at = ev.created_at FROM ev WHERE id = 'bench-' || :conv
RETURNING ev.seq;
COMMIT;
\endpipeline
