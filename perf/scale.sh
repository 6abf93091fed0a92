#!/usr/bin/env bash
# scale.sh — `make perf-scale`: the index-at-scale measurements of issue 13 (perf/README.md,
# "Index at scale: make perf-scale").
#
# Starts its OWN PostgreSQL (initdb in WORK, port PORT_BASE; never the shared test services),
# loads two synthetic indexes with indexload — SMALL files and xorbs (10^4) and SCALE (10^7) —
# in a lean shape (CHUNKS chunks per xorb, files of 1..MAX_TERMS terms), with the load-only
# settings fsync=off and wal_level=minimal, then restarts the server durable (fsync=on,
# synchronous_commit=on) and starts one origin and one edge per index. It then measures, the two
# scales side by side (small, then large, for every step):
#   1. reconload: RATE reconstructions/s open loop for DURATION s over a Zipf mix of sampled files,
#      on the origin, on a cold edge, then on the now warm edge;
#   2. the 100,000-term gate (reconbench, shape worst: 200 full + 200 ranged, one at a time) on
#      the origin;
#   3. shard registration (ingestbench -mode shards, hf_xet-like 4-file shards, durable Postgres);
#   4. database size per table and index, the servers' cache metrics and resident memory.
# Results (text, JSON, logs, run.txt with `uptime` before every step, the origin's metrics
# around every reconload step and the edge's around the edge steps) go to OUT
# (perf/results/<UTC time>-scale). A watchdog stops the run if the file system of WORK falls
# under MIN_FREE_GB free. On success, failure or Ctrl-C everything it started is stopped and WORK
# (the database included) is removed; KEEP=1 keeps WORK and a later run with the same WORK reuses
# the loaded database (MEASURE=0: load only).
#
# Environment: SCALE (10000000), SMALL (10000), CHUNKS (8), MAX_TERMS (100), REPOS (1000),
# SAMPLES (10000 per index), RATE (1000), DURATION (60 s), ZIPF (1.1), RANGE_SHARE (0.2), GATE (1),
# SHARDS (4000; 0 skips), SHARD_SCOPES (4: the registration step runs once with one scope, 16
# in flight (the per-scope upload limit), then with SHARD_SCOPES scopes, 16 each; 1 skips the
# second), SHARD_DBS ("small large": the indexes the registration step runs on), SHARD_ONE (1;
# 0 skips the one-scope run when SHARD_SCOPES > 1), SHARD_SHAPE (pool: ingestbench -shape, the
# shared 16-xorb pool, the worst case; own: each shard references a xorb of its own, as hf_xet
# uploads do; the timed part's PostgreSQL CPU is in the db-pid line), SHARD_WINDOW (0; N > 0 samples the
# registration step every N seconds and writes shards/s, origin and PostgreSQL CPU per shard,
# WAL and full-page images per shard, and the load per window to OUT/shards-*.windows.txt:
# the steady state after the restart's checkpoint), PG_TUNED (1: the durable restart uses the recommended production settings of
# docs/origin.md, "PostgreSQL settings", PG_RECOMMENDED in perf/pg.sh; 0: the earlier ones,
# max_wal_size 2GB), SHARED_BUFFERS (25 % of the machine's RAM, in MB: what docs/origin.md
# recommends for production; 512MB was the default before 2026-12-04 and stays available for
# comparison), PREWARM (1: every index is loaded into shared_buffers with pg_prewarm before
# measuring, as on a server that has run a while, ~3.3 GB of indexes at 10^7 when loaded; 0: a
# cold cache after the restart. Registration runs on a 512MB cache fall as the runs grow
# dedup_pkey past it: perf/BENCHMARKS.md, 2026-12-04, regdrift), ORIGIN_SRC (the source tree xet-origin
# is built from for the measurements, default this one; the tools always come from this one),
# PG_OPTS (more settings for the durable restart, "-c name=value ...", after the others: for
# diagnostics), SQL_BEFORE (SQL run on each database of SHARD_DBS after the durable restart,
# then a CHECKPOINT: a schema variant to measure, e.g. an index rebuilt another way), UP_WAIT
# (600: seconds an origin may take to answer, migrations included), READ_AHEAD (0: the edges' read-ahead off; the synthetic xorbs have no
# objects), RECON (1; 0 skips the reconload steps), PORT_BASE (31800; eleven ports from it, which must be free), WORK
# (mktemp under /tmp), OUT, MIN_FREE_GB (20), MEASURE (1), KEEP.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCALE=${SCALE:-10000000} SMALL=${SMALL:-10000} CHUNKS=${CHUNKS:-8} MAX_TERMS=${MAX_TERMS:-100} REPOS=${REPOS:-1000}
SAMPLES=${SAMPLES:-10000} RATE=${RATE:-1000} DURATION=${DURATION:-60} ZIPF=${ZIPF:-1.1} RANGE_SHARE=${RANGE_SHARE:-0.2}
SHARD_SCOPES=${SHARD_SCOPES:-4} PG_TUNED=${PG_TUNED:-1} PG_OPTS=${PG_OPTS:-} SHARED_BUFFERS=${SHARED_BUFFERS:-$(awk '/^MemTotal:/ { printf "%dMB", $2 / 4 / 1024 }' /proc/meminfo)} PREWARM=${PREWARM:-1} ORIGIN_SRC=${ORIGIN_SRC:-}
SHARD_DBS=${SHARD_DBS:-small large} SHARD_ONE=${SHARD_ONE:-1} SHARD_SHAPE=${SHARD_SHAPE:-pool} SHARD_WINDOW=${SHARD_WINDOW:-0}
GATE=${GATE:-1} SHARDS=${SHARDS:-4000} READ_AHEAD=${READ_AHEAD:-0} RECON=${RECON:-1} P=${PORT_BASE:-31800} MIN_FREE_GB=${MIN_FREE_GB:-20} MEASURE=${MEASURE:-1}
OUT=${OUT:-$ROOT/perf/results/$(date -u +%Y%m%dT%H%M%SZ)-scale}
log() { printf 'perf-scale: %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

num() { [[ $2 =~ ^[0-9]+$ ]] || die "$1=$2: want a whole number"; }
num SCALE "$SCALE"; num SMALL "$SMALL"; num CHUNKS "$CHUNKS"; num MAX_TERMS "$MAX_TERMS"; num REPOS "$REPOS"
num SAMPLES "$SAMPLES"; num DURATION "$DURATION"; num SHARDS "$SHARDS"; num PORT_BASE "$P"; num MIN_FREE_GB "$MIN_FREE_GB"
[[ $RATE =~ ^[0-9]+([.][0-9]+)?$ ]] || die "RATE=$RATE: want a number of requests per second"
[[ $ZIPF =~ ^[0-9]+([.][0-9]+)?$ ]] || die "ZIPF=$ZIPF: want a number > 1"
[[ $RANGE_SHARE =~ ^(0|1|0?[.][0-9]+)$ ]] || die "RANGE_SHARE=$RANGE_SHARE: want a number in [0, 1]"
[ "$SCALE" -ge 1 ] && [ "$SMALL" -ge 1 ] || die "SCALE and SMALL must be >= 1"
[ "$DURATION" -ge 1 ] || die "DURATION=$DURATION: want >= 1"
[[ $GATE == 0 || $GATE == 1 ]] || die "GATE=$GATE: want 0 or 1"
[[ $MEASURE == 0 || $MEASURE == 1 ]] || die "MEASURE=$MEASURE: want 0 or 1"
[[ $READ_AHEAD == 0 || $READ_AHEAD == 1 ]] || die "READ_AHEAD=$READ_AHEAD: want 0 or 1"
[[ $RECON == 0 || $RECON == 1 ]] || die "RECON=$RECON: want 0 or 1"
[[ $SHARD_ONE == 0 || $SHARD_ONE == 1 ]] || die "SHARD_ONE=$SHARD_ONE: want 0 or 1"
num SHARD_WINDOW "$SHARD_WINDOW"
for db in $SHARD_DBS; do [[ $db == small || $db == large ]] || die "SHARD_DBS=$SHARD_DBS: want small and/or large"; done
[[ $PG_TUNED == 0 || $PG_TUNED == 1 ]] || die "PG_TUNED=$PG_TUNED: want 0 or 1"
[[ $PREWARM == 0 || $PREWARM == 1 ]] || die "PREWARM=$PREWARM: want 0 or 1"
[[ $PG_OPTS =~ ^(\ *-c\ [a-z_.]+=[A-Za-z0-9_.]+)*\ *$ ]] || die "PG_OPTS=$PG_OPTS: want -c name=value ..."
[[ $SHARD_SCOPES =~ ^[1-9][0-9]*$ ]] || die "SHARD_SCOPES=$SHARD_SCOPES: want a positive whole number"
[[ $SHARD_SHAPE == pool || $SHARD_SHAPE == own ]] || die "SHARD_SHAPE=$SHARD_SHAPE: want pool or own"
[[ $SHARED_BUFFERS =~ ^[1-9][0-9]*(MB|GB)$ ]] || die "SHARED_BUFFERS=$SHARED_BUFFERS: want e.g. 4GB or 512MB"
[ -z "$ORIGIN_SRC" ] || [ -f "$ORIGIN_SRC/cmd/xet-origin/main.go" ] || die "ORIGIN_SRC=$ORIGIN_SRC: no cmd/xet-origin there"

for port in $(seq "$P" $((P + 10))); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is in use: set PORT_BASE to eleven free ports"; fi
done

# PostgreSQL binaries and the system user it runs as (it refuses root), as scripts/services.sh.
. "$ROOT/perf/pg.sh"

made_work=
if [ -z "${WORK:-}" ]; then
	WORK=$(mktemp -d /tmp/xetscale.XXXXXX)
	made_work=1
fi
mkdir -p "$WORK" "$OUT"
chmod 755 "$WORK"
PGDATA_=$WORK/pg
pids=()
pg_up=
watchdog=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	# || true: under set -e a failed kill (the watchdog has exited after stopping the run) ended
	# this handler here and left PostgreSQL, the origins and the edges running.
	[ -z "$watchdog" ] || kill "$watchdog" 2>/dev/null || true
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "$pg_up" ]; then
		as_pg "$PGBIN/pg_ctl" -D "$PGDATA_" -m fast -w -t 120 stop >/dev/null 2>&1 ||
			as_pg "$PGBIN/pg_ctl" -D "$PGDATA_" -m immediate -w -t 30 stop >/dev/null 2>&1 || log "could not stop PostgreSQL in $PGDATA_"
	fi
	if [ -n "${KEEP:-}" ]; then log "kept $WORK (WORK=$WORK reuses its database)"; else rm -rf "$WORK"; fi
	[ $rc -eq 0 ] || log "failed (exit $rc); partial results in $OUT"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_gb() { df -P --block-size=1G "$WORK" | awk 'NR==2 {print $4}'; }
