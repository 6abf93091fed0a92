// Prints, for each file given, the chunks and file hash computed by the upstream JavaScript
// implementation that @huggingface/hub uses for uploads (@huggingface/xetchunk-wasm), one JSON
// line per file:
//
//   {"path":"…","size":N,"file_hash":"…","chunks":[{"hash":"…","length":N},…]}
//
// Hashes are in the protocol string form. The file is fed to the chunker in pieces of
// --piece bytes (default 65536, the piece size of a Blob stream), the way the hub library feeds
// it: createChunker(64 KiB), nextBlock per piece, finalize, then fileHash over all chunks.
//
// The packages are looked up in node_modules beside this script, or else in the folder named by
// the environment variable XETCDN_TEST_NODE_DIR (the test environment's client install).
//
// Usage: node chunks.mjs [--piece N] [--versions] FILE...
import { createRequire } from "node:module";
import { openSync, readSync, closeSync, fstatSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";

// packageVersion finds the package.json of the package named name above the file entry.
function packageVersion(entry, name) {
  for (let dir = dirname(entry); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
      if (pkg.name === name) return pkg.version;
    } catch {
      // no package.json here: keep walking up
    }
  }
  return "unknown";
}

function loadUpstream() {
  const bases = [import.meta.url];
  if (process.env.XETCDN_TEST_NODE_DIR) {
    bases.push(join(process.env.XETCDN_TEST_NODE_DIR, "package.json"));
  }
  const errors = [];
  for (const base of bases) {
    try {
      const req = createRequire(base);
      // Resolve the chunker the way the hub package itself does, from the hub's location.
      const hubEntry = req.resolve("@huggingface/hub");
      const hubReq = createRequire(hubEntry);
      return {
        xet: hubReq("@huggingface/xetchunk-wasm"),
        hubVersion: packageVersion(hubEntry, "@huggingface/hub"),
        xetVersion: packageVersion(hubReq.resolve("@huggingface/xetchunk-wasm"), "@huggingface/xetchunk-wasm"),
      };
    } catch (err) {
      errors.push(`${base}: ${err.message}`);
    }
  }
  throw new Error("cannot load @huggingface/hub and @huggingface/xetchunk-wasm (run install.sh):\n" + errors.join("\n"));
}

function parseArgs(argv) {
  const opts = { piece: 65536, versions: false, files: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--piece") {
      opts.piece = Number(argv[++i]);
      if (!Number.isInteger(opts.piece) || opts.piece < 1) throw new Error(`bad --piece ${argv[i]}`);
    } else if (a === "--versions") {
      opts.versions = true;
    } else {
      opts.files.push(a);
    }
  }
  return opts;
}

function chunkFile(xet, path, piece) {
  const chunker = xet.createChunker(64 * 1024);
  const chunks = [];
  const fd = openSync(path, "r");
  let size = 0;
  try {
    const total = fstatSync(fd).size;
    const buf = new Uint8Array(piece);
    for (;;) {
      const n = readSync(fd, buf, 0, piece, null);
      if (n === 0) break;
      size += n;
      // nextBlock may keep a reference to its input, so give it a copy it owns.
      for (const c of xet.nextBlock(chunker, buf.slice(0, n))) chunks.push(c);
    }
    if (size !== total) throw new Error(`${path}: read ${size} of ${total} bytes`);
  } finally {
    closeSync(fd);
  }
  const last = xet.finalize(chunker);
  if (last) chunks.push(last);
  return {
    path,
    size,
    file_hash: xet.hashToHex(xet.fileHash(chunks)),
    chunks: chunks.map((c) => ({ hash: xet.hashToHex(c.hash), length: c.length })),
  };
}

const opts = parseArgs(process.argv.slice(2));
const up = loadUpstream();
if (opts.versions) {
  process.stdout.write(JSON.stringify({ hub: up.hubVersion, xetchunk: up.xetVersion }) + "\n");
}
for (const f of opts.files) {
  process.stdout.write(JSON.stringify(chunkFile(up.xet, f, opts.piece)) + "\n");
}
