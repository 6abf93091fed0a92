package ingest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// progressEvery is how many terms pass between two validating progress reports.
const progressEvery = 4096

// check runs the checks of xet-protocol.md §8.5 on a parsed shard against the stored layouts,
// and the possession check (checkPossession) for scope, and returns the encoded file records
// to register.
//
// Error texts returned to the client name what the shard claims (file, term, xorb hash, the
// chunk range it gave) but never what is stored: no stored chunk count, size, or chunk hash,
// and no hash computed from stored chunks. A writer may probe any xorb hash, so every such
// detail would be a leak (docs/security.md, "What a hash grants").
func (s *Service) check(ctx context.Context, scope string, sh *shard.Shard, progress func(Progress)) ([]*recon.FileRecord, error) {
	var total, refs uint64
	for i := range sh.Files {
		f := &sh.Files[i]
		total += uint64(len(f.Terms))
		if len(f.Terms) > 0 && f.Verification == nil && !s.lenient {
			return nil, fmt.Errorf("%w: file %s has no verification entries", ErrRejected, f.Hash)
		}
		for _, t := range f.Terms {
			if t.End > t.Start {
				refs += uint64(t.End - t.Start)
			}
		}
	}
	if refs > uint64(s.maxChunkRefs) {
		return nil, fmt.Errorf("%w: terms cover %d chunks, limit %d", shard.ErrTooLarge, refs, s.maxChunkRefs)
	}
	progress(Progress{Stage: StageValidating, Total: total})
	layouts, err := s.layouts(ctx, sh)
	if err != nil {
		return nil, err
	}
	// Before any comparison with the stored layouts, so that a shard naming a single-chunk
	// xorb its scope does not hold learns nothing about it.
	if err := s.checkPossession(ctx, scope, sh, layouts); err != nil {
		return nil, err
	}
	for i := range sh.Xorbs {
		if err := checkXorbBlock(&sh.Xorbs[i], layouts[sh.Xorbs[i].Hash]); err != nil {
			return nil, err
		}
	}
	files := make([]*recon.FileRecord, 0, len(sh.Files))
	var verified uint64
	var leaves []hash.Leaf
	for i := range sh.Files {
		f := &sh.Files[i]
		rec, err := recon.NewFileRecord(*f, layouts)
		if err != nil {
			// recon's text names stored chunk counts and sizes: keep only the sentinel's
			// meaning, with what the shard itself said.
			return nil, termMismatch(f, firstBadTerm(f, layouts))
		}
		if leaves, err = checkFile(f, layouts, leaves[:0]); err != nil {
			return nil, err
		}
		files = append(files, rec)
		before := verified
		verified += uint64(len(f.Terms))
		if verified/progressEvery != before/progressEvery {
			progress(Progress{Stage: StageValidating, Verified: verified, Total: total})
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	progress(Progress{Stage: StageValidating, Verified: total, Total: total})
	return files, nil
}

// layouts loads the layout of every xorb the shard names, in batches; a missing one is
// ErrMissingXorb.
func (s *Service) layouts(ctx context.Context, sh *shard.Shard) (map[hash.Hash]*xorb.Layout, error) {
	seen := make(map[hash.Hash]struct{})
	var want []hash.Hash
	add := func(h hash.Hash) {
		if _, ok := seen[h]; !ok {
			seen[h] = struct{}{}
			want = append(want, h)
		}
	}
	for i := range sh.Xorbs {
		add(sh.Xorbs[i].Hash)
	}
	for i := range sh.Files {
		for _, t := range sh.Files[i].Terms {
			add(t.Xorb)
		}
	}
	out := make(map[hash.Hash]*xorb.Layout, len(want))
	for len(want) > 0 {
		batch := want[:min(layoutBatch, len(want))]
		want = want[len(batch):]
		got, err := s.idx.Layouts(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("load layouts: %w", err)
		}
		for _, h := range batch {
			l, ok := got[h]
			if !ok || l == nil {
				return nil, fmt.Errorf("%w: %s", ErrMissingXorb, h)
			}
			out[h] = l
		}
	}
	return out, nil
}

// checkPossession requires scope to hold every single-chunk xorb the shard references, by a term
// or by a xorb block. A single-chunk xorb's hash IS its chunk hash (the merkle root of one leaf),
// and xorb hashes are public (every reconstruction answer and transfer URL carries them): the
// term verification hash and the file hash of such a term follow from the xorb hash and the
// chunk's size, so the shard itself proves nothing. A xorb of several chunks needs no proof: its
// chunk hashes are never revealed raw (the dedup route keys them), and neither the verification
// hash of any of its chunk ranges nor a file hash over them follows from the xorb hash.
//
// Scope holds a single-chunk xorb when one of its writers uploaded it (index.Index.Possessed),
// or, for a file made of that one chunk alone, when the shard gives the file's SHA-256 (the
// metadata extension stock clients send) and it matches the stored chunk: only a holder of the
// bytes can compute it. That second proof is what lets a client that dedups against its local
// shard cache, without asking the origin, register a small file it uploaded to another scope
// before (hf_xet does). Checking it reads the chunk from the object store, at most
// maxProofBytes of them per shard.
//
// A single-chunk xorb scope does not hold is reported exactly as a missing one (ErrMissingXorb
// with its hash), so the answer does not even tell that it is stored; the client's remedy is the
// same: upload it.
func (s *Service) checkPossession(ctx context.Context, scope string, sh *shard.Shard, layouts map[hash.Hash]*xorb.Layout) error {
	seen := make(map[hash.Hash]struct{})
	var single []hash.Hash // in shard order, so the error names the first one
	add := func(h hash.Hash) {
		if _, ok := seen[h]; ok {
			return
		}
		seen[h] = struct{}{}
		if l := layouts[h]; l != nil && l.NumChunks() == 1 {
			single = append(single, h)
		}
	}
	for i := range sh.Xorbs {
		add(sh.Xorbs[i].Hash)
	}
	for i := range sh.Files {
		for _, t := range sh.Files[i].Terms {
			add(t.Xorb)
		}
	}
	if len(single) == 0 {
		return nil
	}
	var unheld []hash.Hash
	for rest := single; len(rest) > 0; {
		batch := rest[:min(layoutBatch, len(rest))]
		rest = rest[len(batch):]
		held, err := s.idx.Possessed(ctx, scope, batch)
		if err != nil {
			return fmt.Errorf("load possession: %w", err)
		}
		for _, h := range batch {
			if !held[h] {
				unheld = append(unheld, h)
			}
		}
	}
	if len(unheld) == 0 {
		return nil
	}
	// Every reference to an unheld xorb must be a whole one-chunk file with its SHA-256.
	claimed := make(map[hash.Hash]hash.Hash, len(unheld)) // xorb → the SHA-256 the shard gives
	bad := make(map[hash.Hash]bool)
	for _, h := range unheld {
		claimed[h] = hash.Zero
	}
	for i := range sh.Xorbs {
		if _, ok := claimed[sh.Xorbs[i].Hash]; ok {
			bad[sh.Xorbs[i].Hash] = true // a xorb block carries no proof
		}
	}
	for i := range sh.Files {
		f := &sh.Files[i]
		for _, t := range f.Terms {
			if _, ok := claimed[t.Xorb]; !ok {
				continue
			}
			switch {
			case len(f.Terms) != 1 || f.SHA256 == nil || t.Start != 0 || t.End != 1:
				bad[t.Xorb] = true
			case claimed[t.Xorb] != hash.Zero && claimed[t.Xorb] != *f.SHA256:
				bad[t.Xorb] = true
			default:
				claimed[t.Xorb] = *f.SHA256
			}
		}
	}
	budget := int64(maxProofBytes)
	for _, h := range unheld {
		if bad[h] {
			return fmt.Errorf("%w: %s", ErrMissingXorb, h)
		}
		l := layouts[h]
		budget -= int64(l.StoredEnds[0])
		if budget < 0 {
			return fmt.Errorf("%w: %s", ErrMissingXorb, h)
		}
		ok, err := s.sha256Matches(ctx, l, claimed[h])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %s", ErrMissingXorb, h)
		}
	}
	return nil
}

// maxProofBytes bounds the stored bytes one shard's SHA-256 proofs may read (checkPossession):
// as much as one xorb upload, over 8,000 files under 8 KiB.
const maxProofBytes = 64 << 20

// sha256Matches reads the one chunk of the single-chunk xorb l from the object store and
// reports whether its SHA-256, in the byte order shards carry, is want. A stored chunk that does
// not decode to its hash does not match.
func (s *Service) sha256Matches(ctx context.Context, l *xorb.Layout, want hash.Hash) (bool, error) {
	n := int64(l.StoredEnds[0])
	rc, err := s.objs.GetRange(ctx, XorbKey(l.Hash), 0, n)
	if err != nil {
		return false, fmt.Errorf("read xorb %s: %w", l.Hash, err)
	}
	defer rc.Close()
	stored := make([]byte, n)
	if _, err := io.ReadFull(rc, stored); err != nil {
		return false, fmt.Errorf("read xorb %s: %w", l.Hash, err)
	}
	hdr, err := xorb.ParseChunkHeader(stored)
	if err != nil {
		return false, nil
	}
	raw, err := xorb.DecodeChunk(nil, hdr, stored[xorb.HeaderSize:])
	if err != nil || hash.Chunk(raw) != l.Hash {
		return false, nil
	}
	return hash.FromSHA256(sha256.Sum256(raw)) == want, nil
}

// checkXorbBlock requires a shard's xorb block to describe the stored xorb exactly (check 6).
// Every disagreement gets the same text: which field differs, or from which chunk on, would
// tell the stored layout piece by piece.
func checkXorbBlock(x *shard.Xorb, l *xorb.Layout) error {
	bad := fmt.Errorf("%w: xorb block %s (%d chunks, %d bytes) does not describe the stored xorb",
		ErrRejected, x.Hash, len(x.Chunks), x.RawBytes)
	if len(x.Chunks) != l.NumChunks() || x.RawBytes != l.RawLen() {
		return bad
	}
	var start uint32
	for j, c := range x.Chunks {
		if c.Hash != l.ChunkHashes[j] || c.RawStart != start || c.RawLen != l.RawEnds[j]-start {
			return bad
		}
		start = l.RawEnds[j]
	}
	return nil
}

// termMismatch is the one error of a term that does not match its xorb, whatever differs
// (range, byte count, verification hash): it repeats what the shard claimed and nothing stored.
func termMismatch(f *shard.File, i int) error {
	t := f.Terms[i]
	return fmt.Errorf("%w: file %s term %d (chunks [%d,%d) of xorb %s, %d bytes) does not match the stored xorb",
		ErrRejected, f.Hash, i, t.Start, t.End, t.Xorb, t.RawBytes)
}

// firstBadTerm returns the index of the first term of f whose range or byte count disagrees
// with its layout (recon.NewFileRecord failed on it); every layout is present.
func firstBadTerm(f *shard.File, layouts map[hash.Hash]*xorb.Layout) int {
	for i, t := range f.Terms {
		l := layouts[t.Xorb]
		if l == nil || l.CheckRange(t.Start, t.End) != nil || l.RawRange(t.Start, t.End) != t.RawBytes {
			return i
		}
	}
	return 0
}

// checkFile checks verification hashes (check 4) and recomputes the file hash (check 5). The
// term ranges were already checked by recon.NewFileRecord. leaves is scratch space, returned
// for reuse.
func checkFile(f *shard.File, layouts map[hash.Hash]*xorb.Layout, leaves []hash.Leaf) ([]hash.Leaf, error) {
	if len(f.Terms) == 0 {
		if !f.Hash.IsZero() {
			return leaves, fmt.Errorf("%w: file %s has no terms but is not the empty file", ErrRejected, f.Hash)
		}
		return leaves, nil
	}
	for i, t := range f.Terms {
		l := layouts[t.Xorb]
		if f.Verification != nil && hash.Verification(l.ChunkHashes[t.Start:t.End]) != f.Verification[i] {
			return leaves, termMismatch(f, i)
		}
		prev := uint32(0)
		if t.Start > 0 {
			prev = l.RawEnds[t.Start-1]
		}
		for c := t.Start; c < t.End; c++ {
			leaves = append(leaves, hash.Leaf{Hash: l.ChunkHashes[c], Size: uint64(l.RawEnds[c] - prev)})
			prev = l.RawEnds[c]
		}
	}
	// The hash the terms give is not shown: it is computed from stored chunk hashes, and
	// without verification entries (lenient mode) it would be all a shard needs.
	if hash.File(leaves) != f.Hash {
		return leaves, fmt.Errorf("%w: the terms of file %s do not hash to its file hash", ErrRejected, f.Hash)
	}
	return leaves, nil
}
