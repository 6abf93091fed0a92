#!/usr/bin/env bash
# regions.sh — simulated regions (issue 12 item 5): origin, edges and clients each in their own
# network namespace, joined through perf/cmd/linkemu (a user-space packet-level link emulator:
# delay, jitter, loss and rate per path, below TCP and QUIC alike). Run as root: `make regions`.
#
#   region b:  origin 10.77.0.2 (embedded SQLite + local disk)   client-b 10.77.0.3
#   region a:  edge-1 10.77.0.17 (plain HTTP)   edge-2 10.77.0.18 (TLS + HTTP/3)   client-a 10.77.0.20
#              client-f 10.77.0.21 (the failover client)
#   a <-> b: RTT_INTER (100ms), JITTER_INTER (1ms), LOSS_INTER (0.005 per packet and direction)
#   inside a region: RTT_INTRA (2ms), JITTER_INTRA (0.1ms), LOSS_INTRA (0); RATE_MBIT (1000) everywhere
#
# One model (SHARDS files of SIZE_MB random bytes plus four small files, 2 KiB-4 MiB) is uploaded
# once from inside region b. Then ROUNDS rounds, each: the whole model downloaded by client-a
#   go/origin, go/cold, go/warm    `xet download` of every file at once, from the origin across the
#                                  lossy path; through edge-1 restarted empty (cold, its fill
#                                  crosses the lossy path); through edge-1 again (warm)
#   hf/origin, hf/cold, hf/warm    the same with stock hf_xet (one file download group, as
#                                  huggingface_hub), edge-1 emptied again for cold
#   go/h1, go/h3                   client-b through the warm edge-2 across the lossy path:
#                                  HTTP/1.1+TLS vs `xet download --http3` (order alternates);
#                                  go/h1reno: h1 again with edge-2's TCP on Reno
#   go/failover                    client-f (region a, FAILOVER_MBIT 80 to the edges, so that a
#                                  warm download lasts long enough to be cut), one shard through
#                                  `--token-url` (the origin names
#                                  edge-1 or edge-2 by rendezvous); the named edge is SIGKILLed when
#                                  half the shard has crossed the emulator: time to finish after the kill, exit
#                                  status, byte check, and when the token route stopped naming it
#                                  (progress: bytes the emulator carried from the edges to client-f)
# Every download is compared byte for byte. Results: OUT (perf/results/<UTC>-regions/):
# samples.jsonl, results.json, PNG plots, section.md, logs, linkemu's per-path counters; the
# section is appended to perf/BENCHMARKS.md unless BENCHMARKS=0.
#
# Environment: SIZE_MB (32), SHARDS (4), ROUNDS (3), HF (1; 0 skips hf_xet), TCP_CC (the TCP
# congestion control inside the namespaces; default: the host's, recorded in run.txt), RENO (1:
# also go/h1reno, the h1 case with edge-2's TCP on Reno, loss-based like quic-go's; bbr is not),
# CASES (groups to run: "edges protocols failover"; edges = origin/cold/warm), PYTHON (hf_xet
# venv; default $XETCDN_TEST_PYTHON from .cache/testenv.sh), BIN (prebuilt binaries; default:
# built into the work dir), KEEP=1 keeps the work dir, and the link variables above.
# Ctrl-C or any failure: every process and namespace of the run is removed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The knobs set by the caller, quoted in the report with the command.
KNOBS=""
for k in CASES FAILOVER_MBIT SIZE_MB SHARDS ROUNDS HF TCP_CC RENO RTT_INTER JITTER_INTER LOSS_INTER RTT_INTRA JITTER_INTRA LOSS_INTRA RATE_MBIT; do
	[ -n "${!k:-}" ] && KNOBS+="$k=${!k} "
