#!/usr/bin/env bash
# services.sh — the throwaway services the integration tests run against.
#
#   scripts/services.sh start    start (or reuse) everything, write .cache/testenv.sh
#   scripts/services.sh stop     stop PostgreSQL and MinIO and delete their data
#   scripts/services.sh status   say what is running
#   scripts/services.sh env      print the exports (the content of .cache/testenv.sh)
#
# What "start" provides, and the variables it exports (names fixed by internal/testenv):
#   PostgreSQL 15 on 127.0.0.1:55432, superuser role "xet", trust auth on loopback, fsync on
#       XETCDN_TEST_POSTGRES_DSN
#   MinIO (built from source with `go install`, cached in GOPATH/bin) on 127.0.0.1:59000
#       XETCDN_TEST_S3_ENDPOINT, XETCDN_TEST_S3_ACCESS_KEY, XETCDN_TEST_S3_SECRET_KEY
#   hf_xet==1.8.0 and huggingface_hub==2.4.0 (the hf CLI) in the venv .cache/venv, with
#       transformers==5.24.0 (no torch: configs, tokenizers), tokenizers, safetensors and numpy
#       XETCDN_TEST_PYTHON
#   @huggingface/hub 2.17.5 installed from test/clients/package-lock.json
#       XETCDN_TEST_NODE_DIR
#
# "start" is idempotent: a service that already answers is reused, anything missing is installed
# or built once. The ports are fixed, so the servers' state lives in one place per machine
# ($XETCDN_SERVICES_DIR, default /tmp/xetcdn-test-services) whichever checkout started them.
# Every wait is bounded; on a timeout the script prints the service's log tail and fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=$ROOT/.cache
ENVFILE=$CACHE/testenv.sh
RUNDIR=${XETCDN_SERVICES_DIR:-/tmp/xetcdn-test-services}

PG_HOST=127.0.0.1
PG_PORT=55432
PG_ROLE=xet
PG_DSN="postgres://$PG_ROLE@$PG_HOST:$PG_PORT/postgres?sslmode=disable"
PG_WANT_MAJOR=15

MINIO_ADDR=127.0.0.1:59000
MINIO_CONSOLE_ADDR=127.0.0.1:59001
MINIO_ACCESS_KEY=xetcdn-test
MINIO_SECRET_KEY=xetcdn-test-secret-key
MINIO_MODULE=github.com/minio/minio
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

HF_XET_VERSION=1.8.0
HF_HUB_VERSION=2.4.0
# transformers without torch, for TestHubFlows' AutoConfig/AutoTokenizer (docs/hub.md); the
# other three are its dependencies the test uses directly, pinned to what it resolved to.
PY_EXTRA=(transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 numpy==2.4.6)
VENV=$CACHE/venv
NODE_DIR=$ROOT/test/clients
HFJS_VERSION=2.17.5

WAIT_SECONDS=${XETCDN_SERVICES_WAIT:-90}

