#!/usr/bin/env bash
# coldedge.sh — a cold edge against the origin it sits in front of (issue 11), side by side in
# one run: `xet download` of one large random file straight from the origin (plain HTTP), then
# through a freshly started edge (empty data directory) over its plain HTTP listener and over
# TLS. Per download: wall time, time to first byte (the first byte read from `xet download -o -`'s
# pipe, see download below), and for the edge downloads the edge process's CPU seconds spent on the
# download (utime+stime from /proc/PID/stat, after minus before) and its peak RSS (VmHWM).
#
#   perf/coldedge.sh [REV[@CONFIG] ...]   e.g. perf/coldedge.sh main HEAD   (default: the work tree)
#
# Each REV is checked out into a temporary worktree and built there; without REV the current
# tree is built. REV@CONFIG runs that revision's edges with --config CONFIG (a JSON file), so one
# run can compare settings side by side, e.g. `HEAD HEAD@noreadahead.json` with
# {"cache": {"read_ahead_bytes": -1}}. Every revision gets its own origin (embedded defaults) and its own upload of the
# same file; every round starts a new edge per revision and per protocol, so each edge download
# is cold. Rounds alternate the order of the revisions. Environment: SIZE_MB (256; 1024 for the
# issue's 1 GiB), ROUNDS (3), PORT_BASE (29900; keep it below Linux's ephemeral ports, 32768 up,
# where an outgoing connection of anyone on the machine can hold a listener's port), WORK (a temp
# dir), KEEP=1 keeps WORK,
# SETTLE_S (65): each cold edge gets a data directory of its own, and a round's directories are
# removed before the next round, which then waits SETTLE_S seconds (see settle below).
#
# Each edge download also reports edge_fb_ms: the edge's own mean time from a missed transfer
# request to its first verified byte (xet_edge_datacache_miss_first_byte_seconds sum ÷ count).
# The client's ttfb also counts its reconstruction request and the first chunk's decoding:
# `xet download -o -` writes the range at the output's frontier as its chunks arrive (until
# afe4090 it wrote a range only once all of it had arrived, so the first byte waited for the
# file's first whole xorb range).
#
# CLIENT_DELAY_MS=N puts perf/cmd/delayrelay (N ms each way) between the clients and both the
# origin and the edges; ORIGIN_DELAY_MS=N puts one between the edges and the origin (a far
# origin). Both default to 0 (loopback).
#
# LINK_MBIT=N (needs root, `ip netns` and the tbf qdisc) runs every client in a network namespace
# of its own, joined to the host by a veth pair whose host side is shaped to N Mbit/s by tbf (the
# download direction): a client on a real network link instead of loopback, where the machine's
# cores are not the bottleneck. Servers then listen on the host end of the pair (10.77.X.1) and
# reach one another over the host's own routing (not shaped: the edge and its origin share a
# region). Default 0: clients on loopback.
#
# PYTHON=path (e.g. $XETCDN_TEST_PYTHON from the test environment, with hf_xet 1.8.0 installed)
# adds the same three downloads with the stock hf_xet client (test/interop/hfxet_driver.py, its
# file download group as huggingface_hub uses it): wall time, edge CPU and RSS; no first byte
# (hf_xet writes the file itself). Over TLS hf_xet trusts the edge's certificate through
# SSL_CERT_FILE.
#
# ORIGIN_TLS=1 (the default when haproxy is installed; 0 turns it off) also measures the origin
# over TLS, as production runs it: a second origin of the same revision (its own data directory
# and upload of the same file, --public-url https://…) behind haproxy terminating TLS (HTTP/2 and
# HTTP/1.1 to clients, HTTP/1.1 to the origin, a self-signed P-256 certificate). Its downloads
# are "origin-tls" / "hf-origin-tls", and the TLS edge's ratios are then taken against them
# (tls/tls-origin) as well as against the plain origin.
#
# PIN=1 (needs 2 or more cores) gives every edge a core of its own: edges run on core 1 (taskset),
# everything else — origins, haproxy, clients, this script — on core 0, for the origin's
# downloads as for the edge's. Without it (the default) client, origin and edge share all cores,
# as on one loopback host; with it the edge's CPU is what it costs on a node of its own, as
# deployed, and the origin's side (origin + client on one core) is the same in both downloads.
#
# CLIENTS=N (default 0: off) adds two bursts per revision after the rounds, each on a fresh edge
# over plain HTTP: N clients downloading N different random files of BURST_MB (64) at once —
# edge peak RSS (VmRSS sampled every 0.2 s, and VmHWM) and RSS 30 s after the last download
# ended — and N clients downloading the same file at once — origin egress to the edge
# (xet_edge_origin_xorb_bytes_total) divided by the file's size.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZE_MB=${SIZE_MB:-256} ROUNDS=${ROUNDS:-3} P=${PORT_BASE:-29900}
# net: the client link's /30 (LINK_MBIT), its host end .1 also in the TLS origin's certificate.
net=10.77.$(((P / 10) % 250))
WORK=${WORK:-$(mktemp -d /tmp/coldedge.XXXXXX)}
mkdir -p "$WORK"
log() { printf 'coldedge: %s\n' "$*" >&2; }
revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=(worktree)