# The watchdog: the disk is shared; stop the run (TERM to this script) before it leaves less
# than MIN_FREE_GB free.
(
	while sleep 5; do
		f=$(free_gb)
		if [ "$f" -lt "$MIN_FREE_GB" ]; then
			log "only $f GB free on $WORK's file system (MIN_FREE_GB=$MIN_FREE_GB): stopping the run"
			kill -TERM $$
			exit 0
		fi
	done
) &
watchdog=$!

note() { # note WHAT: the machine load next to every step, in run.txt
	printf '%s %s | %s | free %s GB\n' "$(date -u +%H:%M:%S)" "$1" "$(uptime | sed 's/.*load/load/')" "$(free_gb)" >>"$OUT/run.txt"
}

B=$WORK/bin
mkdir -p "$B"
log "building into $B"
(cd "$ROOT" && go build -o "$B/" ./cmd/xet-origin ./perf/cmd/indexload)
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
	echo "machine: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(nproc) cores"
	echo "postgres: $("$PGBIN/postgres" --version 2>/dev/null || echo unknown)"
	echo "settings: SCALE=$SCALE SMALL=$SMALL CHUNKS=$CHUNKS MAX_TERMS=$MAX_TERMS REPOS=$REPOS SAMPLES=$SAMPLES RATE=$RATE DURATION=$DURATION ZIPF=$ZIPF RANGE_SHARE=$RANGE_SHARE GATE=$GATE SHARDS=$SHARDS READ_AHEAD=$READ_AHEAD RECON=$RECON"
} >>"$OUT/run.txt"

