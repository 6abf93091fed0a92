#!/usr/bin/env bash
# run.sh — `make perf`: a short end-to-end performance run on loopback (perf/README.md, "make perf").
#
# Starts (or reuses) the test services (PostgreSQL, MinIO; scripts/services.sh), an origin on a
# fresh database and bucket, and EDGES edges (one per region of the trace); optionally loads a synthetic index of SCALE files and
# xorbs (perf/cmd/indexload); generates the SCENARIO trace and replays it twice (cold edge, then
# warm edge); runs the 100,000-term reconstruction gate (reconbench: 200 full + 200 ranged per
# shape, one at a time) through the origin and through the edge; then draws the plots. Results
# go to perf/results/<UTC time>-<scenario>/: replay-{cold,warm}.json and .txt, gate-*.txt,
# *.png, run.txt (machine, commit, commands). Everything it started is stopped, and the
# database, bucket and temporary files are removed, on success, failure or Ctrl-C.
#
# Environment: SCENARIO (zipf), DURATION (120 s of trace), RATE (trace default), REPOS (100),
# TRACE_SCALE (0.001: 1-10 GiB shards become 1-10 MiB), CHANGE_SPAN_MB (1: a new version of a
# shard changes scattered 1 MiB blocks; N: aligned runs of N MiB, tracegen -change-span), HEAD_KB
# (0; N: every version of a shard starts with 1..N KiB of its own, tracegen -head),
# SEED (13), SCALE (0: no synthetic index), GATE (1; 0 skips the gate), EDGES (1; with N > 1
# the trace has N regions e1..eN, one edge each), PORT_BASE (31700; 2 + 3 x EDGES ports from it,
# which must be free), OUT (the results directory), TESTENV (a testenv.sh of services already
# running: then scripts/services.sh is not called).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCENARIO=${SCENARIO:-zipf} DURATION=${DURATION:-120} RATE=${RATE:-} REPOS=${REPOS:-100}
TRACE_SCALE=${TRACE_SCALE:-0.001} CHANGE_SPAN_MB=${CHANGE_SPAN_MB:-1} HEAD_KB=${HEAD_KB:-0} SEED=${SEED:-13} SCALE=${SCALE:-0} GATE=${GATE:-1} P=${PORT_BASE:-31700} EDGES=${EDGES:-1}
OUT=${OUT:-$ROOT/perf/results/$(date -u +%Y%m%dT%H%M%SZ)-$SCENARIO}
log() { printf 'perf: %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

case $SCENARIO in zipf | whole-repo | finetune | burst) ;; *) die "SCENARIO=$SCENARIO: want zipf, whole-repo, finetune or burst" ;; esac
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 && $DURATION -le 3600 ]] || die "DURATION=$DURATION: want whole seconds, 1..3600"
[[ $CHANGE_SPAN_MB =~ ^[0-9]+$ && $CHANGE_SPAN_MB -ge 1 && $CHANGE_SPAN_MB -le 1024 ]] || die "CHANGE_SPAN_MB=$CHANGE_SPAN_MB: want whole MiB, 1..1024"
[[ $HEAD_KB =~ ^[0-9]+$ && $HEAD_KB -le 65536 ]] || die "HEAD_KB=$HEAD_KB: want whole KiB, 0..65536"
[[ $SCALE =~ ^[0-9]+$ ]] || die "SCALE=$SCALE: want a whole number of files (0: none)"
[[ $GATE == 0 || $GATE == 1 ]] || die "GATE=$GATE: want 0 or 1"
[[ -z $RATE || $RATE =~ ^[0-9]+([.][0-9]+)?$ ]] || die "RATE=$RATE: want a number"
[[ $EDGES =~ ^[1-9]$ ]] || die "EDGES=$EDGES: want 1..9"
[[ $P =~ ^[0-9]+$ && $P -ge 1024 && $P -le 65000 ]] || die "PORT_BASE=$P: want 1024..65000"

