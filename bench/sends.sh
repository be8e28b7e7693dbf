#!/bin/bash
# End-to-end sends through `parley serve` on PostgreSQL against pgbench
# running the bare send transaction, in one session (docs/benchmarks.md,
# "Running the benchmarks"). For each client count and each shape (own conversations, one
# hot conversation) it runs, on one fresh database:
#   parley bench --senders N [--hot]   (WebSocket senders, closed loop)
#   pgbench -c N -f bench/send.sql | bench/send_hot.sql
# interleaved A B B A, each side twice for SECONDS/2.
#
#   bench/sends.sh PARLEY_BINARY [CLIENTS...]      e.g. bench/sends.sh ./parley 16 64
# Environment: PGHOST (127.0.0.1), PGUSER (postgres), DBNAME (parley_sends),
# SECONDS_EACH (10), SERVER_BINARY (the server to measure; default
# PARLEY_BINARY, e.g. an older build for a before/after).
set -euo pipefail
parley=$(realpath "$1"); shift
server=$(realpath "${SERVER_BINARY:-$parley}")
clients=("${@:-16}")
here=$(cd "$(dirname "$0")" && pwd)
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
db=${DBNAME:-parley_sends}
secs=${SECONDS_EACH:-10}
half=$((secs / 2))
dsn="postgres://$PGUSER@$PGHOST:5432/$db?sslmode=disable"
work=$(mktemp -d)
trap 'kill $spid 2>/dev/null || true; rm -rf "$work"' EXIT

. "$here/serve.sh"
start_server "$server" "$db" "$dsn" "$work"
psql -q -d "$db" -f "$here/seed.sql"

grep -m1 'model name' /proc/cpuinfo
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)   server: $server"
for n in "${clients[@]}"; do
	for shape in own hot; do
		hot=() script=$here/send.sql
		if [ $shape = hot ]; then hot=(--hot) script=$here/send_hot.sql; fi
		ps=0 pt=0 gs=0 gt=0 p99=() cpu=()
		for side in parley pgbench pgbench parley; do
			if [ $side = parley ]; then
				"$parley" bench --server "$url" --admin root:root-password-1 --senders "$n" "${hot[@]}" \
					--duration ${half}s --warmup 1s --quiet --report "$work/r.json" >/dev/null
				read -r s t q c < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["sends"], r["seconds"], r["send_to_sent"]["p99_ms"], r["server_cpu_per_send_us"])' "$work/r.json")
				ps=$((ps + s)); pt=$(echo "$pt + $t" | bc); p99+=("$q"); cpu+=("$c")
			else
				out=$(pgbench -n -M prepared -c "$n" -j 2 -T $half -f "$script" "$db" 2>&1)
				s=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
				tps=$(sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' <<<"$out")
				gs=$((gs + s)); gt=$(echo "$gt + $s / $tps" | bc -l)
			fi
		done
		prate=$(echo "$ps / $pt" | bc -l) grate=$(echo "$gs / $gt" | bc -l)
		printf '%3d senders %-3s  parley %7.0f sends/s (p99 %s ms, server CPU %s µs/send)  pgbench %7.0f tps  ratio %.2f\n' \
			"$n" "$shape" "$prate" "${p99[*]}" "${cpu[*]}" "$grate" "$(echo "$prate / $grate" | bc -l)"
	done
done