PGPORT_=$P
pg_start() { # pg_start load|durable
	# One line: pg_ctl hands -o to a shell, which would end the command at a newline.
	local opts="-c port=$PGPORT_ -c listen_addresses=127.0.0.1 -c unix_socket_directories=$PGDATA_ -c max_connections=200"
	if [ "$1" = durable ] && [ "$PG_TUNED" = 1 ]; then
		opts+=" -c shared_buffers=$SHARED_BUFFERS -c maintenance_work_mem=256MB $PG_RECOMMENDED" # perf/pg.sh
	else
		opts+=" -c shared_buffers=512MB -c maintenance_work_mem=256MB -c max_wal_size=2GB -c checkpoint_timeout=30min"
	fi
	[ "$1" = durable ] && opts+=" $PG_OPTS"
	if [ "$1" = load ]; then
		opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c wal_level=minimal -c max_wal_senders=0 -c autovacuum=off"
	fi
	as_pg "$PGBIN/pg_ctl" -D "$PGDATA_" -l "$WORK/pg.log" -o "$opts" -w -t 120 start >/dev/null ||
		{ tail -n 20 "$WORK/pg.log" >&2; die "PostgreSQL did not start"; }
	pg_up=1
}
pg_stop() {
	as_pg "$PGBIN/pg_ctl" -D "$PGDATA_" -m fast -w -t 300 stop >/dev/null
	pg_up=
}
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT_" -U xet "$@"; }
dsn() { echo "postgres://xet@127.0.0.1:$PGPORT_/$1?sslmode=disable"; }

