package ingest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"slices"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// progressEvery is how many terms pass between two validating progress reports.
const progressEvery = 4096

// check runs the checks of docs/protocol.md §8.5 on a parsed shard against the stored layouts,
// and the possession check (checkPossession) for scope, and returns the encoded file records
// to register and the layouts of every xorb the shard names.
//
// Error texts returned to the client name what the shard claims (file, term, xorb hash, the
// chunk range it gave) but never what is stored: no stored chunk count, size, or chunk hash,
// and no hash computed from stored chunks. A writer may probe any xorb hash, so every such
// detail would be a leak (docs/security.md, "What a hash grants").
//
// With assumeHeld, the possession check (checkPossession) is skipped as if scope possessed every
// xorb the shard references: the caller must then have the registration require that
// (index.Registration.Require, possessionRefs) and run the full check when it does not hold, or
// when this check fails, so that the answer is the full check's.
func (s *Service) check(ctx context.Context, scope string, sh *shard.Shard, progress func(Progress), assumeHeld bool) ([]*recon.FileRecord, map[hash.Hash]*xorb.Layout, error) {
	var total, refs uint64
	for i := range sh.Files {
		f := &sh.Files[i]
		total += uint64(len(f.Terms))
		if len(f.Terms) > 0 && f.Verification == nil && !s.lenient {
			return nil, nil, fmt.Errorf("%w: file %s has no verification entries", ErrRejected, f.Hash)
		}
		for _, t := range f.Terms {
			if t.End > t.Start {
				refs += uint64(t.End - t.Start)
			}
		}
	}
	if refs > uint64(s.maxChunkRefs) {
		return nil, nil, fmt.Errorf("%w: terms cover %d chunks, limit %d", shard.ErrTooLarge, refs, s.maxChunkRefs)
	}
	progress(Progress{Stage: StageValidating, Total: total})
	layouts, err := s.layouts(ctx, sh)
	if err != nil {
		return nil, nil, err
	}
	// Before any comparison with the stored layouts, so that a shard naming a single-chunk
	// xorb its scope does not hold learns nothing about it.
	if !assumeHeld {
		if err := s.checkPossession(ctx, scope, sh, layouts); err != nil {
			return nil, nil, err
		}
	}
	for i := range sh.Xorbs {
		if err := checkXorbBlock(&sh.Xorbs[i], layouts[sh.Xorbs[i].Hash]); err != nil {
			return nil, nil, err
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
			return nil, nil, termMismatch(f, firstBadTerm(f, layouts))
		}
		if leaves, err = checkFile(f, layouts, leaves[:0]); err != nil {
			return nil, nil, err
		}
		files = append(files, rec)
		before := verified
		verified += uint64(len(f.Terms))
		if verified/progressEvery != before/progressEvery {
			progress(Progress{Stage: StageValidating, Verified: verified, Total: total})
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
	}
	progress(Progress{Stage: StageValidating, Verified: total, Total: total})
	return files, layouts, nil
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

// possessionRefs lists the xorbs whose possession by the scope makes checkPossession pass
// without further lookups: those of the shard's xorb blocks and terms, sorted, unique.
func possessionRefs(sh *shard.Shard) []hash.Hash {
	n := len(sh.Xorbs)
	for i := range sh.Files {
		n += len(sh.Files[i].Terms)
	}
	refs := make([]hash.Hash, 0, n)
	for i := range sh.Xorbs {
		refs = append(refs, sh.Xorbs[i].Hash)
	}
	for i := range sh.Files {
		for _, t := range sh.Files[i].Terms {
			refs = append(refs, t.Xorb)
		}
	}
	return index.SortedUnique(refs)
}

// checkPossession requires scope to hold the bytes of every term whose verification hash and
// file hash follow from public hashes (docs/security.md, "What a hash grants"). Xorb hashes are
// public (every reconstruction answer and transfer URL carries them); raw chunk hashes are not
// (the dedup route keys them), except one: a single-chunk xorb's hash IS its chunk hash (the
// merkle root of one leaf). So a chunk is public when it is stored as a single-chunk xorb, and a
// term is derivable when every chunk of its range is public: any term over a single-chunk xorb,
// and a range of a xorb of several chunks all of which are also stored alone. A xorb block in the
// shard's xorb section naming a single-chunk xorb counts as a reference too.
//
// Scope holds such a term's bytes when a writer of scope uploaded them (index.Index.Possessed):
// the xorb the term is over, or every public chunk of its range as a single-chunk xorb. Failing
// that, a file made of that one term proves it with its SHA-256 (the metadata extension stock
// clients send), checked against the stored bytes: no hash the origin reveals gives it away.
// That proof is what lets a client that dedups against its own shard cache (hf_xet) register a
// small file it uploaded to another scope before. Checking it reads the range from the object
// store, at most maxProofBytes per shard.
//
// A term that fails is reported exactly as a missing xorb (ErrMissingXorb naming the public
// chunk, which is the single-chunk xorb's hash), so the answer does not even tell that it is
// stored; the client's remedy is the same: upload it. Only terms over xorbs scope did not upload
// cost more than one batch of primary-key probes: one more probe per such term (its first chunk).
func (s *Service) checkPossession(ctx context.Context, scope string, sh *shard.Shard, layouts map[hash.Hash]*xorb.Layout) error {
	// Every referenced xorb scope uploaded, from one probe each.
	held, err := s.possessed(ctx, scope, possessionRefs(sh))
	if err != nil {
		return err
	}
	for i := range sh.Xorbs {
		if h := sh.Xorbs[i].Hash; layouts[h].NumChunks() == 1 && !held[h] {
			return fmt.Errorf("%w: %s", ErrMissingXorb, h) // a xorb block carries no proof
		}
	}
	// Which chunks are public: the first chunk of every term over an unheld xorb, then, for the
	// terms whose first chunk is, the rest of their range.
	public := make(map[hash.Hash]bool)
	lookup := func(pick func(t shard.Term, l *xorb.Layout) []hash.Hash) error {
		var want []hash.Hash
		for i := range sh.Files {
			for _, t := range sh.Files[i].Terms {
				if l := layouts[t.Xorb]; !held[t.Xorb] && l.NumChunks() > 1 && l.CheckRange(t.Start, t.End) == nil {
					for _, c := range pick(t, l) {
						if _, known := public[c]; !known {
							want = append(want, c)
						}
					}
				}
			}
		}
		return s.lookupPublic(ctx, index.SortedUnique(want), public)
	}
	if err := lookup(func(t shard.Term, l *xorb.Layout) []hash.Hash { return l.ChunkHashes[t.Start : t.Start+1] }); err != nil {
		return err
	}
	if err := lookup(func(t shard.Term, l *xorb.Layout) []hash.Hash {
		if public[l.ChunkHashes[t.Start]] {
			return l.ChunkHashes[t.Start:t.End]
		}
		return nil
	}); err != nil {
		return err
	}
	// The derivable terms over unheld xorbs, and the public chunks they need.
	type derivable struct {
		f *shard.File
		t shard.Term
	}
	var terms []derivable
	var chunks []hash.Hash
	for i := range sh.Files {
		f := &sh.Files[i]
		for _, t := range f.Terms {
			l := layouts[t.Xorb]
			if held[t.Xorb] {
				continue
			}
			if l.NumChunks() == 1 {
				if l.CheckRange(t.Start, t.End) != nil {
					// Refused as missing, not as a bad range: that would tell it is stored.
					return fmt.Errorf("%w: %s", ErrMissingXorb, t.Xorb)
				}
				terms = append(terms, derivable{f, t})
				continue
			}
			if l.CheckRange(t.Start, t.End) != nil {
				continue // refused later, by recon.NewFileRecord
			}
			all := true
			for _, c := range l.ChunkHashes[t.Start:t.End] {
				all = all && public[c]
			}
			if all {
				terms = append(terms, derivable{f, t})
				chunks = append(chunks, l.ChunkHashes[t.Start:t.End]...)
			}
		}
	}
	if len(terms) == 0 {
		return nil
	}
	heldChunks, err := s.possessed(ctx, scope, index.SortedUnique(chunks))
	if err != nil {
		return err
	}
	budget := int64(maxProofBytes)
	for _, d := range terms {
		l := layouts[d.t.Xorb]
		missing := hash.Zero
		for _, c := range l.ChunkHashes[d.t.Start:d.t.End] {
			if !held[c] && !heldChunks[c] {
				missing = c
				break
			}
		}
		if missing == hash.Zero {
			continue
		}
		if len(d.f.Terms) != 1 || d.f.SHA256 == nil {
			return fmt.Errorf("%w: %s", ErrMissingXorb, missing)
		}
		bs, be := l.ByteRange(d.t.Start, d.t.End)
		if budget -= int64(be - bs); budget < 0 {
			return fmt.Errorf("%w: %s", ErrMissingXorb, missing)
		}
		ok, err := s.sha256Matches(ctx, l, d.t.Start, d.t.End, *d.f.SHA256)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %s", ErrMissingXorb, missing)
		}
	}
	return nil
}

// possessed asks the index which of hs (sorted, unique) scope holds, in batches.
func (s *Service) possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error) {
	out := make(map[hash.Hash]bool)
	for len(hs) > 0 {
		batch := hs[:min(layoutBatch, len(hs))]
		hs = hs[len(batch):]
		got, err := s.idx.Possessed(ctx, scope, batch)
		if err != nil {
			return nil, fmt.Errorf("load possession: %w", err)
		}
		for h := range got {
			out[h] = true
		}
	}
	return out, nil
}

