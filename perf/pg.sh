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