up() { # up URL PID: wait (UP_WAIT s, 600 by default: a migration may rebuild an index) until URL answers
	local _
	for _ in $(seq $((${UP_WAIT:-600} * 10))); do
		curl -sf -o /dev/null --max-time 2 "$1" && return 0
		kill -0 "$2" 2>/dev/null || die "process $2 exited before $1 answered (logs in $WORK)"
		sleep 0.1
	done
	die "$1 did not answer within ${UP_WAIT:-600} s"
}
stop_pid() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# origin NAME DB LISTEN ADMIN: start an origin on database DB with its objects on local disk.
origin() {
	printf '{"index":{"driver":"postgres"}}\n' >"$WORK/$1.json"
	XETCDN_POSTGRES_DSN=$(dsn "$2") "$B/xet-origin" --data-dir "$WORK/$1" --listen "$3" --admin-listen "$4" \
		--config "$WORK/$1.json" >>"$WORK/$1.log" 2>&1 &
	LAST=$!
	pids+=($LAST)
	up "http://$3/healthz" $LAST
}

if [ ! -f "$WORK/loaded" ]; then
	rm -rf "$PGDATA_"
	mkdir -m 700 "$PGDATA_"
	chown "$PGUSER_SYS" "$PGDATA_"
	touch "$WORK/pg.log" && chown "$PGUSER_SYS" "$WORK/pg.log"
	as_pg "$PGBIN/initdb" -D "$PGDATA_" -U xet --auth=trust --encoding=UTF8 --no-locale >"$WORK/initdb.log" 2>&1 ||
		{ cat "$WORK/initdb.log" >&2; die "initdb failed"; }
	pg_start load
	log "PostgreSQL (load settings: fsync=off, wal_level=minimal) on 127.0.0.1:$PGPORT_, data in $PGDATA_, $(free_gb) GB free"
	for db in small large; do
		psql_ -d postgres -c "CREATE DATABASE $db"
		origin "origin-$db" "$db" "127.0.0.1:$((P + 1))" "127.0.0.1:$((P + 2))" # migrates on start
		stop_pid "$LAST"
	done
	for db in small large; do
		n=$SMALL
		[ $db = large ] && n=$SCALE
		note "indexload $db ($n files, $n xorbs)"
		log "loading $n files and $n xorbs into $db (progress every 10 %)"
		start=$(date +%s)
		"$B/indexload" -dsn "$(dsn $db)" -files "$n" -xorbs "$n" -chunks "$CHUNKS" -max-terms "$MAX_TERMS" \
			-repos "$(( REPOS < n ? REPOS : n ))" -sample "$WORK/sample-$db.jsonl" -samples "$SAMPLES" | tee "$OUT/indexload-$db.txt"
		echo "load time: $(( $(date +%s) - start )) s" | tee -a "$OUT/indexload-$db.txt"
		note "indexload $db done"
	done
	touch "$WORK/loaded"
	pg_stop
fi
# The load ran with autovacuum off, so the first durable start found 10^7 inserted rows per table
# that no vacuum had seen, and autovacuum worked through them during the measurements (about a
# tenth of the server's CPU in a profile of shard registration), restarted at every run. Vacuum
# once after the load instead, with the load settings.
if [ ! -f "$WORK/vacuumed" ]; then
	pg_start load
	for db in small large; do
		note "vacuum $db"
		log "vacuum (analyze) $db: once after the load, so that autovacuum has nothing to catch up on during the measurements"
		start=$(date +%s)
		psql_ -d "$db" -c "VACUUM (ANALYZE)"
		log "vacuum $db: $(( $(date +%s) - start )) s"
	done
	pg_stop
	touch "$WORK/vacuumed"
fi
cp "$WORK"/sample-*.jsonl "$OUT/" 2>/dev/null || true
[ "$MEASURE" = 1 ] || { log "loaded (MEASURE=0): no measurement"; exit 0; }

