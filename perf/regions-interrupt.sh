#!/usr/bin/env bash
# regions-interrupt.sh — checks that an interrupted perf/regions.sh leaves nothing behind: starts
# a small run in its own session, sends SIGINT to its process group (as Ctrl-C does) once AT is printed on its log (default: the first round began), and
# then requires that the run failed (130, or 1 when a download the signal ended is seen first) and that no namespace of the run, no process it started
# and no work directory remain. Root, like regions.sh. BIN= as for regions.sh.
#   perf/regions-interrupt.sh [AT]       e.g. AT='warming edge-2' (during a download)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AT=${1:-round 1/}
LOG=$(mktemp /tmp/regions-interrupt.XXXXXX)
OUT=$(mktemp -d /tmp/regions-interrupt-out.XXXXXX)
trap 'rm -rf "$LOG" "$OUT"' EXIT
SIZE_MB=4 SHARDS=1 ROUNDS=1 HF=0 BENCHMARKS=0 OUT=$OUT setsid "$ROOT/perf/regions.sh" >"$LOG" 2>&1 &
pid=$!
for _ in $(seq 3000); do grep -q "$AT" "$LOG" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
grep -q "$AT" "$LOG" || { echo "FAIL: the run never printed '$AT'"; cat "$LOG"; exit 1; }
work=$(sed -n 's/^regions: work \([^,]*\),.*/\1/p' "$LOG")
prefix=xr$pid
kill -INT -- "-$pid" # the whole process group, as Ctrl-C in a terminal
st=0
wait "$pid" || st=$?
fail=0
# 130 from the INT trap, or 1 when a download that the signal ended is seen first (set -e).
[ "$st" != 0 ] || { echo "FAIL: exit status 0 after an interrupt"; fail=1; }
left=$(ip netns list | awk -v p="$prefix-" 'index($1, p) == 1 {print $1}')
[ -z "$left" ] || { echo "FAIL: namespaces left: $left"; fail=1; }
procs=$(pgrep -f -- "--data-dir $work/" || true)
[ -z "$work" ] || [ -z "$procs" ] || { echo "FAIL: processes left: $procs"; fail=1; }
[ -n "$work" ] && [ -e "$work" ] && { echo "FAIL: work directory $work left"; fail=1; }
[ -n "$work" ] || { echo "FAIL: the run did not print its work directory"; fail=1; }
[ $fail = 0 ] || { cat "$LOG"; exit 1; }
echo "ok: interrupted at '$AT': exit $st, no namespace $prefix-*, no process, $work removed"