NPORTS=$((2 + 3 * EDGES))
for port in $(seq "$P" $((P + NPORTS - 1))); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is in use: set PORT_BASE to $NPORTS free ports"; fi
done
WORK=$(mktemp -d /tmp/xetperf.XXXXXX)
DB=xetperf_$(basename "$WORK" | tr -dc 'a-zA-Z0-9' | tr 'A-Z' 'a-z')
BUCKET=$(echo "$DB" | tr '_' '-')
pids=()
db_made=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "$db_made" ]; then
		psql -q "$XETCDN_TEST_POSTGRES_DSN" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || log "could not drop database $DB"
		XETCDN_S3_ACCESS_KEY=$XETCDN_TEST_S3_ACCESS_KEY XETCDN_S3_SECRET_KEY=$XETCDN_TEST_S3_SECRET_KEY \
			"$WORK/bin/s3rmbucket" -endpoint "$XETCDN_TEST_S3_ENDPOINT" -bucket "$BUCKET" || log "could not remove bucket $BUCKET"
	fi
	if [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else log "kept $WORK"; fi
	[ $rc -eq 0 ] || log "failed (exit $rc); partial results in $OUT"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${TESTENV:-}" ]; then
	"$ROOT/scripts/services.sh" start >&2
	TESTENV=$ROOT/.cache/testenv.sh
fi
# shellcheck source=/dev/null
. "$TESTENV"
: "${XETCDN_TEST_POSTGRES_DSN:?no PostgreSQL in $TESTENV}" "${XETCDN_TEST_S3_ENDPOINT:?no MinIO in $TESTENV}"

mkdir -p "$OUT" "$WORK/bin"
log "building into $WORK/bin"
(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/xet-origin ./cmd/xet-edge ./perf/cmd/tracegen ./perf/cmd/replay \
	./perf/cmd/reconbench ./perf/cmd/perfplot ./perf/cmd/indexload ./perf/cmd/s3rmbucket)
B=$WORK/bin
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
	echo "machine: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "go: $(go version)"
	echo "settings: SCENARIO=$SCENARIO DURATION=$DURATION RATE=${RATE:-default} REPOS=$REPOS TRACE_SCALE=$TRACE_SCALE CHANGE_SPAN_MB=$CHANGE_SPAN_MB HEAD_KB=$HEAD_KB SEED=$SEED SCALE=$SCALE GATE=$GATE EDGES=$EDGES"
} >"$OUT/run.txt"

up() { # up URL PID: wait (60 s at most) until URL answers
	for _ in $(seq 600); do
		curl -sf -o /dev/null --max-time 2 "$1" && return 0
		kill -0 "$2" 2>/dev/null || die "process $2 exited before $1 answered (logs in $WORK)"
		sleep 0.1
	done
	die "$1 did not answer within 60 s"
}

psql -q "$XETCDN_TEST_POSTGRES_DSN" -c "CREATE DATABASE $DB" >/dev/null
db_made=1
DSN=$(sed "s#/postgres?#/$DB?#" <<<"$XETCDN_TEST_POSTGRES_DSN")
printf '{"index":{"driver":"postgres"},"objects":{"driver":"s3","endpoint":"%s","bucket":"%s"}}\n' \
	"$XETCDN_TEST_S3_ENDPOINT" "$BUCKET" >"$WORK/origin.json"
O=127.0.0.1:$P OA=127.0.0.1:$((P + 1))
# Edge k (1..EDGES): TLS listener, plain HTTP listener, admin listener.
eport() { echo $((P + 2 + 3 * ($1 - 1) + $2)); }
EH=127.0.0.1:$(eport 1 1)
XETCDN_POSTGRES_DSN=$DSN XETCDN_S3_ACCESS_KEY=$XETCDN_TEST_S3_ACCESS_KEY XETCDN_S3_SECRET_KEY=$XETCDN_TEST_S3_SECRET_KEY \
	"$B/xet-origin" --data-dir "$WORK/origin" --listen "$O" --admin-listen "$OA" --edge-url "http://$EH" \
	--config "$WORK/origin.json" >"$WORK/origin.log" 2>&1 &