(cd "$ROOT" && go build -o "$B/" ./cmd/xet-origin ./cmd/xet-edge ./perf/cmd/reconload ./perf/cmd/reconbench ./perf/cmd/ingestbench)
if [ -n "$ORIGIN_SRC" ]; then
	(cd "$ORIGIN_SRC" && go build -o "$B/" ./cmd/xet-origin) || die "build of xet-origin in $ORIGIN_SRC failed"
	echo "origin built from: $ORIGIN_SRC ($(git -C "$ORIGIN_SRC" rev-parse --short=12 HEAD 2>/dev/null || echo unknown))" >>"$OUT/run.txt"
fi
pg_start durable
PGPID=$(head -1 "$PGDATA_/postmaster.pid")
if [ "$PG_TUNED" = 1 ]; then
	log "PostgreSQL durable (fsync=on, synchronous_commit=on; shared_buffers=$SHARED_BUFFERS$PG_RECOMMENDED) on 127.0.0.1:$PGPORT_"
	echo "postgres durable settings: shared_buffers=$SHARED_BUFFERS$PG_RECOMMENDED" >>"$OUT/run.txt"
else
	log "PostgreSQL durable (fsync=on, synchronous_commit=on; shared_buffers=512MB, PG_TUNED=0) on 127.0.0.1:$PGPORT_"
fi
if [ -n "${SQL_BEFORE:-}" ]; then
	# A schema variant to measure (e.g. an index rebuilt another way); the checkpoint after it
	# puts its pages where every other page is: written once more as a full-page image.
	for db in $SHARD_DBS; do
		note "SQL_BEFORE $db"
		log "$db: $SQL_BEFORE"
		psql_ -d "$db" -c "$SQL_BEFORE" -c CHECKPOINT
		echo "SQL_BEFORE on $db: $SQL_BEFORE" >>"$OUT/run.txt"
	done
fi
if [ "$PREWARM" = 1 ]; then
	# A server that has run a while holds its hot indexes in memory; a fresh start has none.
	for db in small large; do
		note "prewarm $db"
		psql_ -d "$db" -At -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" \
			-c "SELECT '$db: prewarmed ' || coalesce(sum(pg_prewarm(c.oid)), 0) * 8 / 1024 || ' MiB of indexes'
				FROM pg_class c WHERE c.relkind = 'i' AND c.relnamespace = 'public'::regnamespace"
	done
fi
{
	echo "# database sizes (MiB): table rows with TOAST, indexes"
	for db in small large; do
		psql_ -d "$db" -At -F ' ' -c "SELECT '$db', 'database', pg_database_size(current_database())>>20, 0
			UNION ALL SELECT '$db', relname, pg_table_size(c.oid)>>20, pg_indexes_size(c.oid)>>20
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind = 'r' AND pg_total_relation_size(c.oid) > 0 ORDER BY 1, 3 DESC"
	done
} | tee "$OUT/dbsize.txt"

declare -A OPID EPID OURL EURL OADM EADM
i=1
for db in small large; do
	OURL[$db]=127.0.0.1:$((P + i)) OADM[$db]=127.0.0.1:$((P + i + 1))
	origin "origin-$db" "$db" "${OURL[$db]}" "${OADM[$db]}"
	OPID[$db]=$LAST
	i=$((i + 2))
done
tokcmd() { echo "$B/xet-origin token --data-dir $WORK/origin-$1 --ttl 24h --access read --scope"; }
edge() { # edge DB: a fresh edge (cold caches) in front of DB's origin
	local db=$1 base=$((P + 5)) d
	[ "$db" = large ] && base=$((P + 8))
	d=$WORK/edge-$db
	rm -rf "$d"
	# Read-ahead off: the synthetic xorbs have no objects, so every prefetch of an answered
	# reconstruction would be a 404 from the origin (tens of thousands a minute at 1,000/s) that
	# a real deployment would not pay for nothing. READ_AHEAD=1 keeps it on.
	if [ "$READ_AHEAD" = 1 ]; then echo '{}' >"$WORK/edge-$db.json"; else echo '{"cache":{"read_ahead_bytes":-1}}' >"$WORK/edge-$db.json"; fi
	EURL[$db]=127.0.0.1:$((base + 1)) EADM[$db]=127.0.0.1:$((base + 2))
	"$B/xet-edge" --origin "http://${OURL[$db]}" \
		--origin-token "$("$B/xet-origin" token --data-dir "$WORK/origin-$db" --ttl 24h --scope edge --access edge)" \
		--data-dir "$d" --listen "127.0.0.1:$base" --http-listen "${EURL[$db]}" --public-url "http://${EURL[$db]}" \
		--admin-listen "${EADM[$db]}" --config "$WORK/edge-$db.json" >>"$WORK/edge-$db.log" 2>&1 &
	EPID[$db]=$!
	pids+=(${EPID[$db]})
	up "http://${EURL[$db]}/healthz" ${EPID[$db]}
}
for db in small large; do edge $db; done
log "origins ${OURL[small]} (small), ${OURL[large]} (large); edges ${EURL[small]}, ${EURL[large]}"

