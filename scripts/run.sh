#!/usr/bin/env bash
# run.sh — run xetcdn on its embedded defaults (what `make run` does after `make build`):
# the origin (SQLite index + local-disk objects under .cache/run/origin) and, once the
# cmd/xet-edge binary exists, an edge in front of it. Ctrl-C stops both.
#
# Once both answer it prints, on stdout, the exports a client shell needs (README.md, "Use it
# with the stock clients"); its own messages go to stderr.
#
# Overrides (environment): XETCDN_BIN (where the binaries are, default bin/), XETCDN_RUN_DIR,
# ORIGIN_LISTEN, ORIGIN_ADMIN_LISTEN, EDGE_LISTEN, EDGE_HTTP_LISTEN, EDGE_TOKEN_TTL, DEMO_REPO.
# Everything listens on loopback unless you say otherwise.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${XETCDN_BIN:-$ROOT/bin}
DATA=${XETCDN_RUN_DIR:-$ROOT/.cache/run}
ORIGIN_LISTEN=${ORIGIN_LISTEN:-127.0.0.1:8080}
ORIGIN_ADMIN_LISTEN=${ORIGIN_ADMIN_LISTEN:-127.0.0.1:9080}
EDGE_LISTEN=${EDGE_LISTEN:-127.0.0.1:8443}
EDGE_HTTP_LISTEN=${EDGE_HTTP_LISTEN:-127.0.0.1:8081}
EDGE_TOKEN_TTL=${EDGE_TOKEN_TTL:-720h}
DEMO_REPO=${DEMO_REPO:-models/acme/demo}
WAIT_SECONDS=60

log() { printf 'run: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ -x "$BIN/xet-origin" ] || die "bin/xet-origin is missing: run \`make build\` (does cmd/xet-origin have a main yet?)"

pids=()
stop() {
	trap - EXIT INT TERM
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait
}
trap stop EXIT
trap 'exit 130' INT TERM

healthy() { curl -fsS -o /dev/null --max-time 2 "$1"; }

# wait_healthy URL PID: poll URL until it answers 2xx; fail if PID exits or the wait runs out.
wait_healthy() {
	local deadline=$((SECONDS + WAIT_SECONDS))
	until healthy "$1" 2>/dev/null; do
		kill -0 "$2" 2>/dev/null || die "process $2 exited before $1 answered"
		[ "$SECONDS" -lt "$deadline" ] || die "$1 did not answer within ${WAIT_SECONDS}s"
		sleep 0.25
	done
}

# Read tokens send clients to the edge's plain-HTTP listener once there is an edge: a local
# client then needs no trust in the edge's self-signed certificate.
edge_args=()
if [ -x "$BIN/xet-edge" ]; then edge_args=(--edge-url "http://$EDGE_HTTP_LISTEN"); fi

mkdir -p "$DATA/origin"
DATA=$(cd "$DATA" && pwd) BIN=$(cd "$BIN" && pwd) # the exports below name absolute paths
"$BIN/xet-origin" --data-dir "$DATA/origin" --listen "$ORIGIN_LISTEN" --admin-listen "$ORIGIN_ADMIN_LISTEN" "${edge_args[@]}" &
pids+=($!)
wait_healthy "http://$ORIGIN_LISTEN/healthz" "${pids[0]}"
log "origin: http://$ORIGIN_LISTEN (admin: http://$ORIGIN_ADMIN_LISTEN, data: $DATA/origin)"

if [ -x "$BIN/xet-edge" ]; then
	mkdir -p "$DATA/edge"
	token=$("$BIN/xet-origin" token --data-dir "$DATA/origin" --scope edge --access edge --ttl "$EDGE_TOKEN_TTL")
	"$BIN/xet-edge" --origin "http://$ORIGIN_LISTEN" --origin-token "$token" --data-dir "$DATA/edge" \
		--listen "$EDGE_LISTEN" --http-listen "$EDGE_HTTP_LISTEN" --public-url "http://$EDGE_HTTP_LISTEN" &
	pids+=($!)
	wait_healthy "http://$EDGE_HTTP_LISTEN/healthz" "${pids[1]}"
	log "edge:   https://$EDGE_LISTEN (self-signed; plain HTTP: http://$EDGE_HTTP_LISTEN)"
else
	log "edge:   not built yet (no bin/xet-edge); running the origin alone"
fi
log "admin (pprof, POST /admin/v1/hide): $BIN/xet-origin token --data-dir $DATA/origin --access admin --ttl 1h"
if [ -x "$BIN/xet-edge" ]; then
	# The exports for a client shell, on stdout: paste them (README.md, "Use it with the stock
	# clients"). XETCDN_TOKEN is a write token (it reads too) for DEMO_REPO; the edge's
	# certificate is self-signed, so TLS clients trust XETCDN_CA (SSL_CERT_FILE for hf_xet and
	# curl, NODE_EXTRA_CA_CERTS for node, --ca-file for xet).
	[ -f "$DATA/edge/tls/cert.pem" ] || log "warning: no $DATA/edge/tls/cert.pem (a configured certificate?): XETCDN_CA names it anyway"
	log "ready; in the shell that runs a client, paste:"
	printf 'export XETCDN_ORIGIN=%q\n' "http://$ORIGIN_LISTEN"
	printf 'export XETCDN_EDGE=%q\n' "http://$EDGE_HTTP_LISTEN"
	printf 'export XETCDN_EDGE_TLS=%q\n' "https://$EDGE_LISTEN"
	printf 'export XETCDN_CA=%q\n' "$DATA/edge/tls/cert.pem"
	printf 'export XETCDN_REPO=%q\n' "$DEMO_REPO"
	printf 'export XETCDN_TOKEN=$(%q token --data-dir %q --scope %q --access write --ttl 24h)\n' \
		"$BIN/xet-origin" "$DATA/origin" "$DEMO_REPO"
else
	log "tokens: $BIN/xet-origin token --data-dir $DATA/origin --scope $DEMO_REPO --access write"
fi
log "Ctrl-C stops everything"
wait -n
