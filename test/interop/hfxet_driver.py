#!/usr/bin/env python3
"""Drive the stock hf_xet wheel (1.8.0) against an xetcdn origin or edge.

Subcommands (every failure exits non-zero with one "hfxet_driver: error: ..." line on stderr):

  upload   --endpoint URL --token TOK [--hub URL --repo models/acme/x] FILE...
           Uploads the files in one upload commit and prints one JSON line per file:
           {"path", "file_hash", "size", "sha256", "dedup": {...client dedup metrics...}}
           followed by nothing else on stdout. With --hub/--repo the CAS token is
           fetched (and refreshed) from the Hub-compatible token route
           {hub}/api/{type}s/{ns}/{name}/xet-write-token/main with "Bearer TOK";
           otherwise TOK is used as the CAS token directly.

  download --endpoint URL --token TOK --hash H --size N [--range A-B] -o OUT
           Downloads file H (N bytes) to OUT. Without --range it uses a file
           download group (what huggingface_hub uses); with --range A-B (inclusive
           byte offsets, like an HTTP Range) it uses a download stream group with
           start=A, end=B+1 and writes exactly those bytes. --range may be repeated:
           the ranges are read through one stream group into OUT.0, OUT.1, ...
           --stream forces the stream path for a whole-file download. Prints one
           JSON line {"file_hash", "bytes", "path"} per file written.

The token's expiry is taken from the JWT "exp" claim when it has one. Environment
variables HF_XET_* (retry policy, cache directory) are honoured by hf_xet itself.
"""

import argparse
import base64
import json
import os
import sys
import time


def fail(msg):
    print(f"hfxet_driver: error: {msg}", file=sys.stderr)
    sys.exit(1)


def token_expiry(token):
    """Returns the JWT exp claim, or one hour from now for opaque tokens."""
    parts = token.split(".")
    if len(parts) == 3:
        try:
            payload = parts[1] + "=" * (-len(parts[1]) % 4)
            exp = json.loads(base64.urlsafe_b64decode(payload)).get("exp")
            if isinstance(exp, (int, float)) and exp > 0:
                return int(exp)
        except (ValueError, json.JSONDecodeError):
            pass
    return int(time.time()) + 3600


def parse_range(text, size):
    try:
        a, b = text.split("-", 1)
        start, end = int(a), int(b)
    except ValueError:
        fail(f"bad --range {text!r}: want A-B (inclusive byte offsets)")
    if start < 0 or end < start or end >= size:
        fail(f"bad --range {text!r} for a file of {size} bytes")
    return start, end + 1


def auth_kwargs(args, access):
    """Keyword arguments that point an hf_xet group at the server under test."""
    kw = {"endpoint": args.endpoint}
    if args.hub:
        if not args.repo:
            fail("--hub needs --repo (e.g. models/acme/x)")
        kind, _, name = args.repo.partition("/")
        if kind not in ("models", "datasets", "spaces") or name.count("/") != 1:
            fail(f"bad --repo {args.repo!r}: want models|datasets|spaces/NS/NAME")
        kw["token_refresh_url"] = f"{args.hub.rstrip('/')}/api/{kind}/{name}/xet-{access}-token/main"
        kw["token_refresh_headers"] = {"Authorization": f"Bearer {args.token}"}
    else:
        kw["token"] = args.token
        kw["token_expiry_unix_secs"] = token_expiry(args.token)
    return kw


def metrics_dict(m):
    if m is None:
        return None
    names = (
        "total_bytes", "new_bytes", "deduped_bytes", "deduped_bytes_by_global_dedup",
        "total_chunks", "new_chunks", "deduped_chunks", "deduped_chunks_by_global_dedup",
        "xorb_bytes_uploaded", "shard_bytes_uploaded", "total_bytes_uploaded",
    )
    return {n: getattr(m, n) for n in names if hasattr(m, n)}


def cmd_upload(args, hf_xet):
    for p in args.files:
        if not os.path.isfile(p):
            fail(f"{p}: not a regular file")
    session = hf_xet.XetSession()
    commit = session.new_upload_commit(**auth_kwargs(args, "write"))
    handles = [(p, commit.start_upload_file(p)) for p in args.files]
    report = commit.wait_to_finish()
    for p, h in handles:
        meta = h.result()
        info = meta.xet_info
        line = {
            "path": p,
            "file_hash": info.hash,
            "size": info.file_size,
            "sha256": info.sha256,
            "dedup": metrics_dict(meta.dedup_metrics),
        }
        if info.file_size != os.path.getsize(p):
            fail(f"{p}: client reports size {info.file_size}, file has {os.path.getsize(p)}")
        print(json.dumps(line), flush=True)
    total = metrics_dict(report.dedup_metrics)
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"dedup": total}, f)


def cmd_download(args, hf_xet):
    if args.size < 0:
        fail("--size must be >= 0")
    info = hf_xet.XetFileInfo(args.hash, args.size)
    out = os.path.abspath(args.output)
    if args.range is None and not args.stream:
        group = hf_xet.XetSession().new_file_download_group(**auth_kwargs(args, "read"))
        group.start_download_file(info, out)
        group.wait_to_finish()
        n = os.path.getsize(out)
        if n != args.size:
            fail(f"downloaded {n} bytes, expected {args.size}")
        print(json.dumps({"file_hash": args.hash, "bytes": n, "path": out}), flush=True)
        return
    spans = [(0, args.size)] if args.range is None else [parse_range(r, args.size) for r in args.range]
    outs = [out] if len(spans) == 1 else [f"{out}.{i}" for i in range(len(spans))]
    group = hf_xet.XetSession().new_download_stream_group(**auth_kwargs(args, "read"))
    for (start, end), path in zip(spans, outs):
        n = 0
        with open(path, "wb") as f:
            for piece in group.download_stream(info, start=start, end=end):
                f.write(piece)
                n += len(piece)
        if n != end - start:
            fail(f"stream {start}-{end - 1} gave {n} bytes, expected {end - start}")
        print(json.dumps({"file_hash": args.hash, "bytes": n, "path": path}), flush=True)
    group.finish()


def main():
    ap = argparse.ArgumentParser(prog="hfxet_driver")
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--endpoint", required=True, help="CAS base URL (origin or edge)")
    common.add_argument("--token", required=True, help="CAS token, or Hub bearer with --hub")
    common.add_argument("--hub", help="base URL of the Hub-compatible token route")
    common.add_argument("--repo", help="models|datasets|spaces/NS/NAME, with --hub")
    up = sub.add_parser("upload", parents=[common])
    up.add_argument("--report", help="write the commit's aggregate dedup metrics here (JSON)")
    up.add_argument("files", nargs="+")
    down = sub.add_parser("download", parents=[common])
    down.add_argument("--hash", required=True)
    down.add_argument("--size", required=True, type=int)
    down.add_argument("--range", action="append",
                      help="A-B, inclusive byte offsets; repeat for several (written to OUT.0, OUT.1, ...)")
    down.add_argument("--stream", action="store_true", help="use the stream API for a whole file")
    down.add_argument("-o", "--output", required=True)
    args = ap.parse_args()

    try:
        import hf_xet
    except ImportError as e:
        fail(f"cannot import hf_xet: {e}")
    try:
        {"upload": cmd_upload, "download": cmd_download}[args.cmd](args, hf_xet)
    except SystemExit:
        raise
    except BaseException as e:  # hf_xet raises RuntimeError/ValueError/its own types
        fail(f"{args.cmd}: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