# recon WHERE DB PASS: RATE reconstructions/s for DURATION s over DB's sample.
recon() {
	local where=$1 db=$2 pass=$3 url pid name=recon-$1-$2${3:+-$3}
	if [ "$where" = origin ]; then url=${OURL[$db]} pid=${OPID[$db]}; else url=${EURL[$db]} pid=${EPID[$db]}; fi
	note "$name"
	log "$name: $RATE recon/s for $DURATION s"
	local rc=0
	curl -sf --max-time 10 "http://${OADM[$db]}/metrics" >"$OUT/$name.origin-metrics-before.txt" || true
	[ "$where" = edge ] && { curl -sf --max-time 10 "http://${EADM[$db]}/metrics" >"$OUT/$name.edge-metrics-before.txt" || true; }
	"$B/reconload" -url "http://$url" -sample "$WORK/sample-$db.jsonl" -token-cmd "$(tokcmd "$db")" -rate "$RATE" \
		-duration "${DURATION}s" -zipf "$ZIPF" -range-share "$RANGE_SHARE" -pid "$where=$pid" -pid "origin=${OPID[$db]}" \
		-progress 10s -out "$OUT/$name.json" >"$OUT/$name.txt" || rc=$?
	curl -sf --max-time 10 "http://${OADM[$db]}/metrics" >"$OUT/$name.origin-metrics-after.txt" || true
	[ "$where" = edge ] && { curl -sf --max-time 10 "http://${EADM[$db]}/metrics" >"$OUT/$name.edge-metrics-after.txt" || true; }
	cat "$OUT/$name.txt"
	[ $rc -eq 0 ] || [ $rc -eq 3 ] || die "reconload failed (exit $rc)"
}
if [ "$RECON" = 1 ]; then
	for db in small large; do recon origin $db ""; done
	for db in small large; do recon edge $db cold; done
	for db in small large; do recon edge $db warm; done
fi

if [ "$GATE" = 1 ]; then
	for db in small large; do
		W=$("$B/xet-origin" token --data-dir "$WORK/origin-$db" --ttl 24h --scope models/bench/gate --access write)
		R=$("$B/xet-origin" token --data-dir "$WORK/origin-$db" --ttl 24h --scope models/bench/gate --access read)
		log "gate $db: loading the 100,000-term fixture (minutes)"
		"$B/reconbench" -url "http://${OURL[$db]}" -write-token "$W" -read-token "$R" -shapes worst -full 0 -ranged 0 >/dev/null
	done
	for db in small large; do
		W=$("$B/xet-origin" token --data-dir "$WORK/origin-$db" --ttl 24h --scope models/bench/gate --access write)
		R=$("$B/xet-origin" token --data-dir "$WORK/origin-$db" --ttl 24h --scope models/bench/gate --access read)
		note "gate-$db"
		log "gate $db: 200 full + 200 ranged, one at a time"
		"$B/reconbench" -url "http://${OURL[$db]}" -write-token "$W" -read-token "$R" -shapes worst \
			-server-pid "${OPID[$db]}" | tee "$OUT/gate-$db.txt"
	done
fi