pids=()
trees=()
cleanup() {
	# The edges run inside command substitutions: their pids are in files.
	for p in "${pids[@]}" $(cat "$WORK"/*/edge.pid 2>/dev/null); do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for t in "${trees[@]}"; do git -C "$ROOT" worktree remove --force "$t" 2>/dev/null || true; done
	if [ -n "${netns_made:-}" ]; then
		ip link del "$veth" 2>/dev/null || true
		ip netns del "$netns" 2>/dev/null || true
	fi
	[ "${KEEP:-}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
up() {
	for _ in $(seq 600); do curl -skf -o /dev/null "$1/healthz" && return 0; sleep 0.1; done
	log "$1 did not come up"
	exit 1
}
cpu() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; } # CLK_TCK = 100 on Linux
hwm() { awk '/^VmHWM/ {print int($2 / 1024)}' "/proc/$1/status"; }

ORIGIN_TLS=${ORIGIN_TLS:-$(command -v haproxy >/dev/null && echo 1 || echo 0)}
[[ $ORIGIN_TLS == 0 || $ORIGIN_TLS == 1 ]] || { log "ORIGIN_TLS=$ORIGIN_TLS: want 0 or 1"; exit 1; }
if [ "$ORIGIN_TLS" = 1 ]; then
	command -v haproxy >/dev/null || { log "ORIGIN_TLS=1 needs haproxy"; exit 1; }
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 \
		-addext subjectAltName=IP:127.0.0.1,IP:$net.1 -addext basicConstraints=critical,CA:FALSE \
		-addext extendedKeyUsage=serverAuth -keyout "$WORK/otls.key" -out "$WORK/otls.crt" 2>/dev/null
	cat "$WORK/otls.crt" "$WORK/otls.key" >"$WORK/otls.pem"
fi
CLIENTS=${CLIENTS:-0} BURST_MB=${BURST_MB:-64} CLIENT_DELAY_MS=${CLIENT_DELAY_MS:-0} ORIGIN_DELAY_MS=${ORIGIN_DELAY_MS:-0}
if [ "$CLIENT_DELAY_MS" != 0 ] || [ "$ORIGIN_DELAY_MS" != 0 ]; then
	(cd "$ROOT" && go build -o "$WORK/" ./perf/cmd/delayrelay)
fi
# relay PORT TARGET MS: a delay relay on H:PORT to TARGET (host:port).
relay() {
	"$WORK/delayrelay" -listen "$H:$1" -to "$2" -delay "$3ms" 2>>"$WORK/relay.log" &
	pids+=($!)
}
# H: the address every listener binds; NS: the command prefix that runs a client.
H=127.0.0.1 NS=() LINK_MBIT=${LINK_MBIT:-0}
[[ $LINK_MBIT =~ ^[0-9]+$ ]] || { log "LINK_MBIT=$LINK_MBIT: want a whole number of Mbit/s"; exit 1; }
if [ "$LINK_MBIT" != 0 ]; then
	netns=xetce$$ veth=xce$$
	ip netns add "$netns"
	netns_made=1
	ip link add "$veth" type veth peer name "${veth}c"
	ip link set "${veth}c" netns "$netns"
	ip addr add "$net.1/30" dev "$veth"
	ip link set "$veth" up
	ip netns exec "$netns" ip addr add "$net.2/30" dev "${veth}c"
	ip netns exec "$netns" ip link set "${veth}c" up
	ip netns exec "$netns" ip link set lo up
	# burst: 1 ms at the rate, and at least two 64 KiB GSO packets of the veth.
	tc qdisc add dev "$veth" root tbf rate "${LINK_MBIT}mbit" \
		burst $((LINK_MBIT * 1000 / 8 > 65536 * 2 ? LINK_MBIT * 1000 / 8 : 65536 * 2)) latency 50ms
	H=$net.1 NS=(ip netns exec "$netns")
fi
head -c $((SIZE_MB << 20)) /dev/urandom >"$WORK/rand.bin"
for ((c = 0; c < CLIENTS; c++)); do head -c $((BURST_MB << 20)) /dev/urandom >"$WORK/burst$c.bin"; done
declare -A origin etok rtok file burst config corigin cedge ctls edgeorigin torigin ttoken
i=0
for spec in "${revs[@]}"; do
	rev=${spec%%@*}
	n=r$i
	config[$n]=""
	[ "$spec" = "$rev" ] || config[$n]=$(realpath "${spec#*@}")
	mkdir -p "$WORK/$n"
	src=$ROOT
	if [ "$rev" != worktree ]; then
		src=$WORK/src-$n
		git -C "$ROOT" worktree add -q --detach "$src" "$rev"
		trees+=("$src")
	fi
	(cd "$src" && go build -o "$WORK/$n/" ./cmd/xet-origin ./cmd/xet-edge ./cmd/xet)
	o=$((P + 10 * i))
	"$WORK/$n/xet-origin" --data-dir "$WORK/$n/origin" --listen "$H:$o" >"$WORK/$n/origin.log" 2>&1 &
	pids+=($!)
	origin[$n]=http://$H:$o
	up "${origin[$n]}"
	# What clients dial (origin, edge TLS, edge plain) and what the edges dial for the origin:
	# the listeners themselves, or delay relays in front of them (ports o+4..o+7).
	corigin[$n]=${origin[$n]} ctls[$n]=$H:$((o + 1)) cedge[$n]=$H:$((o + 2)) edgeorigin[$n]=${origin[$n]}
	if [ "$CLIENT_DELAY_MS" != 0 ]; then
		relay $((o + 4)) "$H:$o" "$CLIENT_DELAY_MS"
		relay $((o + 5)) "$H:$((o + 1))" "$CLIENT_DELAY_MS"
		relay $((o + 6)) "$H:$((o + 2))" "$CLIENT_DELAY_MS"
		corigin[$n]=http://$H:$((o + 4)) ctls[$n]=$H:$((o + 5)) cedge[$n]=$H:$((o + 6))
	fi
	if [ "$ORIGIN_DELAY_MS" != 0 ]; then
		relay $((o + 7)) "$H:$o" "$ORIGIN_DELAY_MS"
		edgeorigin[$n]=http://$H:$((o + 7))
	fi
	tok() { "$WORK/$n/xet-origin" token --data-dir "$WORK/$n/origin" --ttl 24h "$@"; }
	w=$(tok --access write --scope models/bench/cold)
	rtok[$n]=$(tok --access read --scope models/bench/cold)
	etok[$n]=$(tok --access edge)
	file[$n]=$("$WORK/$n/xet" upload --endpoint "${origin[$n]}" --token "$w" "$WORK/rand.bin" |
		sed -n 's/.*"file_hash": *"\([0-9a-f]*\)".*/\1/p')
	[ -n "${file[$n]}" ] || { log "$rev: upload printed no file_hash"; exit 1; }
	for ((c = 0; c < CLIENTS; c++)); do
		burst[$n,$c]=$("$WORK/$n/xet" upload --endpoint "${origin[$n]}" --token "$w" "$WORK/burst$c.bin" |
			sed -n 's/.*"file_hash": *"\([0-9a-f]*\)".*/\1/p')
	done
	if [ "$ORIGIN_TLS" = 1 ]; then
		# The TLS origin: origin o+9 behind haproxy on o+8, its transfer URLs signed for haproxy.
		"$WORK/$n/xet-origin" --data-dir "$WORK/$n/torigin" --listen "$H:$((o + 9))" \
			--public-url "https://$H:$((o + 8))" >"$WORK/$n/torigin.log" 2>&1 &
		pids+=($!)
		up "http://$H:$((o + 9))"
		cat >"$WORK/$n/haproxy.cfg" <<HAP
global
	maxconn 4096
defaults
	mode http
	timeout connect 5s
	timeout client 120s
	timeout server 120s
frontend tls
	bind $H:$((o + 8)) ssl crt $WORK/otls.pem alpn h2,http/1.1
	default_backend origin
backend origin
	server origin $H:$((o + 9))
HAP
		haproxy -f "$WORK/$n/haproxy.cfg" >"$WORK/$n/haproxy.log" 2>&1 &
		pids+=($!)
		torigin[$n]=https://$H:$((o + 8))
		up "${torigin[$n]}"
		ttok() { "$WORK/$n/xet-origin" token --data-dir "$WORK/$n/torigin" --ttl 24h "$@"; }
		[ "$("$WORK/$n/xet" upload --endpoint "http://$H:$((o + 9))" \
			--token "$(ttok --access write --scope models/bench/cold)" "$WORK/rand.bin" |
			sed -n 's/.*"file_hash": *"\([0-9a-f]*\)".*/\1/p')" = "${file[$n]}" ] ||
			{ log "$rev: the TLS origin's upload gave another file hash"; exit 1; }
		ttoken[$n]=$(ttok --access read --scope models/bench/cold)
	fi
	log "$n = $spec: origin ${origin[$n]}, file ${file[$n]}"
	i=$((i + 1))
done
# The bursts download to /dev/null: their sources are not needed after the uploads (16 x 1 GiB
# would otherwise hold 16 GiB more of disk through the run).
rm -f "$WORK"/burst*.bin

# download NAME ENDPOINT [xet flags]: prints "wall=S ttfb=S"; the output is compared and removed.
# The file goes to standard output (in file order) and the first byte read from the pipe is the
# time to first byte.
download() {
	local n=$1 ep=$2 out=$WORK/out.bin
	shift 2
	rm -f "$out" "$WORK/first"
	# The output file is created before the clock starts and the first byte written into it
	# (conv=notrunc): creating a file on this filesystem right after the last download's 1 GiB
	# output was removed, while the edge creates its segment files, took up to 0.2 s and was
	# counted as the edge's first byte.
	: >"$out"
	local t0 t1 st
	t0=$(date +%s.%N)
	set +e
	"${NS[@]}" "$WORK/$n/xet" download --endpoint "$ep" --token "${TOKEN:-${rtok[$n]}}" --hash "${file[$n]}" \
		--size $((SIZE_MB << 20)) "$@" -o - 2>"$WORK/dl.err" |
		{ dd bs=1 count=1 of="$out" conv=notrunc status=none; date +%s.%N >"$WORK/first"; cat >>"$out"; }
	st=${PIPESTATUS[0]}
	set -e
	t1=$(date +%s.%N)
	if [ "$st" != 0 ] || ! cmp -s "$out" "$WORK/rand.bin"; then
		log "download from $ep failed (exit $st) or differs"
		cat "$WORK/dl.err" >&2
		exit 1
	fi
	rm -f "$out"
	awk -v a="$t0" -v b="$(cat "$WORK/first")" -v c="$t1" 'BEGIN {printf "wall=%.2f ttfb=%.3f", c - a, b - a}'
}

# hfdownload NAME ENDPOINT [CA-FILE]: an hf_xet download; prints "wall=S".
hfdownload() {
	local n=$1 ep=$2 ca=${3:-} out=$WORK/out.bin t0 t1
	rm -f "$out"
	t0=$(date +%s.%N)
	if ! SSL_CERT_FILE=${ca:-${SSL_CERT_FILE:-}} "${NS[@]}" "$PYTHON" "$ROOT/test/interop/hfxet_driver.py" download \
		--endpoint "$ep" --token "${TOKEN:-${rtok[$n]}}" --hash "${file[$n]}" --size $((SIZE_MB << 20)) \
		-o "$out" >/dev/null 2>"$WORK/dl.err" || ! cmp -s "$out" "$WORK/rand.bin"; then
		log "hf_xet download from $ep failed or differs"
		cat "$WORK/dl.err" >&2
		exit 1
	fi
	t1=$(date +%s.%N)
	rm -f "$out"
	awk -v a="$t0" -v c="$t1" 'BEGIN {printf "wall=%.2f", c - a}'
}

# cold NAME PROTO [hf]: a fresh edge, one download through it (with hf_xet when the third
# argument is hf); prints the measurement line.
cold() {
	local n=$1 proto=$2 client=${3:-xet} e=$((P + 10 * ${1#r} + 1)) h=$((P + 10 * ${1#r} + 2)) a=$((P + 10 * ${1#r} + 3)) dir
	# A data directory of its own, removed only between rounds (settle, below): deleting the
	# last edge's 512+ segment files right before this edge creates its own made every cold
	# fill pay journal-less ext4's scan past recently freed inodes (perf/BENCHMARKS.md,
	# 2026-12-02 second pass), which a fresh edge in production does not.
	dir=$(mktemp -d "$WORK/$n/edge.XXXXXX")
	local pub=https://${ctls[$n]}
	[ "$proto" = tls ] || pub=http://${cedge[$n]}
	# The edge signs its transfer URLs with --public-url: the listener under test (or the relay
	# in front of it).
	"${EDGE_PIN[@]}" "$WORK/$n/xet-edge" --origin "${edgeorigin[$n]}" --origin-token "${etok[$n]}" --data-dir "$dir" \
		--listen "$H:$e" --http-listen "$H:$h" --admin-listen "127.0.0.1:$a" --public-url "$pub" \
		${config[$n]:+--config "${config[$n]}"} >"$WORK/$n/edge.log" 2>&1 &
	local pid=$!
	echo "$pid" >"$WORK/$n/edge.pid"
	if ! (up "https://$H:$e" && up "http://$H:$h"); then
		# Never leave it running: the next edge would find its ports taken and be measured
		# against this one.
		kill "$pid" 2>/dev/null || true
		tail -20 "$WORK/$n/edge.log" >&2
		exit 1
	fi
	local c0 res c1 peak
	c0=$(cpu "$pid")
	if [ "$client" = hf ] && [ "$proto" = tls ]; then
		res=$(hfdownload "$n" "$pub" "$dir/tls/cert.pem")
	elif [ "$client" = hf ]; then
		res=$(hfdownload "$n" "$pub")
	elif [ "$proto" = tls ]; then
		res=$(download "$n" "$pub" --insecure)
	else
		res=$(download "$n" "$pub")
	fi
	c1=$(cpu "$pid")
	peak=$(hwm "$pid")
	local fb
	fb=$(curl -s "http://127.0.0.1:$a/metrics" | awk '$1 == "xet_edge_datacache_miss_first_byte_seconds_sum" {s = $2}
		$1 == "xet_edge_datacache_miss_first_byte_seconds_count" {c = $2} END {printf "%.1f", c ? 1000 * s / c : -1}')
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	echo "$res edge_cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.2f", b - a}') edge_hwm_mb=$peak edge_fb_ms=$fb"
}

rss() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$1/status"; }

# burst NAME same|different: a fresh edge, CLIENTS downloads through it at once; prints a line.
burst() {
	local n=$1 kind=$2 e=$((P + 10 * ${1#r} + 1)) h=$((P + 10 * ${1#r} + 2)) a=$((P + 10 * ${1#r} + 3))
	local dir=$WORK/$n/edge
	rm -rf "$dir"
	"${EDGE_PIN[@]}" "$WORK/$n/xet-edge" --origin "${edgeorigin[$n]}" --origin-token "${etok[$n]}" --data-dir "$dir" \
		--listen "$H:$e" --http-listen "$H:$h" --public-url "http://$H:$h" \
		--admin-listen "127.0.0.1:$a" ${config[$n]:+--config "${config[$n]}"} >"$WORK/$n/edge.log" 2>&1 &
	local pid=$! dls=() peak=0 c f st=0 r
	echo "$pid" >"$WORK/$n/edge.pid"
	up "http://$H:$h"
	for ((c = 0; c < CLIENTS; c++)); do
		f=${burst[$n,$c]}
		[ "$kind" = same ] && f=${burst[$n,0]}
		"${NS[@]}" "$WORK/$n/xet" download --endpoint "http://$H:$h" --token "${rtok[$n]}" --hash "$f" \
			--size $((BURST_MB << 20)) -o - >/dev/null 2>"$WORK/burst$c.err" &
		dls+=($!)
	done
	local t0
	t0=$(date +%s.%N)
	while :; do
		r=$(rss "$pid")
		[ "$r" -gt "$peak" ] && peak=$r
		local alive=0
		for d in "${dls[@]}"; do kill -0 "$d" 2>/dev/null && alive=1; done
		[ $alive = 1 ] || break
		sleep 0.2
	done
	for d in "${dls[@]}"; do wait "$d" || st=1; done
	[ $st = 0 ] || { log "a burst download failed"; cat "$WORK"/burst*.err >&2; exit 1; }
	local wall
	wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
	local egress
	egress=$(curl -s "http://127.0.0.1:$a/metrics" | awk '$1 == "xet_edge_origin_xorb_bytes_total" {print $2}')
	local after=""
	if [ "$kind" = different ]; then
		sleep 30
		after=" rss_30s_after_mb=$(rss "$pid")"
	fi
	echo "clients=$CLIENTS wall=$wall edge_peak_rss_mb=$peak edge_hwm_mb=$(hwm "$pid")$after origin_egress_per_file=$(awk -v e="$egress" -v s=$((BURST_MB << 20)) -v k="$kind" -v c="$CLIENTS" 'BEGIN {printf "%.3f", (k == "same") ? e / s : e / (s * c)}')"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

PIN=${PIN:-0} EDGE_PIN=()
cores=$(nproc) # before pinning: nproc then reports this shell's one core
[[ $PIN == 0 || $PIN == 1 ]] || { log "PIN=$PIN: want 0 or 1"; exit 1; }
if [ "$PIN" = 1 ]; then
	[ "$cores" -ge 2 ] || { log "PIN=1 needs 2 cores or more"; exit 1; }
	# This shell (so every client it starts) and every server started above, all their threads.
	taskset -pc 0 $$ >/dev/null
	for p in "${pids[@]}"; do taskset -apc 0 "$p" >/dev/null; done
	EDGE_PIN=(taskset -c 1)
fi
log "machine: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; ${SIZE_MB} MiB; $ROUNDS rounds; revs: ${revs[*]}; delay client ${CLIENT_DELAY_MS} ms, origin ${ORIGIN_DELAY_MS} ms each way; client link ${LINK_MBIT} Mbit/s (0: loopback); edge pinned to its own core: $PIN"
out=$WORK/rounds.txt
: >"$out"
names=()
for ((j = 0; j < ${#revs[@]}; j++)); do names+=("r$j"); done
# settle: the cold edges' data directories of the last round go before the next one starts, and
# the inodes they free are left SETTLE_S seconds (default 65) to stop counting as recently
# deleted, so that the next round's fills do not pay for them. Keeps up to one round's edge
# directories on disk (4 × SIZE_MB per revision with PYTHON set). On ext4 without a journal an
# inode freed less than 60 s ago — 360 s while its inode table block is still dirty — is skipped
# by every file creation after a scan of the inode table, which cost a fill up to a quarter of
# its CPU (512 segment files per GiB; perf/BENCHMARKS.md, 2026-12-04, "a harness artefact"):
# sync writes those blocks (and the last round's dirty fills) out first, so that 65 s suffice.
# Before the first round too: the test suite, an earlier run or this run's setup may have
# deleted files just before.
settle() {
	rm -rf "$WORK"/r*/edge.*
	sync
	sleep "${SETTLE_S:-65}"
}
for r in $(seq "$ROUNDS"); do
	settle
	order=("${names[@]}")
	if [ $((r % 2)) -eq 0 ]; then
		order=()
		for ((j = ${#names[@]} - 1; j >= 0; j--)); do order+=("${names[$j]}"); done
	fi
	for n in "${order[@]}"; do
		echo "== round $r $n $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
		m=$(download "$n" "${corigin[$n]}") || exit 1; echo "$n origin $m"
		m=$(cold "$n" plain) || exit 1; echo "$n edge-plain $m"
		m=$(cold "$n" tls) || exit 1; echo "$n edge-tls $m"
		if [ "$ORIGIN_TLS" = 1 ]; then m=$(TOKEN=${ttoken[$n]} download "$n" "${torigin[$n]}" --insecure) || exit 1; echo "$n origin-tls $m"; fi
		if [ -n "${PYTHON:-}" ]; then
			m=$(hfdownload "$n" "${corigin[$n]}") || exit 1; echo "$n hf-origin $m"
			m=$(cold "$n" plain hf) || exit 1; echo "$n hf-edge-plain $m"
			m=$(cold "$n" tls hf) || exit 1; echo "$n hf-edge-tls $m"
			if [ "$ORIGIN_TLS" = 1 ]; then m=$(TOKEN=${ttoken[$n]} hfdownload "$n" "${torigin[$n]}" "$WORK/otls.crt") || exit 1; echo "$n hf-origin-tls $m"; fi
		fi
	done | tee -a "$out"
done

if [ "$CLIENTS" -gt 0 ]; then
	for n in "${names[@]}"; do
		echo "== burst $n $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
		m=$(burst "$n" different) || exit 1; echo "$n burst-different $m"
		m=$(burst "$n" same) || exit 1; echo "$n burst-same $m"
	done | tee -a "$WORK/bursts.txt"
fi

echo "== medians over $ROUNDS rounds (edge/origin ratios per revision)"
for ((j = 0; j < ${#revs[@]}; j++)); do echo "r$j = ${revs[$j]}"; done
awk '
function add(key, v) { n[key]++; vals[key, n[key]] = v; if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
function median(key,   m, a, b, t, s) {
	m = n[key]
	if (!m) return -1
	for (a = 1; a <= m; a++) s[a] = vals[key, a]
	for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (s[b] < s[a]) { t = s[a]; s[a] = s[b]; s[b] = t }
	return (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
}
$2 ~ /^(origin|edge-|hf-)/ {
	for (f = 3; f <= NF; f++) { split($f, kv, "="); add($1 " " $2 " " kv[1], kv[2] + 0) }
	revs[$1] = 1
}
END {
	for (j = 1; j <= k; j++) printf "%-28s %9.3f\n", order[j], median(order[j])
	for (r in revs) for (p = 1; p <= 2; p++) {
		pr = (p == 1) ? "edge-plain" : "edge-tls"
		printf "%s %-10s wall/origin %.2f  ttfb/origin %.2f\n", r, pr,
			median(r " " pr " wall") / median(r " origin wall"), median(r " " pr " ttfb") / median(r " origin ttfb")
		if (n[r " hf-origin wall"])
			printf "%s hf-%-7s wall/origin %.2f\n", r, pr, median(r " hf-" pr " wall") / median(r " hf-origin wall")
	}
	for (r in revs) if (n[r " origin-tls wall"]) {
		printf "%s edge-tls   wall/origin-tls %.2f  ttfb/origin-tls %.2f\n", r,
			median(r " edge-tls wall") / median(r " origin-tls wall"), median(r " edge-tls ttfb") / median(r " origin-tls ttfb")
		if (n[r " hf-origin-tls wall"])
			printf "%s hf-edge-tls wall/origin-tls %.2f\n", r, median(r " hf-edge-tls wall") / median(r " hf-origin-tls wall")
	}
}' "$out"
