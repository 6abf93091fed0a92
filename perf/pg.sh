# pg.sh — sourced by the perf scripts that run their own PostgreSQL (scale.sh, shardreg.sh):
# PGBIN, the newest server binaries installed (initdb, pg_ctl), and as_pg, which runs a command
# as the system user the server runs as (PostgreSQL refuses root; as scripts/services.sh does, a
# system user xetcdn-pg is made when there is no postgres user). The caller defines die.
PGBIN=
for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV) "$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/x)")"; do
	if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then PGBIN=$d; break; fi
done
[ -n "$PGBIN" ] || die "no PostgreSQL server binaries (initdb, pg_ctl) found"
PGUSER_SYS=$(id -un)
if [ "$(id -u)" = 0 ]; then
	if id postgres >/dev/null 2>&1; then PGUSER_SYS=postgres; elif id xetcdn-pg >/dev/null 2>&1; then PGUSER_SYS=xetcdn-pg; else
		useradd --system --no-create-home --shell /usr/sbin/nologin xetcdn-pg
		PGUSER_SYS=xetcdn-pg
	fi
fi
as_pg() { if [ "$PGUSER_SYS" = "$(id -un)" ]; then "$@"; else runuser -u "$PGUSER_SYS" -- "$@"; fi; }
# pg_cpu PID: the CPU ticks (USER_HZ) a PostgreSQL server has used, from its postmaster PID:
# the postmaster's utime+stime, its reaped children's cutime+cstime and its live children's
# utime+stime. A difference of two readings is the server's whole cost in between (backends,
# WAL writer, checkpointer, autovacuum), and no other PostgreSQL's on the machine.
pg_cpu() {
	local t c f
	f=($(sed 's/^.*) //' "/proc/$1/stat"))
	t=$((f[11] + f[12] + f[13] + f[14]))
	for c in $(cat /proc/"$1"/task/*/children); do
		f=($(sed 's/^.*) //' "/proc/$c/stat" 2>/dev/null || echo))
		[ ${#f[@]} -gt 13 ] && t=$((t + f[11] + f[12]))
	done
	echo $t
}

# PG_RECOMMENDED: the server settings docs/origin.md ("PostgreSQL settings") recommends for a
# production index, after shared_buffers (sized by the caller): durable (fsync, synchronous
# commit and full-page writes stay on) and checkpoints far apart, from the timeout rather than
# from WAL volume, so that fewer pages are written whole into the WAL. No WAL compression: the
# full-page images of this index are pages of random hashes, which lz4 shrank by ~8 % for ~9 %
# of the server's CPU (perf/BENCHMARKS.md, 2026-12-02).
PG_RECOMMENDED=" -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c checkpoint_timeout=30min -c max_wal_size=8GB -c min_wal_size=1GB -c checkpoint_completion_target=0.9"