# windows DB SECONDS: until killed, one line per SECONDS of the registration step on DB: shards
# registered (the origin's xet_origin_shard_registrations_total), the origin's and PostgreSQL's
# CPU (/proc, pg_cpu) and WAL (pg_stat_wal) per shard in that window, and the load.
windows() {
	local db=$1 every=$2 hz t0 t n o p w prev=() cur=()
	hz=$(getconf CLK_TCK) t0=$(date +%s)
	sample() {
		local f m
		f=($(sed 's/^.*) //' "/proc/${OPID[$db]}/stat"))
		m=$({ curl -sf --max-time 5 "http://${OADM[$db]}/metrics" || true; } | awk '/^xet_origin_shard_registrations_total/ && !/rejected/ { s += $NF } END { printf "%d", s }')
		w=($(psql_ -d postgres -At -F ' ' -c "SELECT wal_fpi, wal_bytes FROM pg_stat_wal" || echo 0 0))
		cur=("$(date +%s.%N)" "$m" $((f[11] + f[12])) "$(pg_cpu "$PGPID")" "${w[0]}" "${w[1]}")
	}
	printf '%6s %9s %9s %10s %10s %9s %9s  %s\n' t_s shards shards/s origin_ms pg_ms fpi wal_B "load (1 min)"
	sample
	prev=("${cur[@]}")
	while sleep "$every"; do
		sample
		awk -v t0="$t0" -v hz="$hz" -v l="$(cut -d' ' -f1 /proc/loadavg)" -v a="${prev[*]}" -v b="${cur[*]}" 'BEGIN {
			split(a, p, " "); split(b, c, " "); n = c[2] - p[2]; d = c[1] - p[1]
			if (n <= 0) { printf "%6d %9d %9s %10s %10s %9s %9s  %s\n", c[1] - t0, 0, "-", "-", "-", "-", "-", l; exit }
			printf "%6d %9d %9.0f %10.3f %10.3f %9.2f %9.0f  %s\n", c[1] - t0, n, n / d, (c[3] - p[3]) * 1000 / hz / n,
				(c[4] - p[4]) * 1000 / hz / n, (c[5] - p[5]) / n, (c[6] - p[6]) / n, l }'
		prev=("${cur[@]}")
	done
}

# tabstats DB: per table (heap) and index of DB, cumulative: name, rows inserted, updated,
# heap-only updated (tables; 0 for indexes), buffer hits, reads (misses: from the OS).
tabstats() {
	psql_ -d "$1" -At -F ' ' -c "SELECT 'heap:' || t.relname, t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, coalesce(io.heap_blks_hit, 0), coalesce(io.heap_blks_read, 0)
		FROM pg_stat_user_tables t JOIN pg_statio_user_tables io USING (relid)
		UNION ALL SELECT i.indexrelname, 0, 0, 0, i.idx_blks_hit, i.idx_blks_read FROM pg_statio_user_indexes i" || true
}

# pgcounters: PostgreSQL's cumulative WAL (records, full-page images, bytes), buffer writes (by
# backends evicting dirty buffers, by the background writer, at checkpoints), buffer
# allocations and checkpoints (timed, requested), in that order, on one line.
pgcounters() {
	psql_ -d postgres -At -F ' ' -c "SELECT wal_records, wal_fpi, wal_bytes, buffers_backend, buffers_clean, buffers_checkpoint,
		buffers_alloc, checkpoints_timed, checkpoints_req FROM pg_stat_wal, pg_stat_bgwriter"
}
# idxsizes DB: every index of DB's public schema with its size in bytes.
idxsizes() {
	psql_ -d "$1" -At -F ' ' -c "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
		WHERE c.relkind = 'i' AND c.relnamespace = 'public'::regnamespace ORDER BY 2 DESC"
}

