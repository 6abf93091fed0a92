// Package shard parses and writes Xet shards (docs/protocol.md §8): upload bodies (no footer, with
// verification entries and optional sha256 metadata) and global-dedup answers (empty file section,
// footer with expiry and HMAC key). It is a pure format package: no I/O, no logging, no
// package state; every function is safe for concurrent use on distinct values.
//
// A shard is a run of 48-byte records:
//
//	header        magic tag, version 2, footer_size (0 or 200)
//	file section  per file: header, terms, [verification entries], [sha256]; then a bookend
//	xorb section  per xorb: header, chunk entries; then a bookend
//	[tail]        lookup tables (full shards only; never written here)
//	[footer]      200 bytes when footer_size is 200
//
// Reading: Parse takes a whole body (at most MaxSize bytes) and returns a *Shard whose slices
// do not alias the body. Failures are *FormatError values wrapping ErrCorrupt or ErrTooLarge
// and naming the offset at fault. Parse checks structure only; whether terms match stored xorbs
// is the origin's business.
//
// Writing: AppendUpload produces the footer-less form hf_xet uploads; AppendWithFooter adds
// a footer without lookup tables, the form of global-dedup answers (and of huggingface.js
// uploads). Validate reports values the writers would encode but Parse would reject.
//
// Global dedup: EligibleChunks / EligibleRefs list the chunks of an uploaded shard that the
// origin indexes; DedupAnswer builds the answer to a chunk query, HMAC-keying chunk hashes when
// given a key; a client finds a raw chunk hash in an answer with FindChunk (or KeyChunk).
package shard
