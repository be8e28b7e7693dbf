#!/bin/bash
# Server builds side by side on the send path (docs/benchmarks.md):
# for each binary given, in order, a fresh database and `parley serve` on
# PostgreSQL, then `parley bench --senders N [--hot]` against it. Besides
# the bench's sends/s, p99 and server CPU per send it reads, over 6 s in
# the middle of the run, the server's context switches per send (every
# thread's voluntary and involuntary switches, /proc/PID/task/*/status)
# the mean group-commit batch (parley_send_batched_total over
# parley_send_batches_total) and the bytes the server allocated per send
# (go_memstats_alloc_bytes_total) and how often it collected garbage
# (go_gc_duration_seconds_count). Give the builds interleaved, A B B A.
#
#   bench/serverab.sh SECONDS SENDERS [--hot] BINARY...
#   e.g. bench/serverab.sh 12 16 /tmp/parley-a /tmp/parley-b /tmp/parley-b /tmp/parley-a
# Environment: PGHOST (127.0.0.1), PGUSER (postgres), DBNAME (parley_ab),
# CLIENT (the `parley` that runs the bench; default the first BINARY).
set -euo pipefail
secs=$1 n=$2
shift 2
hot=()
if [ "${1:-}" = --hot ]; then hot=(--hot); shift; fi
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
db=${DBNAME:-parley_ab}
client=$(realpath "${CLIENT:-$1}")
dsn="postgres://$PGUSER@$PGHOST:5432/$db?sslmode=disable"
. "$(dirname "$0")/serve.sh"
grep -m1 'model name' /proc/cpuinfo
for bin in "$@"; do
	bin=$(realpath "$bin")
	work=$(mktemp -d)
	start_server "$bin" "$db" "$dsn" "$work"
	"$client" bench --server "$url" --admin root:root-password-1 --senders "$n" "${hot[@]}" \
		--duration "${secs}s" --warmup 2s --quiet --report "$work/r.json" >/dev/null &
	bpid=$!
	switches() { cat /proc/"$spid"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}'; }
	counters() {
		curl -s "$url/metrics" | awk '/^parley_sends_total/ {s += $2} /^parley_send_batches_total/ {b = $2}
			/^parley_send_batched_total/ {x = $2} /^go_memstats_alloc_bytes_total/ {a = $2}
			/^go_gc_duration_seconds_count/ {g = $2}
			END {printf "%d %d %d %d %d\n", s, b, x, a, g}'
	}
	sleep 4
	c0=$(switches)
	read -r s0 b0 x0 a0 g0 < <(counters)
	sleep 6
	c1=$(switches)
	read -r s1 b1 x1 a1 g1 < <(counters)
	wait "$bpid"
	python3 - "$work/r.json" "$(basename "$bin")" "$n${hot[*]:+ hot}" $((c1 - c0)) $((s1 - s0)) $((b1 - b0)) $((x1 - x0)) $((a1 - a0)) $((g1 - g0)) <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
cs, sends, batches, batched, alloc, gcs = map(int, sys.argv[4:10])
sends = max(sends, 1)
print("%-24s %-7s %6.0f sends/s  p99 %5.2f ms  server CPU %5.1f µs/send  %.2f switches/send  batch %.1f  %.1f KiB/send  %.1f GCs/s" % (
    sys.argv[2], sys.argv[3], r["sends_per_s"], r["send_to_sent"]["p99_ms"], r["server_cpu_per_send_us"],
    cs / sends, batched / max(batches, 1), alloc / sends / 1024, gcs / 6))
EOF
	kill "$spid"
	wait "$spid" 2>/dev/null || true
	rm -rf "$work"
done
