#!/usr/bin/env bash
# compare.sh — xorb byte throughput of a warm edge next to nginx serving the same bytes.
#
#   perf/nginx/compare.sh EDGE_TLS_URL EDGE_HTTP_URL READ_TOKEN FILE_HASH ORIGIN_XORB_DIR EDGE_DATA_DIR
#
# e.g. compare.sh https://127.0.0.1:28443 http://127.0.0.1:28081 "$R" "$H" /d/origin/objects/xorbs /d/edge
#
# Copies the xorb objects of FILE_HASH's reconstruction out of the origin's local object
# store into a web root (one file per xorb, named by its hash), starts nginx (perf/nginx/
# nginx.conf.in; the edge's own certificate from EDGE_DATA_DIR/tls) on loopback, and runs
# edgebench's transfer mode with -static against both: every range is compared byte for byte
# first, then ROUNDS alternating rounds per protocol (HTTP/1.1+TLS, HTTP/2, plain HTTP) with
# CONNS connections for FOR each. HTTP/3 is measured on the edge alone (Debian's nginx 1.22 has
# no HTTP/3). nginx is stopped on exit. With EDGE_PID (the edge's process ID), every
# measurement also prints the CPU seconds per GB served by the edge and by nginx's workers.
#
# Environment: EDGEBENCH (default: go run ./perf/cmd/edgebench), NGINX_TLS_PORT (28444),
# NGINX_HTTP_PORT (28082), CONNS (64), H3_CONNS (16), FOR (10s), ROUNDS (3), WORK (a temp dir),
# EDGE_PID (none).
set -euo pipefail
[ $# -eq 6 ] || { sed -n 2,20p "$0"; exit 2; }
EDGE_TLS=$1 EDGE_HTTP=$2 TOKEN=$3 FILE=$4 XORBS=$5 EDGE_DIR=$6
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NGINX_TLS_PORT=${NGINX_TLS_PORT:-28444}
NGINX_HTTP_PORT=${NGINX_HTTP_PORT:-28082}
CONNS=${CONNS:-64} H3_CONNS=${H3_CONNS:-16} FOR=${FOR:-10s} ROUNDS=${ROUNDS:-3}
WORK=${WORK:-$(mktemp -d /tmp/edge-nginx.XXXXXX)}
if [ -z "${EDGEBENCH:-}" ]; then
	go build -o "$WORK/edgebench" "$ROOT/perf/cmd/edgebench"
	EDGEBENCH=$WORK/edgebench
fi
log() { printf 'compare: %s\n' "$*" >&2; }

mkdir -p "$WORK/www" "$WORK/tmp"
answer=$(curl -fsSk -H "Authorization: Bearer $TOKEN" "$EDGE_TLS/v2/reconstructions/$FILE")
for h in $(jq -r '.xorbs | keys[]' <<<"$answer"); do
	src=$(find "$XORBS" -type f -name "$h" -print -quit)
	[ -n "$src" ] || { log "xorb $h not found under $XORBS"; exit 1; }
	cp "$src" "$WORK/www/$h"
done
chmod 755 "$WORK" "$WORK/www" && chmod 644 "$WORK"/www/* # nginx workers run as nobody
log "web root: $(ls "$WORK/www" | wc -l) xorb objects, $(du -sh "$WORK/www" | cut -f1)"
cat "$WORK"/www/* >/dev/null # page cache, as the edge's warm data cache is

sed -e "s|@WORK@|$WORK|g" -e "s|@WWW@|$WORK/www|g" -e "s|@CERT@|$EDGE_DIR/tls/cert.pem|g" \
	-e "s|@KEY@|$EDGE_DIR/tls/key.pem|g" -e "s|@TLS_PORT@|$NGINX_TLS_PORT|g" \
	-e "s|@HTTP_PORT@|$NGINX_HTTP_PORT|g" "$ROOT/perf/nginx/nginx.conf.in" >"$WORK/nginx.conf"
nginx -t -q -c "$WORK/nginx.conf"
nginx -c "$WORK/nginx.conf" &
nginx_pid=$!
trap 'kill -QUIT $nginx_pid 2>/dev/null || true; wait $nginx_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do # any HTTP answer (the root is a 404) means nginx is up
	curl -s -o /dev/null "http://127.0.0.1:$NGINX_HTTP_PORT/" && break
	sleep 0.1
done

workers=$(pgrep -d, -P "$nginx_pid" || true) # nginx's worker processes (they serve)
bench() { "$EDGEBENCH" -url "$EDGE_TLS" -token "$TOKEN" -file "$FILE" -server-pid "${EDGE_PID:-0}" -static-pids "$workers" "$@"; }
log "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
log "HTTP/1.1 + TLS, $CONNS connections"
bench -proto h1 -conns "$CONNS" -for "$FOR" -static "https://127.0.0.1:$NGINX_TLS_PORT" -rounds "$ROUNDS" transfer
log "HTTP/2, $CONNS streams (one connection)"
bench -proto h2 -conns "$CONNS" -for "$FOR" -static "https://127.0.0.1:$NGINX_TLS_PORT" -rounds "$ROUNDS" transfer
log "plain HTTP/1.1 (sendfile on both), $CONNS connections"
bench -proto h1 -conns "$CONNS" -for "$FOR" -edge-base "$EDGE_HTTP" -static "http://127.0.0.1:$NGINX_HTTP_PORT" -rounds "$ROUNDS" transfer
log "HTTP/3 (edge only), $H3_CONNS streams"
for r in $(seq "$ROUNDS"); do bench -proto h3 -conns "$H3_CONNS" -for "$FOR" transfer | tail -1; done
log "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
