# Sourced by the bench scripts: start_server BINARY DB DSN WORKDIR makes
# database DB afresh, adds the admin root (password root-password-1), starts
# `BINARY serve` on it with its files (and uploads: --files-dir) under WORKDIR, waits until it listens,
# and sets spid (its pid) and url (its address). A benchmark measures the
# server, not its limiter: the configuration turns every rate limit off.
start_server() {
	local bin=$1 db=$2 dsn=$3 work=$4
	psql -q -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
	echo root-password-1 | "$bin" user add root --admin --password-stdin --db "$dsn" >/dev/null
	echo 'rate_limits: {}' >"$work/parley.yaml"
	"$bin" serve --db "$dsn" --addr 127.0.0.1:0 --data-dir "$work" --export-dir "$work/exports" --files-dir "$work/files" \
		--config "$work/parley.yaml" --drain-window 0s >"$work/serve.out" 2>"$work/serve.log" &
	spid=$!
	until grep -q '^listening on' "$work/serve.out"; do sleep 0.2; done
	url=$(sed -n 's/^listening on //p' "$work/serve.out")
}