done
CASES=${CASES:-edges protocols failover} RENO=${RENO:-1} FAILOVER_MBIT=${FAILOVER_MBIT:-80} SIZE_MB=${SIZE_MB:-32} SHARDS=${SHARDS:-4} ROUNDS=${ROUNDS:-3} HF=${HF:-1} TCP_CC=${TCP_CC:-}
RTT_INTER=${RTT_INTER:-100ms} JITTER_INTER=${JITTER_INTER:-1ms} LOSS_INTER=${LOSS_INTER:-0.005}
RTT_INTRA=${RTT_INTRA:-2ms} JITTER_INTRA=${JITTER_INTRA:-0.1ms} LOSS_INTRA=${LOSS_INTRA:-0}
RATE_MBIT=${RATE_MBIT:-1000}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/perf/results/$STAMP-regions}
ID=xr$$ # namespace prefix: unique per run
WORK=$(mktemp -d /tmp/regions.XXXXXX)
log() { printf 'regions: %s\n' "$*" >&2; }
has() { [[ " $CASES " == *" $1 "* ]]; }
[ "$(id -u)" = 0 ] || { log "needs root (network namespaces, TUN devices)"; exit 2; }
if [ "$HF" = 1 ] && [ -z "${PYTHON:-}" ]; then
	[ -f "$ROOT/.cache/testenv.sh" ] && . "$ROOT/.cache/testenv.sh"
	[ -f /work/main/.cache/testenv.sh ] && [ -z "${XETCDN_TEST_PYTHON:-}" ] && . /work/main/.cache/testenv.sh
	PYTHON=${XETCDN_TEST_PYTHON:-}
	[ -n "$PYTHON" ] || { log "HF=1 needs PYTHON (a python with hf_xet 1.8.0) or .cache/testenv.sh"; exit 2; }
fi

