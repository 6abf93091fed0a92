package lifecycle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
)

// Dead shards (index.ShardLifecycle; docs/decisions.md, "Dead shards"). A shard row serves the
// global-dedup route only: the dedup entries naming it offer its xorbs. It is dead when it was
// registered before the grace period, none of its files is visible or a root, and its entries
// answer nothing: none names it any more, or every xorb it offers is condemned or gone. The mark
// condemns dead shards and revives condemned ones that are no longer dead; the sweep removes
// those condemned before the grace period began (re-checking their files' visibility under the
// index's serialisation with registrations), then their objects are deleted like orphans (a
// copy kept until the index is re-read). A run killed between the two leaves the objects as
// orphans (no row), which the next run's orphan pass deletes.

// StepShardObject is the failpoint after one swept shard's object is deleted (GCOptions.Failpoint).
const StepShardObject = "shard-object"

// visibleSet is the mark's set of visible (or rooted) files, as the first 8 bytes of each
// hash, sorted: the file scan runs in hash order, so appending keeps it sorted. 8 bytes per
// visible file; a prefix shared by a dead file makes it look visible, which only keeps a shard.
type visibleSet []uint64

func prefix(h hash.Hash) uint64 { return binary.BigEndian.Uint64(h[:8]) }

func (v visibleSet) has(h hash.Hash) bool {
	_, ok := slices.BinarySearch(v, prefix(h))
	return ok
}

// shardMark is the outcome of markShards.
type shardMark struct {
	cands    []index.ShardCandidate
	external map[hash.Hash]bool // swept candidates whose body is an object
}

// markShards walks every shard row, condemns the dead ones, revives condemned ones that are not
// dead any more, and returns the sweep candidates: dead and condemned before cutoff. live holds
// the xorbs visible files reference; rooted the roots' files.
func markShards(ctx context.Context, ix GCIndex, objs GCObjects, live map[hash.Hash]bool, visible visibleSet,
	rooted map[hash.Hash]bool, now, cutoff time.Time, o GCOptions, rep *Report) (*shardMark, error) {
	m := &shardMark{external: map[hash.Hash]bool{}}
	var condemn, revive []hash.Hash
	var after hash.Hash
	for {
		page, err := ix.Shards(ctx, after, index.MaxScanPage)
		if err != nil {
			return nil, fmt.Errorf("gc: scan shards: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, s := range page {
			rep.Shards++
			files, dead, err := deadShard(ctx, ix, objs, s, live, visible, rooted, cutoff, o)
			if err != nil {
				return nil, err
			}
			switch {
			case !dead && !s.Condemned.IsZero():
				revive = append(revive, s.Hash)
			case !dead:
			case s.Condemned.IsZero():
				condemn = append(condemn, s.Hash)
			case s.Condemned.Before(cutoff):
				m.cands = append(m.cands, index.ShardCandidate{Shard: s.Hash, Files: files})
				m.external[s.Hash] = !s.Inline
				rep.ShardsSweepable++
			}
		}
		after = page[len(page)-1].Hash
	}
	rep.ShardsCondemned = int64(len(condemn))
	if o.DryRun {
		return m, nil
	}
	for len(condemn) > 0 || len(revive) > 0 {
		nc, nr := min(len(condemn), index.MaxScanPage), min(len(revive), index.MaxScanPage)
		if err := ix.CondemnShards(ctx, condemn[:nc], revive[:nr], now); err != nil {
			return nil, fmt.Errorf("gc: condemn shards: %w", err)
		}
		condemn, revive = condemn[nc:], revive[nr:]
	}
	return m, nil
}

// deadShard reports whether s is dead (see above), and its files when it is.
func deadShard(ctx context.Context, ix GCIndex, objs GCObjects, s index.ShardEntry, live map[hash.Hash]bool,
	visible visibleSet, rooted map[hash.Hash]bool, cutoff time.Time, o GCOptions) ([]hash.Hash, bool, error) {
	if !s.Registered.Before(cutoff) {
		return nil, false, nil
	}
	if s.Named {
		for _, x := range s.Xorbs {
			if live[x] {
				return nil, false, nil // its entries still offer a live xorb
			}
		}
	}
	files := s.Files
	if !s.FilesKnown {
		var ok bool
		var err error
		if files, ok, err = bodyFiles(ctx, ix, objs, s); err != nil || !ok {
			if !ok && err == nil {
				o.Log.WarnContext(ctx, "shard body unreadable: shard kept", "shard", s.Hash)
			}
			return nil, false, err
		}
	}
	for _, f := range files {
		if visible.has(f) || rooted[f] {
			return nil, false, nil
		}
	}
	return files, true, nil
}

// bodyFiles reads the files of a shard registered before the index recorded them, from its
// body (inline, or its object). ok is false when the body is missing or does not parse.
func bodyFiles(ctx context.Context, ix GCIndex, objs GCObjects, s index.ShardEntry) ([]hash.Hash, bool, error) {
	body, err := ix.ShardBody(ctx, s.Hash)
	switch {
	case errors.Is(err, index.ErrNotFound):
		return nil, false, nil // swept meanwhile
	case err != nil:
		return nil, false, fmt.Errorf("gc: shard %s: %w", s.Hash, err)
	}
	if body == nil {
		rc, _, err := objs.Get(ctx, objstore.ShardKey(s.Hash))
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("gc: shard %s: %w", s.Hash, err)
		}
		body, err = io.ReadAll(io.LimitReader(rc, shard.MaxSize+1))
		rc.Close()
		if err != nil {
			return nil, false, fmt.Errorf("gc: shard %s: %w", s.Hash, err)
		}
	}
	sh, err := shard.Parse(body)
	if err != nil {
		return nil, false, nil
	}
	out := make([]hash.Hash, len(sh.Files))
	for i := range sh.Files {
		out[i] = sh.Files[i].Hash
	}
	return index.SortedUnique(out), true, nil
}

// sweepShards removes the candidates from the index, batch by batch, and returns the swept
// shards whose body is an object.
func sweepShards(ctx context.Context, ix GCIndex, m *shardMark, cutoff time.Time, rep *Report) ([]hash.Hash, error) {
	var objects []hash.Hash
	for cands := m.cands; len(cands) > 0; {
		n := min(len(cands), index.MaxSweep)
		swept, err := ix.SweepShards(ctx, cands[:n], cutoff)
		if err != nil {
			return objects, fmt.Errorf("gc: sweep shards: %w", err)
		}
		cands = cands[n:]
		rep.ShardsSwept += int64(len(swept))
		for _, s := range swept {
			if m.external[s] {
				objects = append(objects, s)
			}
		}
	}
	return objects, nil
}

// deleteShardObjects deletes the objects of swept shards as orphans (deleteOrphan: moved to
// the trash until the index is re-read, and put back if the shard was registered again meanwhile).
func deleteShardObjects(ctx context.Context, ix GCIndex, objs GCObjects, shards []hash.Hash, o GCOptions,
	rep *Report, fail func(string)) error {
	for _, s := range shards {
		key := objstore.ShardKey(s)
		size, err := objs.Stat(ctx, key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("gc: stat %s: %w", key, err)
		}
		indexed := func() (bool, error) { return isIndexed(ctx, ix, false, s) }
		deleted, err := deleteOrphan(ctx, objs, objstore.ObjectInfo{Key: key, Size: size}, indexed, o, rep, fail)
		if err != nil {
			return fmt.Errorf("gc: shard %s: %w", s, err)
		}
		if deleted {
			rep.ShardObjects++
			fail(StepShardObject)
		}
	}
	return nil
}
