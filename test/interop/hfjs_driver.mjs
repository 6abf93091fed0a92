#!/usr/bin/env node
// Drive the stock huggingface.js client (@huggingface/hub 2.17.5) against an xetcdn origin or edge.
//
//   upload   --endpoint URL --token TOK [--hub URL --repo models/acme/x] FILE...
//   download --endpoint URL --token TOK --hash H --size N [--range A-B] -o OUT [--hub URL --repo R]
//
// Upload runs the library's real commit() path, one commit per file. commit() talks to Hub routes
// that xetcdn does not have (preupload, LFS batch, commit); a small shim passed as the library's
// `fetch` answers exactly those three locally. Everything else (the xet-write-token route and every
// CAS call) goes to the server under test unchanged: the shim never answers a CAS request itself.
// Without --hub the LFS batch answer hands the client TOK as its CAS token (as the Hub does in the
// X-Xet-Access-Token header); with --hub it leaves the token out, so the client fetches one from
// {hub}/api/{type}s/{ns}/{name}/xet-write-token/{rev} and the shim adds "Authorization: Bearer TOK"
// to that one request (the library insists on hf_-prefixed Hub tokens, which xetcdn does not mint).
// The file's xet hash is read from the shard the client POSTs, the same way the Hub learns it.
// Prints one JSON line per file: {path, file_hash, size, sha256, xorb_bytes_posted, shard_bytes_posted}.
//
// Download uses XetBlob (the library's xet reader, exported as __internal_XetBlob), whole or
// sliced; --range A-B is inclusive, like an HTTP Range, and may be repeated: the slices of one
// XetBlob are written to OUT.0, OUT.1, ... Prints {file_hash, bytes, path} per file written.
// Any failure: exit 1 with one "hfjs_driver: error: ..." line on stderr.

import { open, stat } from "node:fs/promises";
import { pathToFileURL } from "node:url";
import { basename, resolve } from "node:path";
import { parseArgs } from "node:util";
import { commit, __internal_XetBlob as XetBlob } from "@huggingface/hub";

function fail(msg) {
	process.stderr.write(`hfjs_driver: error: ${msg}\n`);
	process.exit(1);
}

function tokenExpiry(token) {
	const parts = token.split(".");
	if (parts.length === 3) {
		try {
			const exp = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8")).exp;
			if (typeof exp === "number" && exp > 0) {
				return Math.floor(exp);
			}
		} catch {
			// opaque token
		}
	}
	return Math.floor(Date.now() / 1000) + 3600;
}

// parseRepo turns "models/acme/x" (or "acme/x") into the route form and the library's designation.
function parseRepo(text) {
	const m = /^(?:(models|datasets|spaces)\/)?([^/]+)\/([^/]+)$/.exec(text);
	if (!m) {
		fail(`bad --repo ${JSON.stringify(text)}: want models|datasets|spaces/NS/NAME`);
	}
	const kind = m[1] ?? "models";
	const name = `${m[2]}/${m[3]}`;
	return { kind, name, designation: kind === "models" ? name : `${kind}/${name}` };
}

function hexOfShardHash(bytes, off) {
	// A hash's string form prints each of its four little-endian u64 words as 16 hex digits.
	let s = "";
	for (let w = 0; w < 4; w++) {
		for (let i = 7; i >= 0; i--) {
			s += bytes[off + w * 8 + i].toString(16).padStart(2, "0");
		}
	}
	return s;
}

// shardFileHashes lists the file hashes in a shard's file-info section (byte layout: docs/protocol.md §8).
function shardFileHashes(buf) {
	const b = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
	const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
	const out = [];
	let off = 48;
	while (off + 48 <= b.length) {
		if (b.subarray(off, off + 32).every((x) => x === 0xff)) {
			return out;
		}
		const flags = view.getUint32(off + 32, true);
		const n = view.getUint32(off + 36, true);
		out.push(hexOfShardHash(b, off));
		off += 48 + n * 48;
		if (flags & 0x80000000) off += n * 48;
		if (flags & 0x40000000) off += 48;
	}
	throw new Error("shard file-info section has no bookend");
}

async function bodyBytes(body) {
	if (body == null) return new Uint8Array();
	if (body instanceof Uint8Array) return body;
	if (body instanceof ArrayBuffer) return new Uint8Array(body);
	if (typeof body === "string") return new TextEncoder().encode(body);
	return new Uint8Array(await new Response(body).arrayBuffer());
}

function jsonResponse(obj) {
	return new Response(JSON.stringify(obj), { status: 200, headers: { "Content-Type": "application/json" } });
}

