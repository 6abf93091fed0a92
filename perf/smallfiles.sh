#!/usr/bin/env bash
# smallfiles.sh — small-file uploads with the stock hf_xet client: the origin's CPU against
# xet-core's reference server (local_cas_server) on the same files (issue 13; perf/README.md,
# "Small-file uploads against the reference server").
#
#   REFSERVER=/path/to/local_cas_server PYTHON=/path/to/python-with-hf_xet perf/smallfiles.sh
#
# Writes FILES (2,000) random files of 4-64 KiB (seeded: SEED), then for ROUNDS (3) rounds
# starts a fresh origin (embedded SQLite + local disk: the reference server also stores on local
# disk) and a fresh reference server, each on an empty data directory, and uploads all the files
# to each with one hf_xet.upload_files call (the order of the two alternates between rounds). It
# reads each server's user+system CPU time from /proc/PID/stat before and after the upload, and
# prints per round and as the median over the rounds: the server's CPU seconds, the client's
# wall time, and the origin ÷ reference CPU ratio. Everything it started is stopped and its
# temporary directory removed on success, failure or Ctrl-C (KEEP=1 keeps the directory).
#
# Environment: REFSERVER (required), PYTHON (default $XETCDN_TEST_PYTHON), FILES (2000), MIN_KB
# (4), MAX_KB (64), ROUNDS (3), SEED (13), PORT_BASE (31900; three ports from it must be free),
# OUT (perf/results/<UTC time>-smallfiles).
# BASE=REV adds an "origin-base" contender built from git revision REV (in a temporary
# worktree), measured in the same rounds, for before/after numbers on the same neighbours.
# PG=1 adds an "origin-pg" contender: the origin on Postgres + MinIO (the production shape; a
# fresh database and bucket per round, from $XETCDN_TEST_POSTGRES_DSN and XETCDN_TEST_S3_*,
# dropped afterwards); with BASE= too, an "origin-base-pg" contender runs REV's origin on
# Postgres + MinIO as well. The contenders' order rotates between rounds.
# UPLOADS=N (1) sends N uploads of different file sets (seeds SEED, SEED+1, …) to each fresh
# server per round, one after another, and reports the server's CPU and the client's wall time
# per upload (their sums ÷ N): a long-running server's cost, where what the first upload of a
# process pays once (fresh memory, first connections) is shared.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
UPLOADS=${UPLOADS:-1} FILES=${FILES:-2000} MIN_KB=${MIN_KB:-4} MAX_KB=${MAX_KB:-64} ROUNDS=${ROUNDS:-3} SEED=${SEED:-13} P=${PORT_BASE:-31900}
PY=${PYTHON:-${XETCDN_TEST_PYTHON:-}}
OUT=${OUT:-$ROOT/perf/results/$(date -u +%Y%m%dT%H%M%SZ)-smallfiles}
log() { printf 'smallfiles: %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

num() { [[ $2 =~ ^[0-9]+$ ]] || die "$1=$2: want a whole number"; }
num FILES "$FILES"; num MIN_KB "$MIN_KB"; num MAX_KB "$MAX_KB"; num ROUNDS "$ROUNDS"; num SEED "$SEED"; num UPLOADS "$UPLOADS"; num PORT_BASE "$P"
[ "$FILES" -ge 1 ] || die "FILES=$FILES: want >= 1"
[ "$UPLOADS" -ge 1 ] || die "UPLOADS=$UPLOADS: want >= 1"
[ "$ROUNDS" -ge 1 ] || die "ROUNDS=$ROUNDS: want >= 1"
[ "$MIN_KB" -ge 1 ] && [ "$MAX_KB" -ge "$MIN_KB" ] || die "MIN_KB=$MIN_KB MAX_KB=$MAX_KB: want 1 <= MIN_KB <= MAX_KB"
[ -n "${REFSERVER:-}" ] || die "REFSERVER: required (xet-core's local_cas_server binary)"
[ -x "$REFSERVER" ] || die "REFSERVER=$REFSERVER: not an executable file"
[ -n "$PY" ] || die "PYTHON: required (a python with hf_xet; or set XETCDN_TEST_PYTHON)"
"$PY" -c 'import hf_xet' 2>/dev/null || die "PYTHON=$PY: cannot import hf_xet"
for port in $P $((P + 1)) $((P + 2)); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is in use: set PORT_BASE to three free ports"; fi
done

if [ -n "${PG:-}" ]; then
	[ -n "${XETCDN_TEST_POSTGRES_DSN:-}" ] && [ -n "${XETCDN_TEST_S3_ENDPOINT:-}" ] ||
		die "PG=1: XETCDN_TEST_POSTGRES_DSN and XETCDN_TEST_S3_* are required (source the test services' env)"
fi
if [ -n "${BASE:-}" ]; then
	git -C "$ROOT" rev-parse --verify -q "$BASE^{commit}" >/dev/null || die "BASE=$BASE: not a git revision"
fi

WORK=$(mktemp -d /tmp/xetsmall.XXXXXX)
pids=()
dbs=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for d in "${dbs[@]}"; do
		psql -q "$XETCDN_TEST_POSTGRES_DSN" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || log "could not drop database $d"
		XETCDN_S3_ACCESS_KEY=$XETCDN_TEST_S3_ACCESS_KEY XETCDN_S3_SECRET_KEY=$XETCDN_TEST_S3_SECRET_KEY \
			"$WORK/bin/s3rmbucket" -endpoint "$XETCDN_TEST_S3_ENDPOINT" -bucket "${d//_/-}" || log "could not remove bucket ${d//_/-}"
	done
	[ -z "${BASE:-}" ] || git -C "$ROOT" worktree remove --force "$WORK/base" 2>/dev/null || true
	if [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else log "kept $WORK"; fi
	[ $rc -eq 0 ] || log "failed (exit $rc); partial results in $OUT"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$OUT" "$WORK/bin"
(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/xet-origin)
[ -z "${PG:-}" ] || (cd "$ROOT" && go build -o "$WORK/bin/" ./perf/cmd/s3rmbucket)
if [ -n "${BASE:-}" ]; then
	git -C "$ROOT" worktree add -q --detach "$WORK/base" "$BASE"
	mkdir -p "$WORK/basebin"
	(cd "$WORK/base" && go build -o "$WORK/basebin/" ./cmd/xet-origin)
fi
B=$WORK/bin
contenders="origin ${BASE:+origin-base} ${PG:+origin-pg} ${BASE:+${PG:+origin-base-pg}} reference"
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
	echo "machine: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(nproc) cores"
	echo "refserver: $REFSERVER"
	echo "hf_xet: $("$PY" -c 'import importlib.metadata as m; print(m.version("hf_xet"))')"
	echo "settings: FILES=$FILES MIN_KB=$MIN_KB MAX_KB=$MAX_KB ROUNDS=$ROUNDS SEED=$SEED UPLOADS=$UPLOADS BASE=${BASE:-} PG=${PG:-}"
	[ -z "${BASE:-}" ] || echo "base: $(git -C "$ROOT" rev-parse --short=12 "$BASE")"
} >"$OUT/run.txt"

for u in $(seq "$UPLOADS"); do
	mkdir -p "$WORK/files$u"
	"$PY" - "$WORK/files$u" "$FILES" "$MIN_KB" "$MAX_KB" "$((SEED + u - 1))" <<'EOF'
import os, random, sys
d, n, lo, hi, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
r = random.Random(seed)
for i in range(n):
    with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as f:
        f.write(r.randbytes(r.randint(lo << 10, hi << 10)))
EOF
	log "upload $u: $FILES files of $MIN_KB-$MAX_KB KiB ($(du -sk "$WORK/files$u" | cut -f1) KiB)"
done

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # clock ticks, user + system
TCK=$(getconf CLK_TCK)
up() {
	for _ in $(seq 600); do
		curl -s -o /dev/null --max-time 2 "$1" && return 0
		kill -0 "$2" 2>/dev/null || die "process $2 exited before $1 answered (logs in $WORK)"
		sleep 0.1
	done
	die "$1 did not answer within 60 s"
}
stop_pid() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# upload NAME URL TOKEN PID: one hf_xet.upload_files call of every file of each of the UPLOADS
# sets, one after another; prints "cpu_s wall_s" per upload.
upload() {
	local c0 c1 w u wsum=0
	c0=$(cpu "$4")
	for u in $(seq "$UPLOADS"); do
		# A fresh client cache per upload: hf_xet remembers what it uploaded (its shard cache)
		# and would otherwise skip the xorbs on the next, empty, server.
		rm -rf "$WORK/hf"
		w=$(HF_HOME=$WORK/hf HF_XET_CACHE=$WORK/hf/xet "$PY" - "$2" "$3" "$WORK/files$u" <<'EOF'
import os, sys, time, hf_xet
url, tok, d = sys.argv[1], sys.argv[2], sys.argv[3]
paths = sorted(os.path.join(d, f) for f in os.listdir(d))
t = time.monotonic()
infos = hf_xet.upload_files(paths, url, (tok, int(time.time()) + 3600), None, None, "model")
if len(infos) != len(paths):
    sys.exit(f"upload_files returned {len(infos)} infos for {len(paths)} files")
print(f"{time.monotonic() - t:.3f}")
EOF
		) || die "$1: hf_xet upload $u failed"
		wsum=$(awk -v a="$wsum" -v b="$w" 'BEGIN {print a + b}')
	done
	sleep 1 # the server's last writes after the answer
	c1=$(cpu "$4")
	awk -v a="$c0" -v b="$c1" -v t="$TCK" -v n="$UPLOADS" -v w="$wsum" 'BEGIN {printf "%.3f %.3f\n", (b - a) / t / n, w / n}'
}

read -ra cs <<<"$contenders"
for r in $(seq "$ROUNDS"); do
	# Rotate the order: round r starts with contender (r-1) mod n.
	order=""
	for i in $(seq 0 $((${#cs[@]} - 1))); do order="$order ${cs[$(((r - 1 + i) % ${#cs[@]}))]}"; done
	for who in $order; do
		if [ "$who" != reference ]; then
			bin=$B/xet-origin extra=() envs=()
			case $who in origin-base | origin-base-pg) bin=$WORK/basebin/xet-origin ;; esac
			if [ "$who" = origin-pg ] || [ "$who" = origin-base-pg ]; then
				db=xetsmall_$(basename "$WORK" | tr -dc 'a-zA-Z0-9' | tr 'A-Z' 'a-z')_$r${who#origin-pg}
				db=${db//-/_}
				psql -q "$XETCDN_TEST_POSTGRES_DSN" -c "CREATE DATABASE $db" >/dev/null
				dbs+=("$db")
				printf '{"index":{"driver":"postgres"},"objects":{"driver":"s3","endpoint":"%s","bucket":"%s"}}\n' \
					"$XETCDN_TEST_S3_ENDPOINT" "${db//_/-}" >"$WORK/pg$r.json"
				extra=(--config "$WORK/pg$r.json")
				envs=("XETCDN_POSTGRES_DSN=$(sed "s#/postgres?#/$db?#" <<<"$XETCDN_TEST_POSTGRES_DSN")"
					"XETCDN_S3_ACCESS_KEY=$XETCDN_TEST_S3_ACCESS_KEY" "XETCDN_S3_SECRET_KEY=$XETCDN_TEST_S3_SECRET_KEY")
			fi
			env "${envs[@]}" "$bin" --data-dir "$WORK/$who$r" --listen "127.0.0.1:$P" --admin-listen "127.0.0.1:$((P + 1))" "${extra[@]}" \
				>"$WORK/$who$r.log" 2>&1 &
			pid=$!
			pids+=($pid)
			up "http://127.0.0.1:$P/healthz" $pid
			tok=$("$bin" token --data-dir "$WORK/$who$r" --scope models/bench/small --access write --ttl 2h)
			url=http://127.0.0.1:$P
		else
			"$REFSERVER" --data-directory "$WORK/ref$r" --port $((P + 2)) >"$WORK/ref$r.log" 2>&1 &
			pid=$!
			pids+=($pid)
			up "http://127.0.0.1:$((P + 2))/health" $pid
			tok=unused
			url=http://127.0.0.1:$((P + 2))
		fi
		note="$(uptime | sed 's/.*load/load/')"
		read -r c w < <(upload "$who" "$url" "$tok" "$pid")
		echo "round $r $who cpu_s=$c wall_s=$w | $note" | tee -a "$OUT/rounds.txt"
		stop_pid "$pid"
	done
done
awk '
	{ split($4, c, "="); split($5, w, "="); cpu[$3] = cpu[$3] " " c[2]; wall[$3] = wall[$3] " " w[2] }
	function median(s,   a, n, i, j, t) {
		n = split(s, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		f = median(cpu["reference"])
		for (k in cpu) if (k != "reference") {
			o = median(cpu[k])
			printf "median %s cpu_s=%.3f wall_s=%.3f; reference cpu_s=%.3f wall_s=%.3f; %s/reference cpu %.2fx\n",
				k, o, median(wall[k]), f, median(wall["reference"]), k, (f > 0 ? o / f : 0)
		}
	}' "$OUT/rounds.txt" | sort | tee "$OUT/summary.txt"
log "results in $OUT"