log() { printf 'services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

apt_updated=
apt_install() {
	is_root && command -v apt-get >/dev/null || die "missing $*; install it (Debian: apt-get install $*)"
	if [ -z "$apt_updated" ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		apt_updated=1
	fi
	log "apt-get install $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

go_cmd() {
	if command -v go >/dev/null; then echo go
	elif [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go
	else die "go not found"
	fi
}

# wait_for SECONDS DESCRIPTION COMMAND... polls COMMAND until it succeeds or SECONDS pass.
wait_for() {
	local secs=$1 what=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "$what not ready after ${secs}s"
			return 1
		fi
		sleep 0.25
	done
}

http_ok() { # http_ok URL: true when URL answers 2xx
	if command -v curl >/dev/null; then
		curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null
	else
		python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1"
	fi
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL

pg_bindir() {
	local d
	for d in /usr/lib/postgresql/$PG_WANT_MAJOR/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# pg_user prints the system user the cluster runs as: PostgreSQL refuses to run as root.
pg_user() {
	if ! is_root; then id -un; return; fi
	if id postgres >/dev/null 2>&1; then echo postgres; return; fi
	if ! id xetcdn-pg >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /usr/sbin/nologin xetcdn-pg
	fi
	echo xetcdn-pg
}

as_pg() { # run a command as the cluster's user
	local u
	u=$(pg_user)
	if [ "$u" = "$(id -un)" ]; then "$@"; else runuser -u "$u" -- "$@"; fi
}

pg_ready() {
	local bin
	bin=$(pg_bindir) || return 1
	"$bin/pg_isready" -q -h "$PG_HOST" -p "$PG_PORT" -U "$PG_ROLE" -d postgres
}

pg_start() {
	local bin dir=$RUNDIR/pg
	if ! bin=$(pg_bindir); then
		# Keep the package's own cluster from starting: we only want the binaries.
		if is_root && [ ! -e /usr/sbin/policy-rc.d ]; then
			printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
			chmod +x /usr/sbin/policy-rc.d
			apt_install postgresql || { rm -f /usr/sbin/policy-rc.d; exit 1; }
			rm -f /usr/sbin/policy-rc.d
		else
			apt_install postgresql
		fi
		bin=$(pg_bindir) || die "PostgreSQL binaries still missing after install"
	fi
	if pg_ready; then
		log "postgres: already running on $PG_HOST:$PG_PORT"
		return 0
	fi
	if [ -f "$dir/data/postmaster.pid" ]; then # stale cluster from an earlier run: stop it
		as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
	fi
	rm -rf "$dir"
	mkdir -p "$dir/data" "$dir/sock"
	chmod 700 "$dir/data"
	if is_root; then chown -R "$(pg_user)" "$dir"; fi

	log "postgres: initdb ($("$bin/postgres" --version))"
	as_pg "$bin/initdb" -D "$dir/data" -U "$PG_ROLE" --auth=trust --encoding=UTF8 --no-locale \
		>"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
	# Tuned for tests, but durable: fsync, synchronous_commit and full_page_writes stay on,
	# because the tests check that acknowledged writes survive a crash.
	cat >>"$dir/data/postgresql.conf" <<-EOF

		# xetcdn test cluster (scripts/services.sh)
		listen_addresses = '$PG_HOST'
		port = $PG_PORT
		unix_socket_directories = '$dir/sock'
		max_connections = 400
		shared_buffers = 256MB
		fsync = on
		synchronous_commit = on
		full_page_writes = on
		wal_level = minimal
		max_wal_senders = 0
		max_wal_size = 2GB
		checkpoint_timeout = 30min
		log_min_messages = warning
		log_min_error_statement = panic
	EOF
	log "postgres: starting on $PG_HOST:$PG_PORT"
	as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t "$WAIT_SECONDS" start >/dev/null ||
		{ tail -n 30 "$dir/server.log" >&2; die "postgres did not start"; }
	wait_for "$WAIT_SECONDS" postgres pg_ready || { tail -n 30 "$dir/server.log" >&2; die "postgres not ready"; }
}

pg_stop() {
	local bin dir=$RUNDIR/pg
	bin=$(pg_bindir) || return 0
	if [ -f "$dir/data/postmaster.pid" ]; then
		log "postgres: stopping"
		as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null ||
			as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null || true
	fi
	rm -rf "$dir"
}

# ---------------------------------------------------------------------------------------------
# MinIO

minio_bin() { echo "$("$(go_cmd)" env GOPATH | cut -d: -f1)/bin/minio"; }

minio_build() {
	local bin go
	bin=$(minio_bin)
	go=$(go_cmd)
	if [ -x "$bin" ] && "$go" version -m "$bin" 2>/dev/null | grep -q "$MINIO_VERSION"; then
		return 0
	fi
	mkdir -p "$CACHE"
	log "minio: building $MINIO_MODULE@$MINIO_VERSION (takes minutes; log in $CACHE/minio-build.log)"
	# Build outside the module so its go.mod is neither read nor touched.
	(cd / && GOFLAGS=-buildvcs=false "$go" install "$MINIO_MODULE@$MINIO_VERSION") \
		>"$CACHE/minio-build.log" 2>&1 || { tail -n 30 "$CACHE/minio-build.log" >&2; die "minio build failed"; }
}

minio_live() { http_ok "http://$MINIO_ADDR/minio/health/live"; }
minio_ready() { http_ok "http://$MINIO_ADDR/minio/health/cluster"; }

minio_start() {
	local dir=$RUNDIR/minio
	minio_build
	if minio_live; then
		log "minio: already running on $MINIO_ADDR"
		wait_for "$WAIT_SECONDS" minio minio_ready || die "minio on $MINIO_ADDR is not ready"
		return 0
	fi
	minio_kill
	rm -rf "$dir"
	mkdir -p "$dir/data"
	log "minio: starting on $MINIO_ADDR"
	# setsid: the server outlives this script and is not hit by the terminal's Ctrl-C.
	MINIO_ROOT_USER=$MINIO_ACCESS_KEY MINIO_ROOT_PASSWORD=$MINIO_SECRET_KEY \
		MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CI_CD=1 \
		setsid "$(minio_bin)" server --quiet --address "$MINIO_ADDR" --console-address "$MINIO_CONSOLE_ADDR" \
		"$dir/data" </dev/null >"$dir/server.log" 2>&1 &
	echo $! >"$dir/pid"
	wait_for "$WAIT_SECONDS" minio minio_ready || { tail -n 30 "$dir/server.log" >&2; die "minio not ready"; }
}

minio_kill() { # stop the MinIO this script started, by its recorded pid
	local pidfile=$RUNDIR/minio/pid pid
	[ -f "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = minio ]; then
		kill "$pid" 2>/dev/null || true
		wait_for 30 "minio exit" sh -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
}

minio_stop() {
	if [ -d "$RUNDIR/minio" ]; then log "minio: stopping"; fi
	minio_kill
	rm -rf "$RUNDIR/minio"
}

# ---------------------------------------------------------------------------------------------
# Stock clients

hfxet_ok() {
	"$VENV/bin/python" -c 'import importlib.metadata as m, sys, hf_xet, huggingface_hub
sys.exit(m.version("hf_xet") != sys.argv[1] or m.version("huggingface_hub") != sys.argv[2] or
         any(m.version(n) != v for n, v in (a.split("==") for a in sys.argv[3:])))' \
		"$HF_XET_VERSION" "$HF_HUB_VERSION" "${PY_EXTRA[@]}" && [ -x "$VENV/bin/hf" ]
}

hfxet_install() {
	if [ -x "$VENV/bin/python" ] && hfxet_ok 2>/dev/null; then return 0; fi
	log "python: installing hf_xet==$HF_XET_VERSION huggingface_hub==$HF_HUB_VERSION into $VENV"
	if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
		apt_install python3-venv
	fi
	if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
	"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
		"hf_xet==$HF_XET_VERSION" "huggingface_hub==$HF_HUB_VERSION" "${PY_EXTRA[@]}" >&2
	hfxet_ok || die "hf_xet $HF_XET_VERSION / huggingface_hub $HF_HUB_VERSION not importable from $VENV"
}

hfjs_ok() {
	node -e 'const p=require(process.argv[1]); process.exit(p.version===process.argv[2]?0:1)' \
		"$NODE_DIR/node_modules/@huggingface/hub/package.json" "$HFJS_VERSION"
}

hfjs_install() {
	command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed"
	if hfjs_ok 2>/dev/null; then return 0; fi
	log "node: npm ci in $NODE_DIR (@huggingface/hub $HFJS_VERSION)"
	(cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error) >&2
	hfjs_ok || die "@huggingface/hub $HFJS_VERSION not installed in $NODE_DIR"
}

# ---------------------------------------------------------------------------------------------

print_env() {
	cat <<-EOF
		# written by scripts/services.sh; source it to run integration tests by hand
		export XETCDN_TEST_POSTGRES_DSN='$PG_DSN'
		export XETCDN_TEST_S3_ENDPOINT='$MINIO_ADDR'
		export XETCDN_TEST_S3_ACCESS_KEY='$MINIO_ACCESS_KEY'
		export XETCDN_TEST_S3_SECRET_KEY='$MINIO_SECRET_KEY'
		export XETCDN_TEST_PYTHON='$VENV/bin/python'
		export XETCDN_TEST_NODE_DIR='$NODE_DIR'
	EOF
}

status() {
	local rc=0
	if pg_ready 2>/dev/null; then echo "postgres: up ($PG_DSN)"; else echo "postgres: down"; rc=1; fi
	if minio_live 2>/dev/null; then echo "minio:    up (http://$MINIO_ADDR)"; else echo "minio:    down"; rc=1; fi
	if [ -x "$VENV/bin/python" ] && hfxet_ok 2>/dev/null; then echo "hf_xet:   $HF_XET_VERSION, huggingface_hub $HF_HUB_VERSION ($VENV)"; else echo "hf_xet:   missing"; rc=1; fi
	if hfjs_ok 2>/dev/null; then echo "hub.js:   $HFJS_VERSION ($NODE_DIR)"; else echo "hub.js:   missing"; rc=1; fi
	return $rc
}

main() {
	case "${1:-}" in
	start)
		mkdir -p "$CACHE" "$RUNDIR"
		# The MinIO build (minutes, CPU) overlaps the downloads and PostgreSQL's start.
		minio_build &
		build=$!
		pg_start
		hfxet_install
		hfjs_install
		wait "$build" || die "minio build failed"
		minio_start
		print_env >"$ENVFILE.tmp"
		mv "$ENVFILE.tmp" "$ENVFILE"
		log "ready; exports in ${ENVFILE#"$ROOT"/}"
		;;
	stop)
		minio_stop
		pg_stop
		rm -f "$ENVFILE"
		;;
	status) status ;;
	env) print_env ;;
	*)
		echo "usage: $0 start|stop|status|env" >&2
		exit 2
		;;
	esac
}

# Sourcing the script (to call one function by hand) does not run main.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
