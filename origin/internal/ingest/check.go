package ingest

import (
	"context"
	"fmt"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// progressEvery is how many terms pass between two validating progress reports.
const progressEvery = 4096

// check runs the checks of xet-protocol.md §8.5 on a parsed shard against the stored layouts
// and returns the encoded file records to register.
func (s *Service) check(ctx context.Context, sh *shard.Shard, progress func(Progress)) ([]*recon.FileRecord, error) {
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
			return nil, fmt.Errorf("%w: %w", ErrRejected, err)
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

// checkXorbBlock requires a shard's xorb block to describe the stored xorb exactly (check 6).
func checkXorbBlock(x *shard.Xorb, l *xorb.Layout) error {
	if len(x.Chunks) != l.NumChunks() || x.RawBytes != l.RawLen() {
		return fmt.Errorf("%w: xorb block %s lists %d chunks of %d bytes, stored xorb has %d of %d",
			ErrRejected, x.Hash, len(x.Chunks), x.RawBytes, l.NumChunks(), l.RawLen())
	}
	var start uint32
	for j, c := range x.Chunks {
		if c.Hash != l.ChunkHashes[j] || c.RawStart != start || c.RawLen != l.RawEnds[j]-start {
			return fmt.Errorf("%w: xorb block %s chunk %d disagrees with the stored xorb", ErrRejected, x.Hash, j)
		}
		start = l.RawEnds[j]
	}
	return nil
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
			return leaves, fmt.Errorf("%w: file %s term %d: verification hash does not match xorb %s chunks [%d,%d)",
				ErrRejected, f.Hash, i, t.Xorb, t.Start, t.End)
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
	if got := hash.File(leaves); got != f.Hash {
		return leaves, fmt.Errorf("%w: file terms hash to %s, shard says %s", ErrRejected, got, f.Hash)
	}
	return leaves, nil
}