// makeHubShim returns a fetch that plays the Hub's non-CAS routes and records what the client sends.
function makeHubShim({ hub, token, endpoint, useTokenRoute }) {
	const rec = { fileHashes: [], sha256s: [], xorbBytes: 0, shardBytes: 0, requests: [] };
	const hubPath = new URL(hub).pathname.replace(/\/$/, "");
	const shim = async (input, init = {}) => {
		const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
		const method = (init.method ?? "GET").toUpperCase();
		const path = url.pathname.slice(url.pathname.startsWith(hubPath) ? hubPath.length : 0);
		const sameHost = url.origin === new URL(hub).origin;
		rec.requests.push(`${method} ${url.pathname}`);

		if (sameHost && method === "POST" && /^\/api\/(models|datasets|spaces)\/[^/]+\/[^/]+\/preupload\//.test(path)) {
			const req = JSON.parse(new TextDecoder().decode(await bodyBytes(init.body)));
			return jsonResponse({ files: req.files.map((f) => ({ path: f.path, uploadMode: "lfs" })) });
		}
		if (sameHost && method === "POST" && /\.git\/info\/lfs\/objects\/batch$/.test(path)) {
			const req = JSON.parse(new TextDecoder().decode(await bodyBytes(init.body)));
			const m = /^\/(?:(datasets|spaces)\/)?([^/]+\/[^/]+)\.git\//.exec(path);
			const kind = m[1] ?? "models";
			const header = { "X-Xet-Cas-Url": endpoint, "X-Xet-Session-Id": crypto.randomUUID() };
			if (!useTokenRoute) {
				header["X-Xet-Access-Token"] = token;
				header["X-Xet-Token-Expiration"] = String(tokenExpiry(token));
			}
			const href = `${hub.replace(/\/$/, "")}/api/${kind}/${m[2]}/xet-write-token/${encodeURIComponent(req.ref?.name ?? "main")}`;
			for (const o of req.objects) rec.sha256s.push(o.oid);
			return jsonResponse({
				transfer: "xet",
				objects: req.objects.map((o) => ({ oid: o.oid, size: o.size, actions: { upload: { href, header } } })),
			});
		}
		if (sameHost && method === "POST" && /^\/api\/(models|datasets|spaces)\/[^/]+\/[^/]+\/commit\//.test(path)) {
			return jsonResponse({ commitOid: "0".repeat(40), commitUrl: `${hub}/commit/0`, hookOutput: "" });
		}

		// Everything else goes to the server under test, untouched but for the Hub bearer on the
		// token route.
		let headers = init.headers;
		if (sameHost && /\/xet-(read|write)-token\//.test(path)) {
			headers = new Headers(init.headers);
			headers.set("Authorization", `Bearer ${token}`);
		}
		if (method === "POST" && /\/v1\/xorbs\/[^/]+\/[0-9a-f]{64}$/.test(url.pathname)) {
			rec.xorbBytes += (await bodyBytes(init.body)).byteLength;
		}
		if (method === "POST" && /\/v[12]\/shards$/.test(url.pathname)) {
			const body = await bodyBytes(init.body);
			rec.shardBytes += body.byteLength;
			rec.fileHashes.push(...shardFileHashes(body));
		}
		const { progressHint: _ignored, ...rest } = init;
		let resp;
		try {
			resp = await fetch(url, { ...rest, headers });
		} catch (e) {
			// XetBlob's stream reports only e.message; keep the cause visible.
			process.stderr.write(`hfjs_driver: ${method} ${url}: ${describe(e)}\n`);
			throw e;
		}
		if (!resp.ok) {
			process.stderr.write(`hfjs_driver: ${method} ${url} -> ${resp.status}\n`);
		}
		return resp;
	};
	return { shim, rec };
}

async function cmdUpload(opts, files) {
	const hub = opts.hub ?? opts.endpoint;
	const repo = parseRepo(opts.repo ?? "models/interop/driver");
	for (const f of files) {
		const st = await stat(f).catch((e) => fail(`${f}: ${e.message}`));
		if (!st.isFile()) fail(`${f}: not a regular file`);
		const { shim, rec } = makeHubShim({
			hub,
			token: opts.token,
			endpoint: opts.endpoint,
			useTokenRoute: opts.hub !== undefined,
		});
		await commit({
			repo: repo.designation,
			hubUrl: hub,
			fetch: shim,
			title: `interop upload of ${basename(f)}`,
			operations: [{ operation: "addOrUpdate", path: basename(f), content: pathToFileURL(resolve(f)) }],
		});
		const unique = [...new Set(rec.fileHashes)];
		if (unique.length !== 1) {
			fail(`${f}: expected the client's shards to register exactly one file, saw ${JSON.stringify(unique)} ` +
				`(requests: ${rec.requests.join(", ")})`);
		}
		process.stdout.write(
			JSON.stringify({
				path: f,
				file_hash: unique[0],
				size: st.size,
				sha256: rec.sha256s[0] ?? null,
				xorb_bytes_posted: rec.xorbBytes,
				shard_bytes_posted: rec.shardBytes,
			}) + "\n",
		);
	}
}

