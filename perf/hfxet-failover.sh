#!/usr/bin/env bash
# hfxet-failover.sh: how stock hf_xet behaves when the edge its token route named is killed
# mid-download (issue 12 item 3), next to the Go client (`xet download --token-url`). Starts an
# origin and two registering edges on loopback, uploads a random file, then for each client:
# downloads through the token route, SIGKILLs the named edge once a third has arrived, restarts
# it afterwards (KILL_AFTER seconds into the download, default 4: about a third of it at the
# default RATE). Prints one JSON line per client. Needs bin/ built (make build) and
# XETCDN_TEST_PYTHON (a python with hf_xet; /work/main/.cache/testenv.sh sets it).
#   perf/hfxet-failover.sh [SIZE_MIB]
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/bin}
SIZE_MIB=${1:-48}
PY=${XETCDN_TEST_PYTHON:?set XETCDN_TEST_PYTHON to a python with hf_xet}
T=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
O=127.0.0.1:$(port)
"$BIN/xet-origin" --data-dir "$T/o" --listen "$O" 2>"$T/origin.log" & pids+=($!)
until curl -sf "http://$O/healthz" >/dev/null; do sleep 0.1; done
tok() { "$BIN/xet-origin" token --data-dir "$T/o" --scope "$1" --access "$2"; }
REPO=models/acme/failover
ET=$(tok edge edge)
# Each edge sits behind a bandwidth-limited TCP relay (RATE bytes/s per connection, so a
# download lasts long enough to be cut); the edge's public URL is the relay's. Killing the edge
# makes the relay reset its connections and refuse new ones: the edge stops answering.
RATE=${RATE:-$((4 << 20))}
cat >"$T/relay.py" <<'PY'
import asyncio, sys, time
listen, target, rate = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
async def pipe(r, w, limit):
    try:
        while data := await r.read(65536):
            w.write(data); await w.drain()
            if limit: await asyncio.sleep(len(data) / rate)
    except Exception: pass
    finally:
        try: w.transport.abort()
        except Exception: pass
async def handle(cr, cw):
    try: br, bw = await asyncio.open_connection("127.0.0.1", target)
    except Exception: cw.transport.abort(); return
    await asyncio.gather(pipe(cr, bw, False), pipe(br, cw, True))
async def main():
    s = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with s: await s.serve_forever()
asyncio.run(main())
PY
declare -A EPID EURL
start_edge() { # name
	local h=127.0.0.1:$(port) s=127.0.0.1:$(port) r
	r=$(port)
	python3 "$T/relay.py" "$r" "${h#*:}" "$RATE" & pids+=($!)
	"$BIN/xet-edge" --origin "http://$O" --origin-token "$ET" --data-dir "$T/$1" --listen "$s" \
		--http-listen "$h" --public-url "http://127.0.0.1:$r" 2>>"$T/$1.log" & EPID[$1]=$!
	pids+=($!)
	EURL[$1]=http://127.0.0.1:$r
	until curl -sf "http://$h/healthz" >/dev/null; do sleep 0.1; done
}
start_edge e1; start_edge e2
head -c $((SIZE_MIB << 20)) /dev/urandom >"$T/file"
H=$("$BIN/xet" upload --endpoint "http://$O" --token "$(tok $REPO write)" "$T/file" | python3 -c 'import json,sys; print(json.load(sys.stdin)["file_hash"])')
READ=$(tok $REPO read)
TOKEN_URL=http://$O/api/$REPO/xet-read-token/main
named() { curl -sf -H "Authorization: Bearer $READ" "$TOKEN_URL" | python3 -c 'import json,sys; print(json.load(sys.stdin)["casUrl"])'; }
until [[ $(named) == "${EURL[e1]}" || $(named) == "${EURL[e2]}" ]]; do sleep 0.2; done
victim() { local n; n=$(named); for e in e1 e2; do if [[ ${EURL[$e]} == "$n" ]]; then echo "$e"; fi; done; }
size=$((SIZE_MIB << 20))

# hf_xet: a download stream group from the token route; the edge is killed at a third. On an
# error, a new group (a new token request) is tried, as a user re-running the download would.
v=$(victim)
KILL_AFTER=${KILL_AFTER:-4}
"$PY" - "$TOKEN_URL" "$READ" "$H" "$size" "${EPID[$v]}" "$KILL_AFTER" <<'PY'
import json, os, signal, sys, threading, time
import hf_xet
url, tok, h, size, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
after = float(sys.argv[6])
kw = dict(token_refresh_url=url, token_refresh_headers={"Authorization": f"Bearer {tok}"})
t0 = time.monotonic(); killed = None; got = 0; tries = 0; err = None
def kill():
    global killed
    os.kill(pid, signal.SIGKILL); killed = time.monotonic()
threading.Timer(after, kill).start()
while got < size and tries < 3:
    tries += 1
    try:
        g = hf_xet.XetSession().new_download_stream_group(**kw)
        for piece in g.download_stream(hf_xet.XetFileInfo(h, size), start=got, end=size):
            got += len(piece)
        g.finish()
    except Exception as e:  # noqa: BLE001 - report whatever hf_xet raised
        err = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps({"client": "hf_xet", "attempt": tries, "error": err,
                          "seconds_after_kill": round(time.monotonic() - killed, 2) if killed else None}), flush=True)
done = time.monotonic()
print(json.dumps({"client": "hf_xet", "bytes": got, "size": size, "attempts": tries,
                  "seconds_after_kill": round(done - killed, 2) if killed else None,
                  "seconds": round(done - t0, 2)}), flush=True)
PY
start_edge "$v"   # back, for the next client (same name, new address)
until [[ -n $(victim) ]]; do sleep 0.2; done

# Go client: xet download --token-url, the named edge killed KILL_AFTER seconds in.
v=$(victim)
start=$(date +%s.%N)
"$BIN/xet" download --token-url "$TOKEN_URL" --token "$READ" --hash "$H" --size "$size" -o "$T/out" --concurrency 2 >"$T/go.json" 2>"$T/go.err" &
dl=$!
sleep "$KILL_AFTER"
kill -9 "${EPID[$v]}"
killed=$(date +%s.%N)
status=0; wait "$dl" || status=$?
end=$(date +%s.%N)
same=$(cmp -s "$T/file" "$T/out" && echo True || echo False)
python3 -c "import json; print(json.dumps({'client':'xet (Go)','status':$status,'byte_exact':$same,'seconds_after_kill':round($end-$killed,2),'seconds':round($end-$start,2)}))"
