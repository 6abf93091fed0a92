package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Orphans are objects in the store that no index row describes: an upload writes the object
// first and its index row after (a xorb: Create, then index.PutXorb; a shard too large to keep
// inline: Put, then index.RegisterShard), so an upload that fails or dies between the two
// leaves its object behind, and nothing else would ever delete it. docs/decisions.md, "Orphan
// objects", has the reasoning below at more length.
//
// collectOrphans lists the xorb and shard objects and, for each written before cutoff (now -
// Grace) whose key is one this origin writes and whose index row is missing, deletes it (dry
// run: only counts it). The races with uploads:
//
//   - An upload that wrote the object and has not yet indexed it is at most one request old;
//     the grace period (at least auth.dedup_expiry, hours) is far beyond any request's life, so
//     its object is not old enough to be a candidate. A shard Put again by a retried upload
//     gets a fresh modification time; a xorb Create that finds the object leaves its time alone,
//     which is the next case.
//   - An upload may find an old orphan under its key (same hash) and index it, at any time. The
//     index is re-read right before each deletion (a live xorb of the mark is skipped at once),
//     but an upload can still index the object between that re-read and the Delete. So the
//     object's bytes are read first, and after the Delete the index is read once more: if a row
//     appeared meanwhile, the same bytes are put back (OrphansRestored) unless an upload stored
//     the key again meanwhile (then its bytes stay: Create, not Put). What remains is a
//     reader of that just-indexed object seeing it missing for the moment between the Delete and
//     the Put (an error it retries), or the collector dying in that moment, which leaves a row
//     without its object — the window is one Delete request, for an upload of exactly that hash
//     racing the collector.
//
// A swept xorb whose object deletion is pending has no row either; the real run deletes those
// before this pass, a dry run counts them here too.
func collectOrphans(ctx context.Context, ix GCIndex, objs GCObjects, live map[hash.Hash]bool,
	cutoff time.Time, o GCOptions, rep *Report, fail func(string)) error {
	for _, prefix := range []string{objstore.XorbKey(hash.Hash{}), objstore.ShardKey(hash.Hash{})} {
		prefix = prefix[:strings.LastIndexByte(prefix, '/')+1]
		err := objs.List(ctx, prefix, func(obj objstore.ObjectInfo) error {
			if !obj.ModTime.Before(cutoff) {
				return nil
			}
			h, err := hash.Parse(obj.Key[len(prefix):])
			if err != nil {
				return nil // not an object this origin writes
			}
			isXorb := obj.Key == objstore.XorbKey(h)
			if !isXorb && obj.Key != objstore.ShardKey(h) {
				return nil
			}
			if isXorb && live[h] {
				return nil
			}
			indexed := func() (bool, error) { return isIndexed(ctx, ix, isXorb, h) }
			if ok, err := indexed(); err != nil || ok {
				return err
			}
			if o.DryRun {
				rep.Orphans++
				rep.OrphanBytes += uint64(obj.Size)
				return nil
			}
			deleted, err := deleteOrphan(ctx, objs, obj, indexed, o, rep)
			if deleted {
				rep.Orphans++
				rep.OrphanBytes += uint64(obj.Size)
				fail(StepOrphan)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("gc: orphans under %s: %w", prefix, err)
		}
	}
	// Temporary files of writes a crash interrupted: no write lives as long as the grace period
	// (a streamed upload's body has its deadline), so one older than the cutoff is garbage. A
	// write whose file is removed anyway fails and is retried by its client; nothing it wrote
	// was visible.
	if tr, ok := objstore.TempRemoverOf(objs); ok {
		n, b, err := tr.RemoveTemps(ctx, cutoff, o.DryRun)
		rep.TempFiles += n
		rep.TempBytes += uint64(b)
		if err != nil {
			return fmt.Errorf("gc: temporary files: %w", err)
		}
	}
	return nil
}

// isIndexed reports whether the index has a row for xorb or shard h.
func isIndexed(ctx context.Context, ix GCIndex, isXorb bool, h hash.Hash) (bool, error) {
	var err error
	if isXorb {
		_, err = ix.XorbSize(ctx, h)
	} else {
		_, err = ix.ShardBody(ctx, h)
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, index.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("look up %s: %w", h, err)
}

// maxOrphanCopy bounds the copy deleteOrphan keeps; a larger object is left alone (none this
// origin writes comes near: a xorb is at most 64 MiB).
const maxOrphanCopy = 1 << 30

// deleteOrphan deletes obj, keeping a copy of its bytes, and puts the copy back when indexed
// reports a row after the deletion (see collectOrphans). It reports whether obj was deleted (and
// counted in ObjectsDeleted and BytesReclaimed).
func deleteOrphan(ctx context.Context, objs GCObjects, obj objstore.ObjectInfo, indexed func() (bool, error),
	o GCOptions, rep *Report) (bool, error) {
	if obj.Size > maxOrphanCopy {
		o.Log.WarnContext(ctx, "orphan object too large to collect safely, left in place", "key", obj.Key, "size", obj.Size)
		return false, nil
	}
	rc, size, err := objs.Get(ctx, obj.Key)
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil // deleted meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", obj.Key, err)
	}
	body, err := io.ReadAll(io.LimitReader(rc, maxOrphanCopy+1))
	rc.Close()
	if err == nil && int64(len(body)) != size {
		err = fmt.Errorf("%w: read %d bytes of %d", objstore.ErrSize, len(body), size)
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", obj.Key, err)
	}
	if err := objs.Delete(ctx, obj.Key); err != nil {
		return false, fmt.Errorf("delete %s: %w", obj.Key, err)
	}
	ok, err := indexed()
	if err == nil && !ok {
		rep.ObjectsDeleted++
		rep.BytesReclaimed += uint64(size)
		return true, nil
	}
	// Indexed meanwhile, or unknown: put the bytes back. Not knowing counts as indexed. Create,
	// not Put: an object under the key now was stored by an upload after the Delete, perhaps
	// another encoding of the xorb whose row that upload inserted; these bytes must not replace
	// it (the row's inserter makes sure the key holds what its row describes, ingest's
	// ensureStored; docs/decisions.md, 2026-12-02 "No acknowledged xorb without the indexed
	// object").
	perr := objs.Create(ctx, obj.Key, bytes.NewReader(body), size)
	if errors.Is(perr, objstore.ErrExists) {
		o.Log.WarnContext(ctx, "object indexed and stored again during its deletion", "key", obj.Key)
		return false, nil
	}
	if perr != nil {
		return false, fmt.Errorf("restore %s after deleting it: %w (index re-check: %v)", obj.Key, perr, err)
	}
	if err != nil {
		return false, fmt.Errorf("re-check %s after deleting it (object restored): %w", obj.Key, err)
	}
	rep.OrphansRestored++
	o.Log.WarnContext(ctx, "object indexed during its deletion, restored", "key", obj.Key)
	return false, nil
}
