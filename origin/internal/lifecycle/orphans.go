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
//     index is re-read right before each removal (a live xorb of the mark is skipped at once),
//     but an upload can still index the object between that re-read and the removal. So the
//     object is not deleted but moved to its trash key (trashPrefix; moveToTrash), the index is
//     read once more, and the trash entry is then deleted (no row) or put back under the key
//     (a row appeared: OrphansRestored) with Create, so an upload that stored the key again
//     meanwhile keeps its bytes. The bytes put back are those moved: with the store's
//     objstore.Mover (Local: rename) exactly what was under the key at the move, so a second
//     collection and an upload of another encoding between this one's look and its move (a
//     grace forced shorter than an upload) cannot make it put back an encoding the row does not
//     describe. A collector that dies between the move and the restore leaves the trash entry:
//     every run starts with settleTrash, which restores entries whose key got a row and deletes
//     those moved before cutoff that still have none. A reader of the key sees it missing in
//     between (an error it retries), never other bytes.
//   - S3 has no atomic move. Its objstore.MatchMover copies the object to the trash on the
//     service, only if it is still the write listed (its ETag), and then deletes it: the bytes
//     are durable before the Delete, so a crash loses nothing, and they are the orphan examined;
//     an object written under the key since the listing (the other encoding above) is left
//     alone, neither moved nor deleted. The Delete carries If-Match with the same ETag, which
//     closes the rest on a service with conditional deletes; MinIO ignores it, so there an
//     object written in the one round trip between the copy and the Delete is deleted, and put
//     back from the trash copy of the orphan if indexed: the other-encoding race stays open on
//     MinIO for that round trip (docs/decisions.md, "Orphans go to the trash, not away" and
//     2026-12-03 "S3 orphan moves bound to the listed ETag"). A store with neither (none in
//     this repository) copies the bytes it read, as S3 did before.
//
// A swept xorb whose object deletion is pending has no row either; the real run deletes those
// before this pass, a dry run counts them here too.
func collectOrphans(ctx context.Context, ix GCIndex, objs GCObjects, live map[hash.Hash]bool,
	cutoff time.Time, o GCOptions, rep *Report, fail func(string)) error {
	if err := settleTrash(ctx, ix, objs, cutoff, o, rep); err != nil {
		return err
	}
	for _, prefix := range orphanPrefixes() {
		err := objs.List(ctx, prefix, func(obj objstore.ObjectInfo) error {
			if !obj.ModTime.Before(cutoff) {
				return nil
			}
			h, isXorb, ok := orphanKey(prefix, obj.Key)
			if !ok {
				return nil // not an object this origin writes
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
			deleted, err := deleteOrphan(ctx, objs, obj, indexed, o, rep, fail)
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

// orphanPrefixes are the List prefixes of the xorb and shard objects.
func orphanPrefixes() []string {
	var out []string
	for _, k := range []string{objstore.XorbKey(hash.Hash{}), objstore.ShardKey(hash.Hash{})} {
		out = append(out, k[:strings.LastIndexByte(k, '/')+1])
	}
	return out
}

// orphanKey parses key, listed under prefix, as the key of xorb or shard h; false for a key this
// origin does not write.
func orphanKey(prefix, key string) (h hash.Hash, isXorb, ok bool) {
	h, err := hash.Parse(key[len(prefix):])
	if err != nil {
		return h, false, false
	}
	isXorb = key == objstore.XorbKey(h)
	return h, isXorb, isXorb || key == objstore.ShardKey(h)
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

// maxOrphanCopy bounds the copy a store with neither mover keeps of an orphan; a larger object is
// left alone (none this origin writes comes near: a xorb is at most 64 MiB).
const maxOrphanCopy = 1 << 30

// trashPrefix is where the orphan pass moves an orphan before deciding its fate: the trash key of
// "xorbs/default/<h>" is "trash/xorbs/default/<h>".
const trashPrefix = "trash/"

// moveToTrash moves key to its trash key: with the store's Mover, atomically (what the trash
// holds is what was under key at that moment); with its MatchMover (S3), only if key still
// holds the write listed (obj.ETag; errChanged and nothing done if not); with neither, by
// copying the object to the trash key and deleting it. Either copy makes the bytes durable
// before the Delete (the collector dying after it leaves them for the next run); the last
// copies what was read, not what was deleted. ErrNotFound: nothing under key (deleted
// meanwhile); errTooLarge: left in place (logged).
func moveToTrash(ctx context.Context, objs GCObjects, obj objstore.ObjectInfo, o GCOptions) error {
	trash := trashPrefix + obj.Key
	if m, ok := objstore.MoverOf(objs); ok {
		return m.Move(ctx, obj.Key, trash)
	}
	if m, ok := objstore.MatchMoverOf(objs); ok {
		err := m.MoveMatch(ctx, obj.Key, trash, obj.ETag)
		if errors.Is(err, objstore.ErrChanged) {
			// Written again since it was listed: not the orphan examined, and perhaps an
			// upload's object by now. Left alone; a later run looks at it afresh.
			o.Log.InfoContext(ctx, "orphan object written again since it was listed, left in place", "key", obj.Key)
			return errChanged
		}
		return err
	}
	if obj.Size > maxOrphanCopy {
		o.Log.WarnContext(ctx, "orphan object too large to collect safely, left in place", "key", obj.Key, "size", obj.Size)
		return errTooLarge
	}
	rc, size, err := objs.Get(ctx, obj.Key)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(rc, maxOrphanCopy+1))
	rc.Close()
	if err == nil && int64(len(body)) != size {
		err = fmt.Errorf("%w: read %d bytes of %d", objstore.ErrSize, len(body), size)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", obj.Key, err)
	}
	if err := objs.Put(ctx, trash, bytes.NewReader(body), size); err != nil {
		return fmt.Errorf("copy %s to the trash: %w", obj.Key, err)
	}
	if err := objs.Delete(ctx, obj.Key); err != nil {
		return fmt.Errorf("delete %s: %w", obj.Key, err)
	}
	return nil
}

// errTooLarge: moveToTrash left an orphan larger than maxOrphanCopy in place; errChanged: it
// left in place an object written again since it was listed (objstore.MatchMover).
var (
	errTooLarge = errors.New("orphan too large to copy")
	errChanged  = errors.New("orphan written again since it was listed")
)

// deleteOrphan moves obj to the trash, re-reads the index, and then either deletes the trash
// entry (no row: the orphan is gone) or puts its bytes back under the key (a row appeared: an
// upload indexed the object meanwhile). It reports whether obj was deleted (and counted in
// ObjectsDeleted and BytesReclaimed). Dying anywhere in between leaves the trash entry, which
// the next run's settleTrash settles.
func deleteOrphan(ctx context.Context, objs GCObjects, obj objstore.ObjectInfo, indexed func() (bool, error),
	o GCOptions, rep *Report, fail func(string)) (bool, error) {
	err := moveToTrash(ctx, objs, obj, o)
	if errors.Is(err, errTooLarge) || errors.Is(err, errChanged) {
		rep.OrphansLeft++
		return false, nil
	}
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil // deleted meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("gc: move %s to the trash: %w", obj.Key, err)
	}
	fail(StepOrphanTrashed)
	ok, err := indexed()
	if err == nil && !ok {
		if err := objs.Delete(ctx, trashPrefix+obj.Key); err != nil {
			return false, fmt.Errorf("delete %s from the trash: %w", obj.Key, err)
		}
		rep.ObjectsDeleted++
		rep.BytesReclaimed += uint64(obj.Size)
		return true, nil
	}
	// Indexed meanwhile, or unknown: put the bytes back. Not knowing counts as indexed.
	if rerr := restoreFromTrash(ctx, objs, obj.Key, o); rerr != nil {
		return false, fmt.Errorf("restore %s: %w (index re-check: %v)", obj.Key, rerr, err)
	}
	if err != nil {
		return false, fmt.Errorf("re-check %s after moving it to the trash (object restored): %w", obj.Key, err)
	}
	rep.OrphansRestored++
	o.Log.WarnContext(ctx, "object indexed during its deletion, restored", "key", obj.Key)
	return false, nil
}

// restoreFromTrash puts the trash entry of key back under key and deletes the entry. Create,
// not Put: an object under the key now was stored by an upload after the move, perhaps another
// encoding of the xorb whose row that upload inserted; the trash's bytes must not replace it
// (the row's inserter makes sure the key holds what its row describes, ingest's ensureStored;
// docs/decisions.md, 2026-12-02 "No acknowledged xorb without the indexed object"). A trash
// entry already gone was settled by a concurrent run: the key must hold an object then.
func restoreFromTrash(ctx context.Context, objs GCObjects, key string, o GCOptions) error {
	trash := trashPrefix + key
	rc, size, err := objs.Get(ctx, trash)
	if errors.Is(err, objstore.ErrNotFound) {
		if _, serr := objs.Stat(ctx, key); serr != nil {
			return fmt.Errorf("trash entry gone and object missing: %w", serr)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the trash: %w", err)
	}
	err = objs.Create(ctx, key, rc, size)
	rc.Close()
	if errors.Is(err, objstore.ErrExists) {
		o.Log.WarnContext(ctx, "object indexed and stored again during its deletion", "key", key)
	} else if err != nil {
		return err
	}
	return objs.Delete(ctx, trash)
}

// settleTrash, at the start of the orphan pass, settles the trash entries an earlier run left
// (it died between moving an orphan there and deciding its fate, or a concurrent run is deciding
// now): an entry whose key has an index row is put back under its key (OrphansRestored), one
// moved before cutoff with no row is deleted (TrashDeleted); a younger one may be a concurrent
// run's and is left to it. A dry run only counts.
func settleTrash(ctx context.Context, ix GCIndex, objs GCObjects, cutoff time.Time, o GCOptions, rep *Report) error {
	for _, prefix := range orphanPrefixes() {
		err := objs.List(ctx, trashPrefix+prefix, func(obj objstore.ObjectInfo) error {
			key := obj.Key[len(trashPrefix):]
			h, isXorb, ok := orphanKey(prefix, key)
			if !ok {
				return nil
			}
			indexed, err := isIndexed(ctx, ix, isXorb, h)
			switch {
			case err != nil:
				return err
			case indexed:
				rep.OrphansRestored++
				if o.DryRun {
					return nil
				}
				if err := restoreFromTrash(ctx, objs, key, o); err != nil {
					return fmt.Errorf("restore %s from the trash: %w", key, err)
				}
				o.Log.WarnContext(ctx, "indexed object restored from the trash", "key", key)
			case obj.ModTime.Before(cutoff):
				rep.TrashDeleted++
				rep.TrashBytes += uint64(obj.Size)
				if o.DryRun {
					return nil
				}
				if err := objs.Delete(ctx, obj.Key); err != nil {
					return fmt.Errorf("delete %s: %w", obj.Key, err)
				}
				rep.ObjectsDeleted++
				rep.BytesReclaimed += uint64(obj.Size)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("gc: trash under %s: %w", trashPrefix+prefix, err)
		}
	}
	return nil
}
