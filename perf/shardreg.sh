#!/usr/bin/env bash
# Shard registration on a private, durable PostgreSQL, revisions side by side (issue 13).
#
#   perf/shardreg.sh NAME=SRCDIR [NAME=SRCDIR ...]
#   ROUNDS=3 N=3000 CONCURRENCY=64 PORT_BASE=31950 perf/shardreg.sh base=/tmp/base branch=.
#
# Builds xet-origin from each source tree (and ingestbench from this one), starts its own
# PostgreSQL (initdb in a temporary directory; fsync=on, synchronous_commit=on, the durable
# settings of perf/scale.sh), and per round, for each revision in an order that rotates: a fresh
# database, an origin on it (objects on local disk, limits.uploads_per_scope 256 so that
# CONCURRENCY is not capped at 16), `ingestbench -mode shards -n N -concurrency CONCURRENCY`,
# the origin stopped. PostgreSQL's CPU per shard is its postmaster's utime+stime+cutime+cstime
# plus its live children's utime+stime over ingestbench's timed part (-db-pid: without the
# untimed upload of the xorbs the shards reference): the server's whole cost, background
# writers and autovacuum included, and no other PostgreSQL on the machine. Prints one line per
# run and the medians per revision. Removes everything on exit.
#
# SHAPE picks ingestbench's shard shape (-shape): pool (default; every shard's files draw from
# 16 shared xorbs, so concurrent registrations take over the same dedup rows: the worst case
# for batches in flight at once) or own (each shard references a xorb of its own, uploaded
# before the run in its scope and described in its xorb section, as hf_xet uploads look).
#
# PG_OPTS adds server settings ("-c name=value ..."); STATS=1 loads pg_stat_statements
# (track_planning on) and prints, after each run, the statements that took most of the
# server's time (planning + execution) per shard, and the WAL written during each run by record
# type per shard (pg_waldump --stats=record). SCOPES=K spreads the shards over K scopes
# (ingestbench with K write tokens). PROFILE=DIR saves a CPU profile of each run's origin as
# DIR/NAME-ROUND.pprof.* (merge with go tool pprof).
set -euo pipefail

