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
# plus its live children's utime+stime, read before the run (origin up) and after the origin
# stopped (its backends have then exited into the postmaster's cutime): the server's whole cost,
# background writers and autovacuum included, and no other PostgreSQL on the machine. Prints
# one line per run and the medians per revision. Removes everything on exit.
set -euo pipefail

ROUNDS=${ROUNDS:-3} N=${N:-3000} CONCURRENCY=${CONCURRENCY:-64} P=${PORT_BASE:-31950}
die() { echo "shardreg.sh: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: $0 NAME=SRCDIR [NAME=SRCDIR ...]"
for v in ROUNDS N CONCURRENCY P; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: want a positive integer"; done
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

mkdir -m 700 "$PGD" && chown "$PGUSER_SYS" "$PGD"
as_pg "$PGBIN/initdb" -D "$PGD" -U xet --auth=trust --encoding=UTF8 --no-locale >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
touch "$WORK/pg.log" && chown "$PGUSER_SYS" "$WORK/pg.log"
as_pg "$PGBIN/pg_ctl" -D "$PGD" -l "$WORK/pg.log" -w -t 120 start -o "-c port=$P -c listen_addresses=127.0.0.1 -c unix_socket_directories=$PGD -c max_connections=200 -c shared_buffers=512MB -c max_wal_size=2GB -c checkpoint_timeout=30min" >/dev/null ||
	{ tail -n 20 "$WORK/pg.log" >&2; die "PostgreSQL did not start"; }
pg_up=1
PGPID=$(head -1 "$PGD/postmaster.pid")
echo "# $(date -u +%FT%TZ), $(nproc) cores, $("$PGBIN/postgres" --version), N=$N CONCURRENCY=$CONCURRENCY ROUNDS=$ROUNDS"

pgcpu() { # ticks of the postmaster (itself and reaped children) and of its live children
	local t=0 c f
	f=($(sed 's/^.*) //' "/proc/$PGPID/stat"))
	t=$((f[11] + f[12] + f[13] + f[14]))
	for c in $(cat /proc/"$PGPID"/task/*/children); do
		f=($(sed 's/^.*) //' "/proc/$c/stat" 2>/dev/null || echo))
		[ ${#f[@]} -gt 13 ] && t=$((t + f[11] + f[12]))
	done
	echo $t
}
HZ=$(getconf CLK_TCK)
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
		printf '{"index":{"driver":"postgres"},"limits":{"uploads_per_scope":256}}\n' >"$WORK/o-$db.json"
		XETCDN_POSTGRES_DSN="postgres://xet@127.0.0.1:$P/$db?sslmode=disable" "$WORK/bin-$name/xet-origin" --data-dir "$WORK/o-$db" \
			--listen "127.0.0.1:$((P + 1))" --admin-listen "127.0.0.1:$((P + 2))" --config "$WORK/o-$db.json" >"$WORK/o-$db.log" 2>&1 &
		OPID=$!
		for _ in $(seq 600); do curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$((P + 1))/healthz" && break; sleep 0.1; done
		W=$("$WORK/bin-$name/xet-origin" token --data-dir "$WORK/o-$db" --ttl 2h --scope models/bench/shards --access write)
		load=$(cut -d' ' -f1-3 /proc/loadavg)
		c0=$(pgcpu)
		"$WORK/bin/ingestbench" -url "http://127.0.0.1:$((P + 1))" -write-token "$W" -server-pid "$OPID" -mode shards \
			-n "$N" -concurrency "$CONCURRENCY" >"$WORK/ib.txt" || { cat "$WORK/ib.txt" "$WORK/o-$db.log" >&2; die "ingestbench failed"; }
		kill "$OPID"; wait "$OPID" 2>/dev/null || true; OPID=
		sleep 1
		c1=$(pgcpu)
		s=$(sed -n 's/.* \([0-9.]*\) shards\/s .*/\1/p' "$WORK/ib.txt")
		lat=($(sed -n 's/.*p50=\([^ ]*\) p99=\([^ ]*\) .*/\1 \2/p' "$WORK/ib.txt"))
		o=$(sed -n 's/^origin cpu: .* = \([0-9.]*\) ms per shard.*/\1/p' "$WORK/ib.txt")
		pg=$(awk -v a="$c0" -v b="$c1" -v hz="$HZ" -v n="$N" 'BEGIN { printf "%.3f", (b - a) * 1000 / hz / n }')
		printf '%-8s %5s %9s %9s %9s %12s %12s  %s\n' "$name" "$r" "$s" "${lat[0]}" "${lat[1]}" "$o" "$pg" "$load"
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
