# WAL per message of parley_send_many (16 messages to 16 conversations of
# bench/seed.sql), by EXPLAIN (ANALYZE, WAL): this backend's WAL alone (no
# commit record, nothing of other sessions), with and without full-page
# images (a checkpoint's first touch of a page); with "move", then the WAL
# of one move of the search queue (postgres/searchqueue.go) by statement.
#   python3 bench/sendwal.py DBNAME TSV RUNS [move]
# TSV 1 passes the tsvector literals (servers with the search index), 0 not
# (a server from before it). docs/benchmarks.md, "the search queue".
import json, subprocess, sys, statistics
db, tsv, runs = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
move = len(sys.argv) > 4
tsvs = """, array(SELECT '''a'':1 ''benchmark'':2 ''message'':3 ''of'':4 ''ordinary'':5 ''length'':6 ''' || chr(57344) || 'c'
  || encode(convert_to('bench-' || i, 'UTF8'), 'hex') || ''':7 ''' || chr(57344) || 'u616e61'':8' FROM generate_series(0, 15) i)""" if tsv else ""
send = f"""SELECT * FROM parley_send_many(
  array(SELECT 'bench-' || i FROM generate_series(0, 15) i), array_fill('ana'::text, ARRAY[16]), array_fill('d1'::text, ARRAY[16]),
  array(SELECT gen_random_uuid()::text FROM generate_series(0, 15)),
  array_fill('\\x0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'::bytea, ARRAY[16]),
  array_fill('a benchmark message of ordinary length'::text, ARRAY[16]),
  array(SELECT gen_random_uuid()::text FROM generate_series(0, 15)) {tsvs})"""
movesql = """WITH m AS (
	DELETE FROM search_queue
	WHERE ctid = ANY (ARRAY(SELECT ctid FROM search_queue LIMIT 2048))
		AND (SELECT pg_try_advisory_xact_lock(1))
	RETURNING conv_id, seq, sender_user, at, tsv),
i AS (
	INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at, tsv)
	SELECT conv_id, seq, seq, sender_user, at, tsv FROM m
	ON CONFLICT DO NOTHING)
SELECT count(*) FROM m"""
def wal(sql):
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-Atc",
        "EXPLAIN (ANALYZE, WAL, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) " + sql], check=True, capture_output=True, text=True).stdout
    p = json.loads(out)[0]["Plan"]
    return p.get("WAL Bytes", 0), p.get("WAL FPI", 0), p.get("WAL Records", 0)
res = [wal(send) for _ in range(runs)]
nofpi = [b for b, f, r in res if f == 0]
print(f"send: {runs} calls of 16, per message: median {statistics.median(b for b,_,_ in res)/16:.0f} B, "
      f"without full-page images {statistics.median(nofpi)/16 if nofpi else float('nan'):.0f} B ({len(nofpi)} calls), records {statistics.median(r for _,_,r in res)/16:.1f}")
if move:
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-Atc",
        "EXPLAIN (ANALYZE, WAL, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) " + movesql], check=True, capture_output=True, text=True).stdout
    def walk(p, acc):
        acc.append((p["Node Type"], p.get("Subplan Name", ""), p.get("WAL Bytes", 0), p.get("WAL FPI", 0), p.get("WAL Records", 0), p.get("Actual Rows", 0)))
        for c in p.get("Plans", []): walk(c, acc)
        return acc
    nodes = walk(json.loads(out)[0]["Plan"], [])
    n = max(1, max(rows for t, _, _, _, _, rows in nodes if t == "ModifyTable"))  # the rows deleted from the queue
    for t, name, b, f, r, _ in nodes:
        if t == "ModifyTable":
            print(f"move of {n} queued rows, {name}: {b/n:.0f} B per row (fpi {f}, records {r})")