async function cmdDownload(opts) {
	for (const k of ["hash", "size", "output"]) {
		if (opts[k] === undefined) fail(`download needs --${k}`);
	}
	const size = Number(opts.size);
	if (!Number.isSafeInteger(size) || size < 0) fail(`bad --size ${opts.size}`);
	if (!/^[0-9a-f]{64}$/.test(opts.hash)) fail(`bad --hash ${opts.hash}`);
	const spans = (opts.range ?? [`0-${size - 1}`]).map((r) => {
		const m = /^(\d+)-(\d+)$/.exec(r);
		if (opts.range !== undefined && (!m || Number(m[2]) < Number(m[1]) || Number(m[2]) >= size)) {
			fail(`bad --range ${r} for a file of ${size} bytes (want A-B, inclusive)`);
		}
		return opts.range === undefined ? [0, size] : [Number(m[1]), Number(m[2]) + 1];
	});
	const repo = parseRepo(opts.repo ?? "models/interop/driver");
	const hub = (opts.hub ?? opts.endpoint).replace(/\/$/, "");
	const refreshUrl = `${hub}/api/${repo.kind}/${repo.name}/xet-read-token/main`;
	const { shim } = makeHubShim({ hub, token: opts.token, endpoint: opts.endpoint, useTokenRoute: true });
	const blob = new XetBlob({
		hash: opts.hash,
		size,
		refreshUrl,
		fetch: shim,
		// With --hub the client asks the token route (and uses the casUrl it answers); without,
		// it is handed TOK and --endpoint directly, as the Hub's resolve headers would.
		...(opts.hub === undefined && {
			readToken: { accessToken: opts.token, casUrl: opts.endpoint.replace(/\/$/, ""), exp: tokenExpiry(opts.token) },
		}),
	});
	const base = resolve(opts.output);
	for (const [i, [start, end]] of spans.entries()) {
		const part = start === 0 && end === size ? blob : blob.slice(start, end);
		const out = spans.length === 1 ? base : `${base}.${i}`;
		let n = 0;
		const fh = await open(out, "w");
		try {
			// Read the web stream directly: node's stream adapters drop the error's cause.
			const reader = part.stream().getReader();
			for (;;) {
				const { done, value } = await reader.read();
				if (done) break;
				await fh.write(value);
				n += value.byteLength;
			}
		} finally {
			await fh.close();
		}
		if (n !== end - start) fail(`range ${start}-${end - 1}: got ${n} bytes, expected ${end - start}`);
		process.stdout.write(JSON.stringify({ file_hash: opts.hash, bytes: n, path: out }) + "\n");
	}
}

async function main() {
	const [cmd, ...rest] = process.argv.slice(2);
	const { values: opts, positionals } = parseArgs({
		args: rest,
		allowPositionals: true,
		options: {
			endpoint: { type: "string" },
			token: { type: "string" },
			hub: { type: "string" },
			repo: { type: "string" },
			hash: { type: "string" },
			size: { type: "string" },
			range: { type: "string", multiple: true },
			output: { type: "string", short: "o" },
		},
	});
	if (!opts.endpoint || !opts.token) fail("--endpoint and --token are required");
	if (cmd === "upload") {
		if (positionals.length === 0) fail("upload needs at least one FILE");
		await cmdUpload(opts, positionals);
	} else if (cmd === "download") {
		if (positionals.length !== 0) fail(`unexpected arguments ${positionals.join(" ")}`);
		await cmdDownload(opts);
	} else {
		fail("usage: hfjs_driver.mjs upload|download --endpoint URL --token TOK ...");
	}
}

// describe flattens an error and its chain of causes into one line.
function describe(e) {
	const parts = [];
	for (let c = e, depth = 0; c && depth < 5; c = c.cause, depth++) {
		parts.push(c instanceof Error ? `${c.name}: ${c.message}` : String(c));
	}
	return parts.join(" <- ");
}

main().catch((e) => fail(describe(e)));