ROUNDS=${ROUNDS:-3} N=${N:-3000} CONCURRENCY=${CONCURRENCY:-64} P=${PORT_BASE:-31950} SCOPES=${SCOPES:-1} SHAPE=${SHAPE:-pool} STATS=${STATS:-0} PG_OPTS=${PG_OPTS:-} PROFILE=${PROFILE:-}
die() { echo "shardreg.sh: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: $0 NAME=SRCDIR [NAME=SRCDIR ...]"
[[ $STATS == 0 || $STATS == 1 ]] || die "STATS=$STATS: want 0 or 1"
[[ $SHAPE == pool || $SHAPE == own ]] || die "SHAPE=$SHAPE: want pool or own"
[[ $PG_OPTS =~ ^(\ *-c\ [a-z_.]+=[A-Za-z0-9_.]+)*\ *$ ]] || die "PG_OPTS=$PG_OPTS: want -c name=value ..."
for v in ROUNDS N CONCURRENCY P SCOPES; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: want a positive integer"; done
ROOT=$(cd "$(dirname "$0")/.." && pwd)

. "$ROOT/perf/pg.sh"
for port in $P $((P + 1)) $((P + 2)); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is in use: set PORT_BASE to three free ports"; fi
done

WORK=$(mktemp -d /tmp/shardreg.XXXXXX)
chmod 755 "$WORK"
PGD=$WORK/pg OPID= pg_up=
cleanup() {
	[ -n "$OPID" ] && { kill "$OPID" 2>/dev/null; wait "$OPID" 2>/dev/null || true; }
	[ -n "$pg_up" ] && as_pg "$PGBIN/pg_ctl" -D "$PGD" -m immediate -w stop >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

names=() dirs=()
for a in "$@"; do
	[[ $a == *=* ]] || die "$a: want NAME=SRCDIR"
	names+=("${a%%=*}") dirs+=("$(cd "${a#*=}" && pwd)")
done
for i in "${!names[@]}"; do
	(cd "${dirs[$i]}" && go build -o "$WORK/bin-${names[$i]}/" ./cmd/xet-origin) || die "build of ${names[$i]} failed"
	echo "# ${names[$i]}: $(git -C "${dirs[$i]}" rev-parse --short=12 HEAD 2>/dev/null || echo "${dirs[$i]}")"
done
(cd "$ROOT" && go build -o "$WORK/bin/" ./perf/cmd/ingestbench)

stats_opts=
[ "$STATS" = 1 ] && stats_opts=" -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
mkdir -m 700 "$PGD" && chown "$PGUSER_SYS" "$PGD"
as_pg "$PGBIN/initdb" -D "$PGD" -U xet --auth=trust --encoding=UTF8 --no-locale >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
touch "$WORK/pg.log" && chown "$PGUSER_SYS" "$WORK/pg.log"
as_pg "$PGBIN/pg_ctl" -D "$PGD" -l "$WORK/pg.log" -w -t 120 start -o "-c port=$P -c listen_addresses=127.0.0.1 -c unix_socket_directories=$PGD -c max_connections=200 -c shared_buffers=512MB -c max_wal_size=2GB -c checkpoint_timeout=30min$stats_opts $PG_OPTS" >/dev/null ||
	{ tail -n 20 "$WORK/pg.log" >&2; die "PostgreSQL did not start"; }
pg_up=1
PGPID=$(head -1 "$PGD/postmaster.pid")
echo "# $(date -u +%FT%TZ), $(nproc) cores, $("$PGBIN/postgres" --version), N=$N CONCURRENCY=$CONCURRENCY SCOPES=$SCOPES ROUNDS=$ROUNDS${PG_OPTS:+ PG_OPTS=$PG_OPTS}"

psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$P" -U xet "$@"; }

declare -A rate ocpu pcpu
printf '%-8s %5s %9s %9s %9s %12s %12s  %s\n' build round shards/s p50 p99 origin_ms pg_ms "load (1/5/15 min)"
for r in $(seq "$ROUNDS"); do
	k=${#names[@]}
	for j in $(seq 0 $((k - 1))); do
		i=$(((j + r - 1) % k))
		name=${names[$i]}
		db=sr_${name//[^a-z0-9]/_}_$r
		psql_ -d postgres -c "CREATE DATABASE $db"
		mkdir -p "$WORK/o-$db"
		# Revisions from before the per-scope upload limit (2026-11-30) know no limits.uploads_per_scope.
		if grep -q uploads_per_scope "${dirs[$i]}/origin/internal/config/config.go"; then
			printf '{"index":{"driver":"postgres"},"limits":{"uploads_per_scope":256}}\n' >"$WORK/o-$db.json"
		else
			printf '{"index":{"driver":"postgres"}}\n' >"$WORK/o-$db.json"
		fi
		XETCDN_POSTGRES_DSN="postgres://xet@127.0.0.1:$P/$db?sslmode=disable" "$WORK/bin-$name/xet-origin" --data-dir "$WORK/o-$db" \
			--listen "127.0.0.1:$((P + 1))" --admin-listen "127.0.0.1:$((P + 2))" --config "$WORK/o-$db.json" >"$WORK/o-$db.log" 2>&1 &
		OPID=$!
		for _ in $(seq 600); do curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$((P + 1))/healthz" && break; sleep 0.1; done
		W=
		for sk in $(seq "$SCOPES"); do
			W+=${W:+,}$("$WORK/bin-$name/xet-origin" token --data-dir "$WORK/o-$db" --ttl 2h --scope "models/bench/shards-$sk" --access write)
		done
		[ "$STATS" = 1 ] && psql_ -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null
		prof=()
		if [ -n "$PROFILE" ]; then
			mkdir -p "$PROFILE"
			prof=(-metrics "http://127.0.0.1:$((P + 2))/metrics" -profile "$PROFILE/$name-$r.pprof"
				-admin-token "$("$WORK/bin-$name/xet-origin" token --data-dir "$WORK/o-$db" --ttl 2h --scope models/bench/shards-1 --access admin)")
		fi
		load=$(cut -d' ' -f1-3 /proc/loadavg)
		[ "$STATS" = 1 ] && w0=$(psql_ -d "$db" -At -c "SELECT pg_current_wal_lsn()")
		"$WORK/bin/ingestbench" -url "http://127.0.0.1:$((P + 1))" -write-token "$W" -server-pid "$OPID" -mode shards -shape "$SHAPE" -db-pid "$PGPID" \
			-n "$N" -concurrency "$CONCURRENCY" "${prof[@]}" >"$WORK/ib.txt" || { cat "$WORK/ib.txt" "$WORK/o-$db.log" >&2; die "ingestbench failed"; }
		kill "$OPID"; wait "$OPID" 2>/dev/null || true; OPID=
		sleep 1
		s=$(sed -n 's/.* \([0-9.]*\) shards\/s .*/\1/p' "$WORK/ib.txt")
		lat=($(sed -n 's/.*p50=\([^ ]*\) p99=\([^ ]*\) .*/\1 \2/p' "$WORK/ib.txt"))
		o=$(sed -n 's/^origin cpu: .* = \([0-9.]*\) ms per shard.*/\1/p' "$WORK/ib.txt")
		# PostgreSQL's CPU of the timed part (ingestbench -db-pid), without the untimed upload of
		# the xorbs the shards reference (SHAPE=own uploads one per shard).
		pg=$(sed -n 's/^db-pid cpu: .* = \([0-9.]*\) ms per shard.*/\1/p' "$WORK/ib.txt")
		printf '%-8s %5s %9s %9s %9s %12s %12s  %s\n' "$name" "$r" "$s" "${lat[0]}" "${lat[1]}" "$o" "$pg" "$load"
		[ "$STATS" = 1 ] && psql_ -d "$db" -P pager=off -c "SELECT round((total_plan_time + total_exec_time)::numeric / $N, 4) AS ms_per_shard,
			round(calls::numeric / $N, 2) AS calls_per_shard, round(total_plan_time::numeric / greatest(plans, 1), 3) AS plan_ms,
			round(total_exec_time::numeric / greatest(calls, 1), 3) AS exec_ms, round(rows::numeric / greatest(calls, 1), 1) AS rows,
			round(wal_bytes::numeric / $N) AS wal_b_per_shard, left(regexp_replace(query, '\s+', ' ', 'g'), 70) AS query
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db')
			ORDER BY total_plan_time + total_exec_time DESC LIMIT 10" \
			-c "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd > 0 ORDER BY relname"
		if [ "$STATS" = 1 ]; then
			# The WAL the run wrote (registrations, the server's background work, other databases'
			# nothing: the server is private), by record type, per shard.
			w1=$(psql_ -d "$db" -At -c "SELECT pg_current_wal_lsn()")
			as_pg "$PGBIN/pg_waldump" --stats=record -p "$PGD/pg_wal" -s "$w0" -e "$w1" 2>/dev/null |
				awk -v n="$N" '/^----/ { on = 1; next } on && NF { l = $0; gsub(/\([^)]*\)|\[[^]]*\]/, "", l); split(l, f, " ")
					if (f[2] > 0) printf "  wal %-28s %8.2f records/shard %8.0f B/shard (full-page images %6.0f B)\n", f[1], f[2] / n, f[5] / n, f[4] / n }' ||
				echo "  (pg_waldump failed)"
		fi
		rate[$name]+="$s " ocpu[$name]+="$o " pcpu[$name]+="$pg "
		psql_ -d postgres -c "DROP DATABASE $db"
		rm -rf "$WORK/o-$db"
	done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "# medians"
for name in "${names[@]}"; do
	printf '%-8s shards/s %s  origin %s ms/shard  postgres %s ms/shard\n' "$name" \
		"$(echo "${rate[$name]}" | med)" "$(echo "${ocpu[$name]}" | med)" "$(echo "${pcpu[$name]}" | med)"
done