// lookupPublic records in public, for each chunk hash of hs (sorted, unique), whether it is the
// hash of a stored single-chunk xorb.
func (s *Service) lookupPublic(ctx context.Context, hs []hash.Hash, public map[hash.Hash]bool) error {
	for len(hs) > 0 {
		batch := hs[:min(layoutBatch, len(hs))]
		hs = hs[len(batch):]
		got, err := s.idx.Layouts(ctx, batch)
		if err != nil {
			return fmt.Errorf("load layouts: %w", err)
		}
		for _, h := range batch {
			l := got[h]
			public[h] = l != nil && l.NumChunks() == 1
		}
	}
	return nil
}

// maxProofBytes bounds the stored bytes one shard's SHA-256 proofs may read (checkPossession):
// as much as one xorb upload, over 8,000 files under 8 KiB.
const maxProofBytes = 64 << 20

// sha256Matches reads chunks [a, b) of xorb l from the object store and reports whether the
// SHA-256 of their raw bytes, in the byte order shards carry, is want. Chunks that do not decode
// to their hashes do not match.
func (s *Service) sha256Matches(ctx context.Context, l *xorb.Layout, a, b uint32, want hash.Hash) (bool, error) {
	bs, be := l.ByteRange(a, b)
	rc, err := s.objs.GetRange(ctx, XorbKey(l.Hash), int64(bs), int64(be-bs))
	if err != nil {
		return false, fmt.Errorf("read xorb %s: %w", l.Hash, err)
	}
	defer rc.Close()
	stored := make([]byte, be-bs)
	if _, err := io.ReadFull(rc, stored); err != nil {
		return false, fmt.Errorf("read xorb %s: %w", l.Hash, err)
	}
	sum := sha256.New()
	var d xorb.Decoder
	var raw []byte
	for c := a; c < b; c++ {
		hdr, err := xorb.ParseChunkHeader(stored)
		if err != nil || hdr.Size() > len(stored) {
			return false, nil
		}
		if raw, err = d.DecodeChunk(raw[:0], hdr, stored[xorb.HeaderSize:hdr.Size()]); err != nil || hash.Chunk(raw) != l.ChunkHashes[c] {
			return false, nil
		}
		sum.Write(raw)
		stored = stored[hdr.Size():]
	}
	var got [sha256.Size]byte
	sum.Sum(got[:0])
	return hash.FromSHA256(got) == want, nil
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
	n := 0
	for _, t := range f.Terms {
		if t.End > t.Start { // ranges checked by recon.NewFileRecord before
			n += int(t.End - t.Start)
		}
	}
	leaves = slices.Grow(leaves, n)
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
	// leaves is scratch from here on (the caller reuses it for the next file).
	if hash.FileInPlace(leaves) != f.Hash {
		return leaves, fmt.Errorf("%w: the terms of file %s do not hash to its file hash", ErrRejected, f.Hash)
	}
	return leaves, nil
}