NETNS=("$ID-o" "$ID-e1" "$ID-e2" "$ID-ca" "$ID-cb" "$ID-cf")
EMU_PID=""
cleanup() {
	local st=$?
	trap - EXIT INT TERM
	# Everything the run started lives in its namespaces (the emulator holds their devices):
	# stop what is inside each, then the emulator (it writes its counters), then the namespaces.
	for ns in "${NETNS[@]}"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
	done
	if [ -n "$EMU_PID" ]; then
		kill -TERM "$EMU_PID" 2>/dev/null || true
		wait "$EMU_PID" 2>/dev/null || true
	fi
	for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	[ -f "$WORK/linkemu-stats.json" ] && [ -d "$OUT" ] && cp "$WORK/linkemu-stats.json" "$OUT/"
	for f in "$WORK"/*.log; do [ -f "$f" ] && [ -d "$OUT" ] && cp "$f" "$OUT/"; done
	if [ "${KEEP:-}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
	exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$OUT"
log "work $WORK, namespaces $ID-*, results $OUT"
if [ -n "${BIN:-}" ]; then
	B=$BIN
else
	B=$WORK/bin
	log "building"
	(cd "$ROOT" && go build -o "$B/" ./cmd/xet-origin ./cmd/xet-edge ./cmd/xet ./perf/cmd/linkemu ./perf/cmd/regionreport)
fi

# Addresses and the emulator's configuration.
O=10.77.0.2 CB=10.77.0.3 E1=10.77.0.17 E2=10.77.0.18 CA=10.77.0.20 CF=10.77.0.21
for ns in "${NETNS[@]}"; do
	ip netns add "$ns"
	# Per namespace (the host's own setting is untouched); a namespace may only pick one of the
	# host's net.ipv4.tcp_allowed_congestion_control.
	[ -z "$TCP_CC" ] || ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$TCP_CC"
done
cat >"$WORK/links.json" <<EOF
{"nodes": [
  {"name": "origin", "netns": "$ID-o", "addr": "$O", "region": "b"},
  {"name": "client-b", "netns": "$ID-cb", "addr": "$CB", "region": "b"},
  {"name": "edge-1", "netns": "$ID-e1", "addr": "$E1", "region": "a"},
  {"name": "edge-2", "netns": "$ID-e2", "addr": "$E2", "region": "a"},
  {"name": "client-a", "netns": "$ID-ca", "addr": "$CA", "region": "a"},
  {"name": "client-f", "netns": "$ID-cf", "addr": "$CF", "region": "a"}],
 "paths": [
  {"regions": ["a", "b"], "rtt": "$RTT_INTER", "jitter": "$JITTER_INTER", "loss": $LOSS_INTER, "rate_mbit": $RATE_MBIT},
  {"regions": ["a", "a"], "rtt": "$RTT_INTRA", "jitter": "$JITTER_INTRA", "loss": $LOSS_INTRA, "rate_mbit": $RATE_MBIT},
  {"regions": ["b", "b"], "rtt": "$RTT_INTRA", "jitter": "$JITTER_INTRA", "loss": $LOSS_INTRA, "rate_mbit": $RATE_MBIT},
  {"nodes": ["client-f", "edge-1"], "rtt": "$RTT_INTRA", "jitter": "$JITTER_INTRA", "loss": $LOSS_INTRA, "rate_mbit": $FAILOVER_MBIT},
  {"nodes": ["client-f", "edge-2"], "rtt": "$RTT_INTRA", "jitter": "$JITTER_INTRA", "loss": $LOSS_INTRA, "rate_mbit": $FAILOVER_MBIT}]}
EOF
"$B/linkemu" -config "$WORK/links.json" -stats "$WORK/linkemu-stats.json" >"$WORK/linkemu.out" 2>"$WORK/linkemu.log" &
EMU_PID=$!
for _ in $(seq 100); do grep -q ready "$WORK/linkemu.out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$WORK/linkemu.out" || { log "linkemu did not start"; cat "$WORK/linkemu.log" >&2; exit 1; }

# nsx NS CMD...: run in a namespace (foreground). Background processes use `ip netns exec`
# directly, so that $! is the process itself (ip execs it), not a subshell.
nsx() { local ns=$1; shift; ip netns exec "$ID-$ns" "$@"; }
up() { # NS URL: wait for /healthz (from inside the namespace: no emulator on the way)
	for _ in $(seq 600); do nsx "$1" curl -skf -o /dev/null "$2/healthz" && return 0; sleep 0.1; done
	log "$2 did not come up"
	exit 1
}
now() { date +%s.%N; }
load1() { cut -d' ' -f1 /proc/loadavg; }
cpu() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# Origin, region b; clients are placed in regions by their addresses.
cat >"$WORK/origin.json" <<EOF
{"regions": {"order": ["a", "b"], "networks": {"10.77.0.0/28": "b", "10.77.0.16/28": "a"}}}
EOF
ip netns exec "$ID-o" "$B/xet-origin" --data-dir "$WORK/origin" --listen "$O:8080" --public-url "http://$O:8080" \
	--config "$WORK/origin.json" >"$WORK/origin.log" 2>&1 &
ORIGIN_PID=$!
up o "http://$O:8080"
REPO=models/bench/regions
tok() { "$B/xet-origin" token --data-dir "$WORK/origin" --ttl 24h "$@"; }
W=$(tok --access write --scope "$REPO")
R=$(tok --access read --scope "$REPO")
ET=$(tok --access edge)

# The model: SHARDS shards and four small files.
mkdir -p "$WORK/model"
for ((i = 1; i <= SHARDS; i++)); do
	head -c $((SIZE_MB << 20)) /dev/urandom >"$WORK/model/model-$i-of-$SHARDS.safetensors"
done
head -c 2048 /dev/urandom >"$WORK/model/config.json"
head -c 4096 /dev/urandom >"$WORK/model/generation_config.json"
head -c 65536 /dev/urandom >"$WORK/model/README.md"
head -c $((4 << 20)) /dev/urandom >"$WORK/model/tokenizer.json"
log "uploading the model ($SHARDS x $SIZE_MB MiB + 4 small files) inside region b"
nsx o "$B/xet" upload --endpoint "http://$O:8080" --token "$W" "$WORK/model"/* >"$WORK/upload.jsonl"
declare -A HASH SIZE
NAMES=()
while read -r name hash size; do
	HASH[$name]=$hash SIZE[$name]=$size
	NAMES+=("$name")
done < <(python3 -c '
import json, os, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(os.path.basename(d["path"]), d["file_hash"], d["size"])' "$WORK/upload.jsonl")
[ ${#NAMES[@]} = $((SHARDS + 4)) ] || { log "upload printed ${#NAMES[@]} files"; exit 1; }
TOTAL=0
for n in "${NAMES[@]}"; do TOTAL=$((TOTAL + SIZE[$n])); done

# Edges, region a. edge-1 serves plain HTTP (the origin comparison: the origin is plain HTTP
# too), edge-2 TLS and HTTP/3 on one port.
declare -A EPID
start_edge() { # NAME FRESH(0|1)
	local n=$1 addr pub
	[ "$n" = e1 ] && addr=$E1 pub=http://$E1:8081
	[ "$n" = e2 ] && addr=$E2 pub=https://$E2:8443
	[ "$2" = 1 ] && rm -rf "$WORK/$n"
	ip netns exec "$ID-$n" "$B/xet-edge" --origin "http://$O:8080" --origin-token "$ET" --data-dir "$WORK/$n" \
		--listen "$addr:8443" --http-listen "$addr:8081" --public-url "$pub" --region a \
		>>"$WORK/edge-$n.log" 2>&1 &
	EPID[$n]=$!
	up "$n" "http://$addr:8081"
	up "$n" "https://$addr:8443"
}
stop_edge() { kill -9 "${EPID[$1]}" 2>/dev/null || true; wait "${EPID[$1]}" 2>/dev/null || true; }
start_edge e1 1
start_edge e2 1

# Downloads. Each prints its wall seconds; a failure or a wrong byte stops the run.
check() { # DIR: every file byte-exact, then removed
	for n in "${NAMES[@]}"; do
		cmp -s "$1/$n" "$WORK/model/$n" || { log "$n downloaded wrong (or missing) in $1"; return 1; }
	done
	rm -rf "$1"
}
go_model() { # NS ENDPOINT [xet flags]: every file at once, as a hub client pulls a snapshot
	local ns=$1 ep=$2 d=$WORK/dl-go t0 t1 st=0 pids=()
	shift 2
	rm -rf "$d"
	mkdir -p "$d"
	t0=$(now)
	for n in "${NAMES[@]}"; do
		ip netns exec "$ID-$ns" "$B/xet" download --endpoint "$ep" --token "$R" --hash "${HASH[$n]}" --size "${SIZE[$n]}" \
			"$@" -o "$d/$n" >/dev/null 2>>"$WORK/client.log" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || st=1; done
	t1=$(now)
	[ $st = 0 ] || { log "xet download from $ep failed (client.log)"; tail -5 "$WORK/client.log" >&2; return 1; }
	check "$d"
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'
}
hf_model() { # NS ENDPOINT: one hf_xet file download group for every file
	local ns=$1 ep=$2 d=$WORK/dl-hf t0 t1
	rm -rf "$d" "$WORK/hfhome"
	mkdir -p "$d"
	t0=$(now)
	# A fresh HF_HOME and no chunk cache: nothing is served from the client's own disk.
	if ! nsx "$ns" env HF_HOME="$WORK/hfhome" HF_XET_CHUNK_CACHE_SIZE_BYTES=0 "$PYTHON" - "$ep" "$R" "$d" \
		"$WORK/upload.jsonl" >/dev/null 2>>"$WORK/client.log" <<'PY'; then
import json, os, sys, time
import hf_xet
ep, tok, out, manifest = sys.argv[1:5]
files = [json.loads(l) for l in open(manifest)]
g = hf_xet.XetSession().new_file_download_group(endpoint=ep, token=tok, token_expiry_unix_secs=int(time.time()) + 86400)
for f in files:
    g.start_download_file(hf_xet.XetFileInfo(f["file_hash"], f["size"]), os.path.join(out, os.path.basename(f["path"])))
g.wait_to_finish()
PY
		log "hf_xet download from $ep failed (client.log)"
		tail -5 "$WORK/client.log" >&2
		return 1
	fi
	t1=$(now)
	check "$d"
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'
}
measure() { # ROUND CASE CLIENT COMMAND...: run it (its stdout is the seconds) and record it
	local s u0 u1
	u0=$(udp_drops cb)
	s=$("${@:4}")
	u1=$(udp_drops cb)
	sample "$1" "$2" "$3" "$s" ",\"client_b_udp_drops\":$((u1 - u0))"
}
# udp_drops NS: UDP datagrams the namespace's stack dropped for a full socket buffer (or other
# receive errors): QUIC sees these as loss on top of the link's.
udp_drops() { nsx "$1" awk '$1 == "Udp:" && $2 ~ /^[0-9]+$/ {print $4 + $6}' /proc/net/snmp; }
sample() { # ROUND CASE CLIENT SECONDS [extra JSON fields]
	printf '{"round":%d,"case":"%s","client":"%s","seconds":%s,"bytes":%d,"load1":%s%s}\n' \
		"$1" "$2" "$3" "$4" "$TOTAL" "$(load1)" "${5:-}" | tee -a "$OUT/samples.jsonl" >&2
}
cold() { # ROUND CLIENT: edge-1 restarted empty, one model download through it
	local s c0
	stop_edge e1
	start_edge e1 1
	c0=$(cpu "${EPID[e1]}")
	if [ "$2" = go ]; then s=$(go_model ca "http://$E1:8081"); else s=$(hf_model ca "http://$E1:8081"); fi
	sample "$1" cold "$2" "$s" ",\"edge_cpu\":$(awk -v a="$c0" -v b="$(cpu "${EPID[e1]}")" 'BEGIN {printf "%.2f", b - a}')"
}

TOKEN_URL=http://$O:8080/api/$REPO/xet-read-token/main
named() { nsx cf curl -sf -m 2 -H "Authorization: Bearer $R" "$TOKEN_URL" | python3 -c 'import json,sys; print(json.load(sys.stdin)["casUrl"])' 2>/dev/null || true; }
edge_of() { case $1 in "http://$E1:8081") echo e1 ;; "https://$E2:8443") echo e2 ;; esac; }
failover() { # ROUND: one shard through the token route; the named edge killed at half
	local r=$1 n=model-1-of-$SHARDS.safetensors f=$WORK/fo.bin v url t0 tk tout="" tres="" tend="" st=0 size
	size=${SIZE[$n]}
	for _ in $(seq 100); do url=$(named); v=$(edge_of "$url"); [ -n "$v" ] && break; sleep 0.2; done
	[ -n "$v" ] || { log "the token route names no edge: $url"; return 1; }
	rm -f "$f"
	t0=$(now)
	rm -f "$WORK/fo.end"
	# The subshell notes the client's exit status and end time the moment it exits.
	(
		st=0
		ip netns exec "$ID-cf" "$B/xet" download --token-url "$TOKEN_URL" --token "$R" --hash "${HASH[$n]}" \
			--size "$size" --insecure -o - >"$f" 2>>"$WORK/client.log" || st=$?
		echo "$(now) $st" >"$WORK/fo.end"
	) &
	local dl=$!
	# Progress is what crossed the emulator from the edges to client-f (its counters, asked for
	# every 10 ms with SIGUSR1): the output file is no measure, the client writes it in order and
	# holds pieces that arrive early. A watcher inside client-f's namespace SIGKILLs the named
	# edge once half the shard has crossed, then asks the token route every 0.2 s until it names
	# another URL, records the bytes over time until the client ends, and prints the kill time,
	# the time the route dropped the edge and the time bytes flowed again (the client resumed).
	local w
	w=$(ip netns exec "$ID-cf" python3 - "$WORK/linkemu-stats.json" "$EMU_PID" $((size / 2)) "${EPID[$v]}" \
		"$WORK/fo.end" "$t0" "$OUT/failover-r$r.tsv" "$TOKEN_URL" "$R" "$url" <<'PY'
import json, os, signal, sys, time, urllib.request
stats, emu, half, edge, end, t0, tsv, turl, tok, dead = sys.argv[1:11]
emu, half, edge, t0 = int(emu), int(half), int(edge), float(t0)
def received():
    os.kill(emu, signal.SIGUSR1)
    time.sleep(0.01)
    try:
        paths = json.load(open(stats))["paths"]
    except (OSError, ValueError):
        return None
    return sum(v["bytes"] for k, v in paths.items() if k in ("edge-1>client-f", "edge-2>client-f"))
def named():
    req = urllib.request.Request(turl, headers={"Authorization": "Bearer " + tok})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return json.load(r).get("casUrl")
    except Exception:
        return dead  # no answer: not evidence that the route changed
base = None
while base is None:
    base = received()
killed = route = resumed = None
at_kill = 0
next_ask = 0
with open(tsv, "w") as out:
    while True:
        n = received()
        if n is None:
            continue
        now = time.time()
        out.write(f"{now - t0:.3f}\t{n - base}\n")
        if killed is None and n - base >= half:
            os.kill(edge, signal.SIGKILL)
            killed, at_kill = time.time(), n
        elif killed is not None and resumed is None and n - at_kill > 2 << 20:
            # More than the emulator still held when the edge died (≤ 100 ms of queue, 1 MB at
            # 80 Mbit/s): the client is fetching again.
            resumed = now
        if killed is not None and route is None and now >= next_ask:
            if named() != dead:
                route = time.time()
            elif now - killed > 60:
                route = -1
            next_ask = time.time() + 0.2
        if os.path.exists(end) and (killed is None or route is not None):
            break
print(f"{killed or ''} {route or ''} {resumed or ''}")
PY
)
	read -r tk tout tres <<<"$w"
	stop_edge "$v"
	[ -n "$tk" ] || { log "failover: the download ended before half had arrived"; return 1; }
	read -r tend st <"$WORK/fo.end"
	wait "$dl" || true
	local exact=false
	cmp -s "$f" "$WORK/model/$n" && exact=true
	rm -f "$f"
	printf '{"round":%d,"case":"failover","client":"go","seconds":%s,"bytes":%d,"killed":"%s","kill_at":%s,"after_kill":%s,"route_out":%s,"resumed":%s,"exit":%d,"byte_exact":%s,"load1":%s}\n' \
		"$r" "$(awk -v a="$t0" -v b="$tend" 'BEGIN {printf "%.3f", b - a}')" "$size" "$v" \
		"$(awk -v a="$t0" -v b="$tk" 'BEGIN {printf "%.3f", b - a}')" \
		"$(awk -v a="$tk" -v b="$tend" 'BEGIN {printf "%.3f", b - a}')" \
		"$(if [ "$tout" = -1 ]; then echo null; else awk -v a="$tk" -v b="$tout" 'BEGIN {printf "%.3f", b - a}'; fi)" \
		"$(if [ -z "$tres" ]; then echo null; else awk -v a="$tk" -v b="$tres" 'BEGIN {printf "%.3f", b - a}'; fi)" \
		"$st" "$exact" "$(load1)" | tee -a "$OUT/samples.jsonl" >&2
	start_edge "$v" 0 # back, warm, for the next round
	both_healthy
}
# both_healthy: wait until the origin's registry has both edges healthy, so that the next kill
# tests detection and not an edge that has yet to register.
both_healthy() {
	for _ in $(seq 300); do
		[ "$("$B/xet-origin" edges --data-dir "$WORK/origin" --config "$WORK/origin.json" 2>/dev/null | grep -c ' healthy ')" -ge 2 ] && return 0
		sleep 0.2
	done
	log "the edges did not both register as healthy"
	return 1
}

# Warm edge-2 once for the protocol comparison.
if has protocols; then
	log "warming edge-2"
	go_model cb "https://$E2:8443" --insecure >/dev/null
fi
{
	echo "date: $(date -u +%FT%TZ)"
	echo "commit: $(git -C "$ROOT" rev-parse --short=12 HEAD)$(git -C "$ROOT" diff --quiet || echo ' (modified)')"
	echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uptime)"
	echo "model: $SHARDS x $SIZE_MB MiB + 4 small files = $TOTAL bytes; rounds: $ROUNDS; hf_xet: $HF"
	echo "tcp: congestion control $(nsx e1 sysctl -n net.ipv4.tcp_congestion_control) in the namespaces (host: $(sysctl -n net.ipv4.tcp_congestion_control)); QUIC: quic-go's own (loss-based)"
	echo "links: inter $RTT_INTER ±$JITTER_INTER loss $LOSS_INTER; intra $RTT_INTRA ±$JITTER_INTRA loss $LOSS_INTRA; $RATE_MBIT Mbit/s"
} | tee "$OUT/run.txt" >&2
cp "$WORK/links.json" "$OUT/"
: >"$OUT/samples.jsonl"
for ((r = 1; r <= ROUNDS; r++)); do
	log "round $r/$ROUNDS $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
	if has edges; then
		measure "$r" origin go go_model ca "http://$O:8080"
		cold "$r" go
		measure "$r" warm go go_model ca "http://$E1:8081"
	fi
	if has edges && [ "$HF" = 1 ]; then
		measure "$r" origin hf hf_model ca "http://$O:8080"
		cold "$r" hf
		measure "$r" warm hf hf_model ca "http://$E1:8081"
	fi
	if ! has protocols; then
		:
	elif [ $((r % 2)) = 1 ]; then
		measure "$r" h1 go go_model cb "https://$E2:8443" --insecure
		measure "$r" h3 go go_model cb "https://$E2:8443" --insecure --http3
	else
		measure "$r" h3 go go_model cb "https://$E2:8443" --insecure --http3
		measure "$r" h1 go go_model cb "https://$E2:8443" --insecure
	fi
	if has protocols && [ "$RENO" = 1 ]; then
		# New connections from edge-2 use Reno; the edge's origin connection stays as it was
		# (the edge is warm: it does not fill).
		prev=$(nsx e2 sysctl -n net.ipv4.tcp_congestion_control)
		nsx e2 sysctl -qw net.ipv4.tcp_congestion_control=reno
		measure "$r" h1reno go go_model cb "https://$E2:8443" --insecure
		nsx e2 sysctl -qw net.ipv4.tcp_congestion_control="$prev"
	fi
	if has failover; then both_healthy && failover "$r"; fi
done
kill -USR1 "$EMU_PID"
sleep 0.5
cp "$WORK/linkemu-stats.json" "$OUT/" 2>/dev/null || true
"$B/regionreport" -o "$OUT" -command "$KNOBS${REGIONS_COMMAND:-perf/regions.sh}" "$OUT/run.txt" "$OUT/samples.jsonl" >"$OUT/section.md"
cat "$OUT/section.md"
if [ "${BENCHMARKS:-1}" = 1 ]; then
	{ echo; cat "$OUT/section.md"; } >>"$ROOT/perf/BENCHMARKS.md"
	log "appended to perf/BENCHMARKS.md"
fi
log "results in $OUT"