OPID=$!
pids+=($OPID)
up "http://$O/healthz" $OPID
tok() { "$B/xet-origin" token --data-dir "$WORK/origin" --ttl 24h "$@"; }
edgeflags=() regions=()
for k in $(seq "$EDGES"); do
	eh=127.0.0.1:$(eport "$k" 1) ea=127.0.0.1:$(eport "$k" 2)
	"$B/xet-edge" --origin "http://$O" --origin-token "$(tok --scope edge --access edge)" --data-dir "$WORK/edge$k" \
		--listen "127.0.0.1:$(eport "$k" 0)" --http-listen "$eh" --public-url "http://$eh" --admin-listen "$ea" \
		>"$WORK/edge$k.log" 2>&1 &
	pid=$!
	pids+=($pid)
	up "http://$eh/healthz" $pid
	[ "$k" = 1 ] && EPID=$pid
	if [ "$EDGES" = 1 ]; then
		edgeflags+=(-edge "http://$eh")
	else
		edgeflags+=(-edge "e$k=http://$eh")
		regions+=("e$k")
	fi
	edgeflags+=(-edge-metrics "http://$ea/metrics" -pid "edge$([ "$EDGES" = 1 ] || echo "$k")=$pid")
done
log "origin http://$O (Postgres $DB, MinIO bucket $BUCKET), $EDGES edge(s) from http://$EH"

if [ "$SCALE" -gt 0 ]; then
	log "loading a synthetic index of $SCALE files and $SCALE xorbs"
	"$B/indexload" -dsn "$DSN" -files "$SCALE" -xorbs "$SCALE" | tee "$OUT/indexload.txt"
fi

rate=()
[ -n "$RATE" ] && rate=(-rate "$RATE")
[ "$EDGES" -gt 1 ] && rate+=(-regions "$(IFS=,; echo "${regions[*]}")")
"$B/tracegen" -scenario "$SCENARIO" -seed "$SEED" -duration "$DURATION" "${rate[@]}" -repos "$REPOS" \
	-scale "$TRACE_SCALE" -change-span "$CHANGE_SPAN_MB" -head "$HEAD_KB" -o "$OUT/trace.jsonl" 2>&1 | tee -a "$OUT/run.txt" >&2
for pass in cold warm; do
	log "replay ($pass edge), about $DURATION s after the preload"
	rc=0
	# The warm pass re-uploads files the server holds since the cold pass: no new-chunk bound.
	nc=-new-chunks=true
	[ "$pass" = warm ] && nc=-new-chunks=false
	"$B/replay" -trace "$OUT/trace.jsonl" -origin "http://$O" "${edgeflags[@]}" "$nc" \
		-token-cmd "$B/xet-origin token --data-dir $WORK/origin --access write --ttl 24h --scope" \
		-origin-metrics "http://$OA/metrics" -pid origin=$OPID \
		-out "$OUT/replay-$pass.json" -progress 30s >"$OUT/replay-$pass.txt" || rc=$?
	cat "$OUT/replay-$pass.txt"
	[ $rc -eq 0 ] || [ $rc -eq 3 ] || die "replay failed (exit $rc)"
done

if [ "$GATE" = 1 ]; then
	W=$(tok --scope models/bench/gate --access write) R=$(tok --scope models/bench/gate --access read)
	log "gate through the origin (loads the two 100,000-term fixtures first: minutes)"
	"$B/reconbench" -url "http://$O" -write-token "$W" -read-token "$R" -server-pid $OPID | tee "$OUT/gate-origin.txt"
	log "gate through the (first) edge (first asks warm it)"
	"$B/reconbench" -url "http://$EH" -upload-url "http://$O" -write-token "$W" -read-token "$R" -full 1 -ranged 1 >/dev/null
	"$B/reconbench" -url "http://$EH" -upload-url "http://$O" -write-token "$W" -read-token "$R" -server-pid $EPID | tee "$OUT/gate-edge.txt"
fi

"$B/perfplot" -o "$OUT" "$OUT"/replay-*.json
cp "$WORK"/origin.log "$WORK"/edge*.log "$OUT/" 2>/dev/null || true
log "results in $OUT"