# shards DB K: SHARDS registrations over K scopes, 16 in flight per scope (the per-scope upload
# limit), with the origin's CPU (ingestbench) and PostgreSQL's (pg_cpu, perf/pg.sh) per shard.
shards() {
	local db=$1 k=$2 name=shards-$1 W= sk c0 c1
	[ "$k" -gt 1 ] && name=shards-$1-scopes$k
	for sk in $(seq "$k"); do
		W+=${W:+,}$("$B/xet-origin" token --data-dir "$WORK/origin-$db" --ttl 24h --scope "models/bench/shards-$sk" --access write)
	done
	note "$name"
	log "shard registration $db: $SHARDS shards over $k scope(s), $((16 * k)) at a time (16 per scope: the per-scope upload limit)"
	psql_ -d postgres -At -c "SELECT 'background at the start: ' || coalesce(string_agg(backend_type || ' ' || coalesce(query, ''), '; '), 'none')
		FROM pg_stat_activity WHERE backend_type IN ('autovacuum worker', 'autoprewarm worker') OR query LIKE 'autovacuum:%'" >"$OUT/$name.bg.txt"
	tabstats "$db" >"$OUT/$name.tab0"
	c0=$(pg_cpu "$PGPID") w0=($(pgcounters))
	idxsizes "$db" >"$OUT/$name.idx0"
	local spid=
	if [ "$SHARD_WINDOW" -gt 0 ]; then
		windows "$db" "$SHARD_WINDOW" >"$OUT/$name.windows.txt" &
		spid=$!
	fi
	"$B/ingestbench" -url "http://${OURL[$db]}" -write-token "$W" -server-pid "${OPID[$db]}" -mode shards -shape "$SHARD_SHAPE" -db-pid "$PGPID" \
		-n "$SHARDS" -concurrency $((16 * k)) >"$OUT/$name.txt" || die "ingestbench failed"
	if [ -n "$spid" ]; then
		kill "$spid" 2>/dev/null || true
		wait "$spid" 2>/dev/null || true
		cat "$OUT/$name.windows.txt"
	fi
	psql_ -d postgres -At -c "SELECT 'background at the end: ' || coalesce(string_agg(backend_type || ' ' || coalesce(query, ''), '; '), 'none')
		FROM pg_stat_activity WHERE backend_type IN ('autovacuum worker', 'autoprewarm worker') OR query LIKE 'autovacuum:%'" >>"$OUT/$name.bg.txt"
	c1=$(pg_cpu "$PGPID") w1=($(pgcounters))
	awk -v a="$c0" -v b="$c1" -v hz="$(getconf CLK_TCK)" -v n="$SHARDS" \
		'BEGIN { printf "postgres cpu (server, incl. the untimed xorb upload): %.2f s = %.3f ms per shard\n", (b - a) / hz, (b - a) * 1000 / hz / n }' >>"$OUT/$name.txt"
	awk -v n="$SHARDS" -v r="$((w1[0] - w0[0]))" -v f="$((w1[1] - w0[1]))" -v b="$((w1[2] - w0[2]))" \
		'BEGIN { printf "postgres wal per shard: %.1f records, %.2f full-page images, %.0f bytes\n", r / n, f / n, b / n }' >>"$OUT/$name.txt"
	cat "$OUT/$name.bg.txt" >>"$OUT/$name.txt" && rm "$OUT/$name.bg.txt"
	awk -v n="$SHARDS" -v a="${w0[*]}" -v b="${w1[*]}" 'BEGIN { split(a, p, " "); split(b, c, " ")
		printf "postgres buffers per shard: written by backends %.2f, by the background writer %.2f, at checkpoints %.2f, allocated %.2f; checkpoints %d timed, %d requested\n",
			(c[4] - p[4]) / n, (c[5] - p[5]) / n, (c[6] - p[6]) / n, (c[7] - p[7]) / n, c[8] - p[8], c[9] - p[9] }' >>"$OUT/$name.txt"
	idxsizes "$db" >"$OUT/$name.idx1"
	echo "index sizes (MiB) of 1 MiB and more, before -> after:" >>"$OUT/$name.txt"
	awk 'NR == FNR { a[$1] = $2; next } $2 >= 1048576 { printf "  %-26s %8.1f -> %8.1f\n", $1, a[$1] / 1048576, $2 / 1048576 }' \
		"$OUT/$name.idx0" "$OUT/$name.idx1" >>"$OUT/$name.txt"
	rm -f "$OUT/$name.idx0" "$OUT/$name.idx1"
	sleep 1 # the statistics collector's last flush
	tabstats "$db" >"$OUT/$name.tab1"
	echo "per shard, by table and index (rows inserted, updated, heap-only; buffers hit, read):" >>"$OUT/$name.txt"
	awk -v n="$SHARDS" 'NR == FNR { a[$1] = $0; next } ($1 in a) { split(a[$1], p, " ")
		printf "  %-26s ins %6.2f  upd %6.2f  hot %6.2f  hit %7.2f  read %6.2f\n", $1, ($2 - p[2]) / n, ($3 - p[3]) / n,
			($4 - p[4]) / n, ($5 - p[5]) / n, ($6 - p[6]) / n }' "$OUT/$name.tab0" "$OUT/$name.tab1" >>"$OUT/$name.txt"
	rm -f "$OUT/$name.tab0" "$OUT/$name.tab1"
	cat "$OUT/$name.txt"
}
if [ "$SHARDS" -gt 0 ]; then
	for db in $SHARD_DBS; do
		if [ "$SHARD_ONE" = 1 ] || [ "$SHARD_SCOPES" = 1 ]; then shards $db 1; fi
		if [ "$SHARD_SCOPES" -gt 1 ]; then shards $db "$SHARD_SCOPES"; fi
	done
fi

{
	for db in small large; do
		for w in origin edge; do
			if [ $w = origin ]; then pid=${OPID[$db]} adm=${OADM[$db]}; else pid=${EPID[$db]} adm=${EADM[$db]}; fi
			echo "# $w $db: $(grep VmRSS /proc/"$pid"/status)"
			curl -sf --max-time 10 "http://$adm/metrics" | grep -E '^xet_[a-z_]*(cache|layout)[a-z_]*(bytes|entries|used)[a-z_]* ' || true
		done
	done
} | tee "$OUT/caches.txt"
note "done"
log "results in $OUT"
