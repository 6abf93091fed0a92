package shard

import (
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// GlobalDedupModulus: a chunk whose hash satisfies h % GlobalDedupModulus == 0 is eligible for
// global dedup (§8.6).
const GlobalDedupModulus = 1024

// File anchors: xetcdn's addition to the global-dedup index (docs/protocol.md §8.6, [xetcdn]).
// The origin also indexes, per registered file, the chunks AnchorPicker names: the file's first
// FileAnchors chunks with hash h % AnchorModulus == 0 (one in 4 chunks, about every 256 KiB),
// and its first StrideAnchors chunks with h % StrideModulus == 0 (one in 64 chunks, about every
// 4 MiB; the stride anchors). xetcdn's Go client asks about the same chunks of a file until a
// dedup answer arrives for it. They find the previous version of a file whose first chunk
// changed, which the stock rules (the first chunk, then one chunk in 1,024: every ~64 MiB) do
// not for files of less than a few GiB; the stride anchors also when the change covers more
// than the first anchors' ~4 MiB, as a fine-tune that replaces a file's first tensor does, and
// when it changes the length of what follows (a resized embedding, a longer safetensors
// header): they are chosen by content, not by file offset.
const (
	AnchorModulus = 4
	FileAnchors   = 16
	StrideModulus = 64
	StrideAnchors = 64
)

// AnchorPicker tells, chunk by chunk in file order, which chunks of one file are its anchors:
// the first FileAnchors chunks with h % AnchorModulus == 0, and the first StrideAnchors chunks
// with h % StrideModulus == 0 (about the file's first 256 MiB). Both depend only on the chunks
// themselves and their order, so a new version picks the same anchors as the previous one in
// the chunks after a change, whether or not the change kept its length (only the count can
// shift: stride anchors inside the changed bytes take or free places of the 64). The zero
// value starts a file.
type AnchorPicker struct {
	first, stride int
}

// Next reports whether the file's next chunk (hash h) is an anchor.
func (p *AnchorPicker) Next(h hash.Hash) bool {
	if h.Mod(AnchorModulus) != 0 {
		return false
	}
	anchor := false
	if p.first < FileAnchors {
		p.first++
		anchor = true
	}
	if p.stride < StrideAnchors && h.Mod(StrideModulus) == 0 {
		p.stride++
		anchor = true
	}
	return anchor
}

// Done reports whether no later chunk of the file can be an anchor.
func (p *AnchorPicker) Done() bool {
	return p.first >= FileAnchors && p.stride >= StrideAnchors
}

// DedupAnswer builds the shard answering a global-dedup query (GET /v1/chunks/...; §8.6): an
// empty file section, the given xorbs, and a footer with the key and timestamps. Write it with
// AppendWithFooter.
//
// When key is non-zero every chunk hash is replaced by hash.HMAC(key, chunk hash), so the raw
// hashes are never disclosed; a zero key leaves them raw (what the upstream test server does).
// Xorb hashes, offsets, sizes and flags are copied unchanged; callers that want file-start chunks
// flagged (so the client chains further queries) run MarkFileStarts on the registering shard
// first. expiry must be a real future time: the client treats an expiry of 0 or in the past as
// already expired. Times before the Unix epoch are written as 0.
//
// The input is not modified; the result shares no memory with it.
func DedupAnswer(xorbs []Xorb, key hash.Hash, created, expiry time.Time) *Shard {
	s := &Shard{
		Footer: &Footer{HMACKey: key, CreatedAt: unixSeconds(created), KeyExpiry: unixSeconds(expiry)},
	}
	if len(xorbs) == 0 {
		return s
	}
	n := 0
	for i := range xorbs {
		n += len(xorbs[i].Chunks)
	}
	chunks := make([]XorbChunk, n)
	s.Xorbs = make([]Xorb, len(xorbs))
	var keyed *hash.KeyedHasher
	if !key.IsZero() {
		keyed = hash.NewKeyedHasher(key)
	}
	for i, x := range xorbs {
		dst := chunks[:len(x.Chunks):len(x.Chunks)]
		chunks = chunks[len(x.Chunks):]
		copy(dst, x.Chunks)
		if keyed != nil {
			for j := range dst {
				dst[j].Hash = keyed.Sum(dst[j].Hash[:]) // = hash.HMAC(key, …)
			}
		}
		x.Chunks = dst
		s.Xorbs[i] = x
	}
	return s
}

func unixSeconds(t time.Time) uint64 {
	if t.IsZero() || t.Unix() < 0 {
		return 0
	}
	return uint64(t.Unix())
}

// Expired reports whether the footer's key expiry is at or before now, as the client judges it
// (an expiry of 0 is always expired).
func (f *Footer) Expired(now time.Time) bool { return f.KeyExpiry <= unixSeconds(now) }

// KeyChunk returns the form chunk hash raw takes in s's xorb section: hash.HMAC(key, raw) when
// s has a footer with a non-zero HMAC key, raw otherwise.
func (s *Shard) KeyChunk(raw hash.Hash) hash.Hash {
	if s.Footer == nil || s.Footer.HMACKey.IsZero() {
		return raw
	}
	return hash.HMAC(s.Footer.HMACKey, raw)
}

// ChunkLoc locates a chunk in a shard's xorb section: s.Xorbs[Xorb].Chunks[Chunk].
type ChunkLoc struct {
	Xorb  int
	Chunk int
}

// FindChunk looks up a raw (un-keyed) chunk hash in s, typically a dedup answer: it keys the
// hash with KeyChunk and returns the first chunk carrying it. It scans the whole xorb section;
// a client looking up many hashes should build its own map of KeyChunk values.
func (s *Shard) FindChunk(raw hash.Hash) (ChunkLoc, bool) {
	want := s.KeyChunk(raw)
	for i := range s.Xorbs {
		for j := range s.Xorbs[i].Chunks {
			if s.Xorbs[i].Chunks[j].Hash == want {
				return ChunkLoc{Xorb: i, Chunk: j}, true
			}
		}
	}
	return ChunkLoc{}, false
}

// ChunkRef is one global-dedup-eligible chunk and the xorb of s that holds it.
type ChunkRef struct {
	Chunk hash.Hash
	Xorb  hash.Hash
	Index uint32 // chunk index within the xorb
}

// EligibleRefs lists the chunks of s's xorb section that are eligible for global dedup
// (§8.6): (a) hash % 1024 == 0, (b) flag bit 31 set, or (c) the first chunk of a file's first
// term, when that xorb is described in s. Chunks appear in section order; a chunk hash that
// occurs in several xorbs is listed once per xorb. Hashes are taken as stored (raw in uploads).
func EligibleRefs(s *Shard) []ChunkRef {
	starts := fileStarts(s)
	var out []ChunkRef
	for i := range s.Xorbs {
		x := &s.Xorbs[i]
		for j := range x.Chunks {
			c := &x.Chunks[j]
			if c.Hash.Mod(GlobalDedupModulus) == 0 || c.Flags&ChunkFlagGlobalDedup != 0 ||
				starts[chunkPos{i, j}] {
				out = append(out, ChunkRef{Chunk: c.Hash, Xorb: x.Hash, Index: uint32(j)})
			}
		}
	}
	return out
}

// EligibleChunks is EligibleRefs reduced to the distinct chunk hashes, in first-seen order.
func EligibleChunks(s *Shard) []hash.Hash {
	refs := EligibleRefs(s)
	seen := make(map[hash.Hash]struct{}, len(refs))
	out := make([]hash.Hash, 0, len(refs))
	for _, r := range refs {
		if _, dup := seen[r.Chunk]; !dup {
			seen[r.Chunk] = struct{}{}
			out = append(out, r.Chunk)
		}
	}
	return out
}

// MarkFileStarts sets ChunkFlagGlobalDedup on every chunk of s's xorb section that starts a
// file of s (rule (c) of EligibleRefs), as the upstream client does before serving a shard as a
// dedup answer. It modifies s in place.
func MarkFileStarts(s *Shard) {
	for p := range fileStarts(s) {
		s.Xorbs[p.xorb].Chunks[p.chunk].Flags |= ChunkFlagGlobalDedup
	}
}

type chunkPos struct{ xorb, chunk int }

// fileStarts returns the positions in s's xorb section of the first chunk of each file's first
// term. A term pointing at a xorb not in s, or past its chunks, contributes nothing.
func fileStarts(s *Shard) map[chunkPos]bool {
	if len(s.Files) == 0 || len(s.Xorbs) == 0 {
		return nil
	}
	idx := make(map[hash.Hash]int, len(s.Xorbs))
	for i := len(s.Xorbs) - 1; i >= 0; i-- { // first occurrence wins
		idx[s.Xorbs[i].Hash] = i
	}
	starts := make(map[chunkPos]bool)
	for i := range s.Files {
		if len(s.Files[i].Terms) == 0 {
			continue
		}
		t := s.Files[i].Terms[0]
		xi, ok := idx[t.Xorb]
		if ok && uint64(t.Start) < uint64(len(s.Xorbs[xi].Chunks)) {
			starts[chunkPos{xi, int(t.Start)}] = true
		}
	}
	return starts
}
