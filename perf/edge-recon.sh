#!/usr/bin/env bash
# edge-recon.sh — the edge's 100,000-term reconstruction latency (issue #4's p99 target), over
# HTTP/1.1+TLS, measured two ways side by side in one run, and over plain HTTP for reference:
#
#   shared  the edge and reconbench free to run on either core (they compete for both)
#   pinned  the edge on core 0 and reconbench on core 1 (taskset), as when the load generator
#           and the server do not share a core
#   plain   as shared, but to the shared edge's plain HTTP listener (--http-listen: an edge
#           behind a TLS-terminating balancer), so without TLS on either side
#
#   perf/edge-recon.sh            (from the repository root; builds what it runs)
#
# Starts an origin (embedded defaults: SQLite, local disk) and two edges on loopback in a
# temporary directory, loads the fixtures once through the origin, then runs ROUNDS rounds; each
# round waits until the 1-minute load average is below QUIET (other work on the machine would be
# measured too) and runs reconbench's latency mode (200 full + 200 random-range requests one at
# a time per shape, each to the last byte) once per mode of MODES, rotating which goes first.
# Prints every reconbench line, then the median over the rounds of each p99. Everything it
# started is stopped on exit.
#
# Environment: ROUNDS (5), MODES ("shared pinned plain"), QUIET (0.35; "" to not wait),
# PORT_BASE (29400), WORK (a temp dir, removed on exit unless KEEP=1), RECONBENCH_ARGS (extra
# reconbench flags), EDGE_CONFIG (a JSON file both edges get as --config, e.g. {"cache":
# {"read_ahead_bytes": -1, "read_ahead_idle_bytes": -1}} to time the answers without the
# read-ahead they start).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-5} MODES=${MODES:-shared pinned plain} QUIET=${QUIET-0.35} P=${PORT_BASE:-29400}
EDGE_CONFIG=${EDGE_CONFIG:+$(realpath "$EDGE_CONFIG")}
WORK=${WORK:-$(mktemp -d /tmp/edge-recon.XXXXXX)}
[ "$(nproc)" -ge 2 ] || { echo "edge-recon: needs two cores to pin" >&2; exit 2; }
log() { printf 'edge-recon: %s\n' "$*" >&2; }

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ "${KEEP:-}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
up() { # up URL: wait for /healthz
	for _ in $(seq 300); do curl -skf -o /dev/null "$1/healthz" && return 0; sleep 0.1; done
	log "$1 did not come up"; exit 1
}

(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/xet-origin ./cmd/xet-edge ./perf/cmd/reconbench)
B=$WORK/bin
"$B/xet-origin" --data-dir "$WORK/origin" --listen "127.0.0.1:$P" >"$WORK/origin.log" 2>&1 &
pids+=($!)
up "http://127.0.0.1:$P"
W=$("$B/xet-origin" token --data-dir "$WORK/origin" --access write --scope models/bench/rb)
R=$("$B/xet-origin" token --data-dir "$WORK/origin" --access read --scope models/bench/rb)
E=$("$B/xet-origin" token --data-dir "$WORK/origin" --access edge)

# edge MODE PORT [taskset prefix...]: start an edge (TLS on PORT, admin on PORT+1, plain HTTP on
# PORT+2); its pid lands in edge_pid
edge() {
	local mode=$1 port=$2
	shift 2
	"$@" "$B/xet-edge" --origin "http://127.0.0.1:$P" --origin-token "$E" --data-dir "$WORK/edge-$mode" \
		--listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((port + 1))" \
		--http-listen "127.0.0.1:$((port + 2))" ${EDGE_CONFIG:+--config "$EDGE_CONFIG"} >"$WORK/edge-$mode.log" 2>&1 &
	edge_pid=$!
	pids+=("$edge_pid")
	up "https://127.0.0.1:$port"
}
edge shared $((P + 10))
shared_pid=$edge_pid
edge pinned $((P + 20)) taskset -c 0 # one CPU (the edge still runs two Ps there: edge.atLeastTwoProcs)
pinned_pid=$edge_pid

# bench MODE [reconbench flags...]: one reconbench latency run against that mode's edge
bench() {
	local mode=$1 url=https://127.0.0.1:$((P + 10)) pid=$shared_pid pre=()
	shift
	case $mode in
	pinned) url=https://127.0.0.1:$((P + 20)) pid=$pinned_pid pre=(taskset -c 1) ;;
	plain) url=http://127.0.0.1:$((P + 12)) ;;
	esac
	# shellcheck disable=SC2086 # RECONBENCH_ARGS is a list of flags
	GODEBUG=http2client=0 "${pre[@]}" "$B/reconbench" -url "$url" -insecure \
		-upload-url "http://127.0.0.1:$P" -write-token "$W" -read-token "$R" -server-pid "$pid" \
		${RECONBENCH_ARGS:-} "$@"
}
log "loading the fixtures (once, through the origin) and warming both edges"
bench shared -full 1 -ranged 0 | grep setup >&2
bench pinned -full 1 -ranged 0 >/dev/null

log "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $ROUNDS rounds"
out=$WORK/rounds.txt
: >"$out"
for i in $(seq "$ROUNDS"); do
	if [ -n "$QUIET" ]; then
		until awk -v q="$QUIET" '{exit !($1 < q)}' /proc/loadavg; do sleep 5; done
	fi
	read -ra modes <<<"$MODES"
	for j in "${!modes[@]}"; do
		mode=${modes[$(((i + j) % ${#modes[@]}))]}
		echo "== round $i $mode $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
		bench "$mode" | grep -v '^setup' | sed "s/^/$mode /"
	done | tee -a "$out"
done

# Median over the rounds of each line's p99 (Go durations: µs, ms or s).
echo "== median p99 over $ROUNDS rounds (min .. max)"
awk '
function ms(v) {
	if (v ~ /µs$/) return substr(v, 1, length(v) - 2) / 1000
	if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0
	if (v ~ /s$/) return substr(v, 1, length(v) - 1) * 1000
	return v + 0
}
/ p99=/ {
	key = $1 " " $3 " " $4
	sub(/:$/, "", key)
	for (f = 5; f <= NF; f++) if ($f ~ /^p99=/) v = ms(substr($f, 5))
	n[key]++
	vals[key, n[key]] = v
	if (!(key in seen)) { seen[key] = 1; order[++k] = key }
}
END {
	for (j = 1; j <= k; j++) {
		key = order[j]
		m = n[key]
		for (a = 1; a <= m; a++) s[a] = vals[key, a]
		for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (s[b] < s[a]) { t = s[a]; s[a] = s[b]; s[b] = t }
		med = (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
		printf "%-28s p99 median %6.2f ms  (%.2f .. %.2f, %d rounds)\n", key, med, s[1], s[m], m
	}
}' "$out"
