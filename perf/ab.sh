#!/usr/bin/env bash
# ab.sh — two revisions of xetcdn side by side in one run: the edge's 100,000-term
# reconstruction latency (reconbench, HTTP/1.1+TLS) and its xorb byte throughput (edgebench
# transfer, HTTP/1.1+TLS), each revision on its own origin + edge, rounds alternating which
# revision goes first, so that both see the same neighbours. Prints every measurement, then
# per revision the median over the rounds and the after/before ratio.
#
#   perf/ab.sh BEFORE AFTER        e.g. perf/ab.sh d3b37c9 HEAD   (from the repository root)
#
# Each revision is checked out into a temporary worktree and built there (its own binaries and
# its own reconbench/edgebench). Each round runs, per revision: reconbench's latency mode (200
# full + 200 ranged requests per 100,000-term shape, one at a time), its throughput mode over
# realistic files (CONNS clients for FOR) and edgebench transfer (CONNS connections for FOR).
# Environment: ROUNDS (5), FOR (5s),
# CONNS (16), SIZE_MB (random file for the transfers, 128), PORT_BASE (29600), WORK (a temp dir).
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,15p "$0"; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-5} FOR=${FOR:-5s} CONNS=${CONNS:-16} SIZE_MB=${SIZE_MB:-128} P=${PORT_BASE:-29600}
WORK=${WORK:-$(mktemp -d /tmp/ab.XXXXXX)}
mkdir -p "$WORK"
log() { printf 'ab: %s\n' "$*" >&2; }

pids=()
trees=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for t in "${trees[@]}"; do git -C "$ROOT" worktree remove --force "$t" 2>/dev/null || true; done
}
trap cleanup EXIT
up() {
	for _ in $(seq 300); do curl -skf -o /dev/null "$1/healthz" && return 0; sleep 0.1; done
	log "$1 did not come up"; exit 1
}

head -c $((SIZE_MB << 20)) /dev/urandom >"$WORK/rand.bin"
declare -A url pid rtok wtok file
i=0
for name in before after; do
	rev=$1
	[ "$name" = after ] && rev=$2
	tree=$WORK/src-$name
	git -C "$ROOT" worktree add -q --detach "$tree" "$rev"
	trees+=("$tree")
	(cd "$tree" && go build -o "$WORK/$name/" ./cmd/xet-origin ./cmd/xet-edge ./cmd/xet \
		./perf/cmd/reconbench ./perf/cmd/edgebench)
	B=$WORK/$name o=$((P + 10 * i)) e=$((P + 10 * i + 1))
	"$B/xet-origin" --data-dir "$WORK/$name/origin" --listen "127.0.0.1:$o" >"$WORK/$name/origin.log" 2>&1 &
	pids+=($!)
	up "http://127.0.0.1:$o"
	tok() { "$B/xet-origin" token --data-dir "$WORK/$name/origin" --ttl 24h "$@"; }
	wtok[$name]=$(tok --access write --scope models/bench/ab)
	rtok[$name]=$(tok --access read --scope models/bench/ab)
	"$B/xet-edge" --origin "http://127.0.0.1:$o" --origin-token "$(tok --access edge)" \
		--data-dir "$WORK/$name/edge" --listen "127.0.0.1:$e" >"$WORK/$name/edge.log" 2>&1 &
	pid[$name]=$!
	pids+=($!)
	url[$name]=https://127.0.0.1:$e
	up "${url[$name]}"
	file[$name]=$("$B/xet" upload --endpoint "http://127.0.0.1:$o" --token "${wtok[$name]}" "$WORK/rand.bin" |
		sed -n 's/.*"file_hash": *"\([0-9a-f]*\)".*/\1/p')
	[ -n "${file[$name]}" ] || { log "$name: upload printed no file_hash"; exit 1; }
	i=$((i + 1))
done

transfer() { # transfer NAME: one edgebench transfer run (warms the edge's cache on the first call)
	"$WORK/$1/edgebench" -url "${url[$1]}" -token "${rtok[$1]}" -file "${file[$1]}" \
		-server-pid "${pid[$1]}" -proto h1 -conns "$CONNS" -for "$FOR" transfer
}
recon() { # recon NAME [reconbench flags]: latency mode by default
	local n=$1 o=${url[$1]##*:}
	shift
	GODEBUG=http2client=0 "$WORK/$n/reconbench" -url "${url[$n]}" -insecure \
		-upload-url "http://127.0.0.1:$((o - 1))" -write-token "${wtok[$n]}" -read-token "${rtok[$n]}" \
		-server-pid "${pid[$n]}" "$@"
}

log "loading the fixtures (through each origin) and warming both edges"
for n in before after; do
	recon "$n" -full 1 -ranged 0 | grep setup >&2 || true
	recon "$n" -concurrency 4 -duration 2s | grep setup >&2 || true
	transfer "$n" >/dev/null
done

log "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $ROUNDS rounds; before=$1 after=$2"
out=$WORK/rounds.txt
: >"$out"
for r in $(seq "$ROUNDS"); do
	order=(before after)
	[ $((r % 2)) -eq 0 ] && order=(after before)
	for n in "${order[@]}"; do
		echo "== round $r $n $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
		recon "$n" | grep -v '^setup' | sed "s/^/$n recon /"
		recon "$n" -concurrency "$CONNS" -duration "$FOR" | grep -v '^setup' | sed "s/^/$n mix /"
		transfer "$n" | sed "s/^/$n transfer /"
	done | tee -a "$out"
done

# Medians over the rounds: each reconbench line's p99, each edgebench line's MB/s.
echo "== medians over $ROUNDS rounds (after/before)"
awk '
function ms(v) {
	if (v ~ /µs$/) return substr(v, 1, length(v) - 2) / 1000
	if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0
	if (v ~ /s$/) return substr(v, 1, length(v) - 1) * 1000
	return v + 0
}
function add(key, rev, v) {
	n[key, rev]++
	vals[key, rev, n[key, rev]] = v
	if (!(key in seen)) { seen[key] = 1; order[++k] = key }
}
function median(key, rev,   m, a, b, t, s) {
	m = n[key, rev]
	if (!m) return -1
	for (a = 1; a <= m; a++) s[a] = vals[key, rev, a]
	for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (s[b] < s[a]) { t = s[a]; s[a] = s[b]; s[b] = t }
	return (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
}
$2 == "recon" && / p99=/ {
	key = "recon " $4 " " $5 " p99 ms"
	sub(/:/, "", key)
	for (f = 6; f <= NF; f++) if ($f ~ /^p99=/) add(key, $1, ms(substr($f, 5)))
}
$2 == "mix" && /req\/s=/ {
	for (f = 3; f <= NF; f++) {
		if ($f ~ /^req\/s=/) add("mix req/s", $1, substr($f, 7) + 0)
		if ($f ~ /^p99=/) add("mix p99 ms", $1, ms(substr($f, 5)))
	}
}
$2 == "transfer" && /MB\/s=/ {
	for (f = 3; f <= NF; f++) if ($f ~ /^MB\/s=/) add("transfer h1 MB/s", $1, substr($f, 6) + 0)
}
END {
	for (j = 1; j <= k; j++) {
		b = median(order[j], "before"); a = median(order[j], "after")
		printf "%-36s before %9.2f  after %9.2f  ratio %.3f\n", order[j], b, a, (b > 0 ? a / b : 0)
	}
}' "$out"
