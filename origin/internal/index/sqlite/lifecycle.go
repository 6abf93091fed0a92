package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Lifecycle statements (index.Lifecycle).
const (
	qDeletePossession = `DELETE FROM possession WHERE scope = ?`
	// qVisibleFiles pages in (file, scope) order, the Lifecycle contract's: visibility_file's
	// entries on this WITHOUT ROWID table carry the primary key, so they are that order.
	qVisibleFiles = `SELECT v.scope, v.file, f.record FROM visibility v JOIN files f ON f.hash = v.file
WHERE (v.file, v.scope) > (?, ?) ORDER BY v.file, v.scope LIMIT ?`
)

// Delete implements index.Lifecycle.
func (db *DB) Delete(ctx context.Context, scope string, files []hash.Hash) (int, error) {
	if err := index.CheckScope(scope); err != nil {
		return 0, err
	}
	keys := index.SortedUnique(files)
	var removed int
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		removed = 0
		if len(keys) == 0 {
			res, err := tx.ExecContext(ctx, qHideScope, scope)
			if err != nil {
				return translate(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return translate(err)
			}
			removed = int(n)
		} else {
			st, err := tx.PrepareContext(ctx, qHideFile)
			if err != nil {
				return translate(err)
			}
			defer st.Close()
			for _, h := range keys {
				res, err := st.ExecContext(ctx, scope, h[:])
				if err != nil {
					return translate(err)
				}
				n, err := res.RowsAffected()
				if err != nil {
					return translate(err)
				}
				removed += int(n)
			}
		}
		if removed == 0 {
			// The savepoint is rolled back: nothing recorded, no event.
			return fmt.Errorf("%w: nothing visible to delete", index.ErrNotFound)
		}
		if len(keys) == 0 {
			if _, err := tx.ExecContext(ctx, qDeletePossession, scope); err != nil {
				return translate(err)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO events(scope, files, at) VALUES (?, ?, ?)`,
			scope, index.JoinHashes(keys), time.Now().UnixNano())
		return translate(err)
	})
	if err != nil {
		return 0, fmt.Errorf("delete in %q: %w", scope, err)
	}
	return removed, nil
}

// VisibleFiles implements index.Lifecycle.
func (db *DB) VisibleFiles(ctx context.Context, after index.VisibleKey, limit int) ([]index.VisibleFile, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > index.MaxVisiblePage {
		limit = index.MaxVisiblePage
	}
	rows, err := db.r.QueryContext(ctx, qVisibleFiles, after.File[:], after.Scope, limit)
	if err != nil {
		return nil, fmt.Errorf("visible: %w", translate(err))
	}
	defer rows.Close()
	var out []index.VisibleFile
	for rows.Next() {
		var (
			v    index.VisibleFile
			file []byte
		)
		if err := rows.Scan(&v.Scope, &file, &v.Record); err != nil {
			return nil, fmt.Errorf("visible: %w", translate(err))
		}
		if v.File, err = index.HashFromBytes(file); err != nil {
			return nil, fmt.Errorf("visible: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("visible: %w", translate(err))
	}
	return out, nil
}

// Garbage collection (index.Lifecycle). Every write below runs on the one writer connection,
// so a Sweep is serialised with every registration and PutXorb by construction.

const (
	qFilesScan = `SELECT f.hash, f.record, EXISTS (SELECT 1 FROM visibility v WHERE v.file = f.hash)
FROM files f WHERE f.hash > ? ORDER BY f.hash LIMIT ?`
	qXorbsScan = `SELECT x.hash, x.stored_size, c.at FROM xorbs x LEFT JOIN condemned c ON c.xorb = x.hash
WHERE x.hash > ? ORDER BY x.hash LIMIT ?`
	qCondemn       = `INSERT INTO condemned(xorb, at) SELECT ?, ? WHERE EXISTS (SELECT 1 FROM xorbs WHERE hash = ?) ON CONFLICT DO NOTHING`
	qRevive        = `DELETE FROM condemned WHERE xorb = ?`
	qCondemnedAt   = `SELECT at FROM condemned WHERE xorb = ?`
	qFileVisible   = `SELECT 1 FROM visibility WHERE file = ? LIMIT 1`
	qDropDeadFile  = `DELETE FROM files WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM visibility WHERE file = ?)`
	qDropXorb      = `DELETE FROM xorbs WHERE hash = ?`
	qLayoutOf      = `SELECT layout FROM xorbs WHERE hash = ?`
	qDropDedup     = `DELETE FROM dedup WHERE chunk = ?`
	qAddSwept      = `INSERT INTO swept(xorb, at, done) VALUES (?, ?, 0) ON CONFLICT (xorb) DO UPDATE SET at = excluded.at, done = 0`
	qSweptPending  = `SELECT xorb FROM swept WHERE done = 0 ORDER BY xorb LIMIT ?`
	qSweptDone     = `UPDATE swept SET done = 1 WHERE xorb = ?`
	qSweptState    = `SELECT done FROM swept WHERE xorb = ?`
	qDropSwept     = `DELETE FROM swept WHERE xorb = ?`
	qCollectedPre  = `SELECT xorb FROM condemned WHERE xorb IN (?`
	qCollectedPre2 = `SELECT xorb FROM swept WHERE xorb IN (?`
)

func scanLimit(limit int) int {
	if limit <= 0 || limit > index.MaxScanPage {
		return index.MaxScanPage
	}
	return limit
}

// Files implements index.Lifecycle.
func (db *DB) Files(ctx context.Context, after hash.Hash, limit int) ([]index.FileEntry, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	rows, err := db.r.QueryContext(ctx, qFilesScan, after[:], scanLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("files: %w", translate(err))
	}
	defer rows.Close()
	var out []index.FileEntry
	for rows.Next() {
		var (
			e index.FileEntry
			h []byte
		)
		if err := rows.Scan(&h, &e.Record, &e.Visible); err != nil {
			return nil, fmt.Errorf("files: %w", translate(err))
		}
		if e.Hash, err = index.HashFromBytes(h); err != nil {
			return nil, fmt.Errorf("files: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("files: %w", translate(err))
	}
	return out, nil
}

// Xorbs implements index.Lifecycle.
func (db *DB) Xorbs(ctx context.Context, after hash.Hash, limit int) ([]index.XorbEntry, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	rows, err := db.r.QueryContext(ctx, qXorbsScan, after[:], scanLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("xorbs: %w", translate(err))
	}
	defer rows.Close()
	var out []index.XorbEntry
	for rows.Next() {
		var (
			e    index.XorbEntry
			h    []byte
			size int64
			at   sql.NullInt64
		)
		if err := rows.Scan(&h, &size, &at); err != nil {
			return nil, fmt.Errorf("xorbs: %w", translate(err))
		}
		if e.Hash, err = index.HashFromBytes(h); err != nil {
			return nil, fmt.Errorf("xorbs: %w", err)
		}
		e.StoredSize = uint64(size)
		if at.Valid {
			e.Condemned = time.Unix(0, at.Int64).UTC()
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("xorbs: %w", translate(err))
	}
	return out, nil
}

// eachHash runs q with each of hs (and the extra arguments after it) inside tx.
func eachHash(ctx context.Context, tx *sql.Tx, q string, hs []hash.Hash, args func(h hash.Hash) []any) error {
	if len(hs) == 0 {
		return nil
	}
	st, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return translate(err)
	}
	defer st.Close()
	for _, h := range hs {
		if _, err := st.ExecContext(ctx, args(h)...); err != nil {
			return translate(err)
		}
	}
	return nil
}

// Condemn implements index.Lifecycle.
func (db *DB) Condemn(ctx context.Context, xs []hash.Hash, at time.Time) error {
	keys := index.SortedUnique(xs)
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return eachHash(ctx, tx, qCondemn, keys, func(h hash.Hash) []any { return []any{h[:], at.UnixNano(), h[:]} })
	})
	if err != nil {
		return fmt.Errorf("condemn: %w", err)
	}
	return nil
}

// Revive implements index.Lifecycle.
func (db *DB) Revive(ctx context.Context, xs []hash.Hash) error {
	keys := index.SortedUnique(xs)
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return eachHash(ctx, tx, qRevive, keys, func(h hash.Hash) []any { return []any{h[:]} })
	})
	if err != nil {
		return fmt.Errorf("revive: %w", err)
	}
	return nil
}

// Sweep implements index.Lifecycle.
func (db *DB) Sweep(ctx context.Context, cands []index.SweepCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	if len(cands) > index.MaxSweep {
		return nil, fmt.Errorf("%w: sweep of %d xorbs, at most %d", index.ErrInvalid, len(cands), index.MaxSweep)
	}
	var swept []hash.Hash
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		swept = swept[:0]
		now := time.Now().UnixNano()
		for _, c := range cands {
			if ok, err := sweepable(ctx, tx, qCondemnedAt, c.Xorb, condemnedBefore, c.DeadFiles); err != nil {
				return err
			} else if !ok {
				continue
			}
			for _, f := range c.DeadFiles {
				if _, err := tx.ExecContext(ctx, qDropDeadFile, f[:], f[:]); err != nil {
					return translate(err)
				}
			}
			if err := dropDedupOf(ctx, tx, c.Xorb); err != nil {
				return err
			}
			// Every scope's possession row of it: a proof of holding bytes that are gone.
			for _, q := range []string{qDropXorb, qRevive, qDropPossessionOf} {
				if _, err := tx.ExecContext(ctx, q, c.Xorb[:]); err != nil {
					return translate(err)
				}
			}
			if _, err := tx.ExecContext(ctx, qAddSwept, c.Xorb[:], now); err != nil {
				return translate(err)
			}
			swept = append(swept, c.Xorb)
		}
		if len(swept) == 0 {
			return nil
		}
		// One event naming the xorbs, so edges evict their bytes.
		_, err := tx.ExecContext(ctx, `INSERT INTO events(scope, files, at, xorbs) VALUES (?, NULL, ?, ?)`,
			index.SweepScope, now, index.JoinHashes(swept))
		return translate(err)
	})
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	return swept, nil
}

// dropDedupOf deletes the dedup entries of the chunks of xorb x (inside Sweep): an entry left
// pointing at a shard whose xorbs are gone would answer nothing and, since the first entry of a
// chunk wins, keep the chunk from ever being offered again.
func dropDedupOf(ctx context.Context, tx *sql.Tx, x hash.Hash) error {
	var b []byte
	if err := tx.QueryRowContext(ctx, qLayoutOf, x[:]).Scan(&b); err != nil {
		return translate(err)
	}
	ls, err := index.DecodeLayouts(map[hash.Hash][]byte{x: b})
	if err != nil {
		return err
	}
	return eachHash(ctx, tx, qDropDedup, ls[x].ChunkHashes, func(h hash.Hash) []any { return []any{h[:]} })
}

// Swept implements index.Lifecycle.
func (db *DB) Swept(ctx context.Context, limit int) ([]hash.Hash, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	rows, err := db.r.QueryContext(ctx, qSweptPending, scanLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("swept: %w", translate(err))
	}
	defer rows.Close()
	var out []hash.Hash
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("swept: %w", translate(err))
		}
		h, err := index.HashFromBytes(k)
		if err != nil {
			return nil, fmt.Errorf("swept: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("swept: %w", translate(err))
	}
	return out, nil
}

// ObjectsDeleted implements index.Lifecycle.
func (db *DB) ObjectsDeleted(ctx context.Context, xs []hash.Hash) error {
	keys := index.SortedUnique(xs)
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return eachHash(ctx, tx, qSweptDone, keys, func(h hash.Hash) []any { return []any{h[:]} })
	})
	if err != nil {
		return fmt.Errorf("objects deleted: %w", err)
	}
	return nil
}

// putXorbGate runs inside PutXorb's write, before the insert: a xorb whose object deletion is
// pending is refused (retryable); one whose object is gone may be stored again.
func putXorbGate(ctx context.Context, tx *sql.Tx, h hash.Hash) error {
	var done bool
	switch err := tx.QueryRowContext(ctx, qSweptState, h[:]).Scan(&done); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return translate(err)
	case !done:
		return fmt.Errorf("%w: xorb %s is being garbage-collected; retry shortly", index.ErrUnavailable, h)
	}
	_, err := tx.ExecContext(ctx, qDropSwept, h[:])
	return translate(err)
}

// reviveRefs runs inside RegisterShard's write: the referenced xorbs that are condemned are
// revived; one that was swept (and not stored again) refuses the registration.
func reviveRefs(ctx context.Context, tx *sql.Tx, refs []hash.Hash) error {
	if len(refs) == 0 {
		return nil
	}
	chk, err := tx.PrepareContext(ctx, qSweptState)
	if err != nil {
		return translate(err)
	}
	defer chk.Close()
	for _, h := range refs {
		var done bool
		switch err := chk.QueryRowContext(ctx, h[:]).Scan(&done); {
		case err == nil:
			return fmt.Errorf("%w: %w: %s", index.ErrNotFound, index.ErrXorbGone, h)
		case !errors.Is(err, sql.ErrNoRows):
			return translate(err)
		}
	}
	return eachHash(ctx, tx, qRevive, refs, func(h hash.Hash) []any { return []any{h[:]} })
}

// uncollected returns xs without the condemned and swept xorbs, order kept (DedupXorbs).
func (db *DB) uncollected(ctx context.Context, xs []hash.Hash) ([]hash.Hash, error) {
	if len(xs) == 0 {
		return xs, nil
	}
	gone := make(map[hash.Hash]bool)
	keys := index.SortedUnique(xs)
	for len(keys) > 0 {
		n := min(len(keys), layoutsPerQuery)
		args := make([]any, n)
		for i := range keys[:n] {
			args[i] = keys[i][:]
		}
		keys = keys[n:]
		tail := strings.Repeat(`,?`, n-1) + `)`
		for _, pre := range []string{qCollectedPre, qCollectedPre2} {
			if err := db.hashesInto(ctx, pre+tail, args, gone); err != nil {
				return nil, err
			}
		}
	}
	if len(gone) == 0 {
		return xs, nil
	}
	out := make([]hash.Hash, 0, len(xs))
	for _, x := range xs {
		if !gone[x] {
			out = append(out, x)
		}
	}
	return out, nil
}

// hashesInto adds the hashes the single-column query q returns to out (read connection).
func (db *DB) hashesInto(ctx context.Context, q string, args []any, out map[hash.Hash]bool) error {
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return translate(err)
		}
		h, err := index.HashFromBytes(k)
		if err != nil {
			return err
		}
		out[h] = true
	}
	return translate(rows.Err())
}

// Dead shards (index.ShardLifecycle). SweepShards runs on the one writer connection, so it is
// serialised with every registration.
const (
	qShardsScan = `SELECT s.hash, s.xorbs, s.files, s.files IS NOT NULL, EXISTS (SELECT 1 FROM dedup d WHERE d.shard = s.hash), s.at, s.body IS NOT NULL, c.at FROM shards s
LEFT JOIN condemned_shards c ON c.shard = s.hash WHERE s.hash > ? ORDER BY s.hash LIMIT ?`
	qCondemnShard     = `INSERT INTO condemned_shards(shard, at) SELECT ?, ? WHERE EXISTS (SELECT 1 FROM shards WHERE hash = ?) ON CONFLICT DO NOTHING`
	qReviveShard      = `DELETE FROM condemned_shards WHERE shard = ?`
	qShardCondemnedAt = `SELECT at FROM condemned_shards WHERE shard = ?`
	qDropShardDedup   = `DELETE FROM dedup WHERE shard = ?`
	qDropShard        = `DELETE FROM shards WHERE hash = ?`
	qDropPossessionOf = `DELETE FROM possession WHERE xorb = ?`
)

// Shards implements index.ShardLifecycle.
func (db *DB) Shards(ctx context.Context, after hash.Hash, limit int) ([]index.ShardEntry, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	rows, err := db.r.QueryContext(ctx, qShardsScan, after[:], scanLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("shards: %w", translate(err))
	}
	defer rows.Close()
	var out []index.ShardEntry
	for rows.Next() {
		var (
			e         index.ShardEntry
			h, xs, fs []byte
			at        int64
			condemned sql.NullInt64
		)
		if err := rows.Scan(&h, &xs, &fs, &e.FilesKnown, &e.Named, &at, &e.Inline, &condemned); err != nil {
			return nil, fmt.Errorf("shards: %w", translate(err))
		}
		if e.Hash, err = index.HashFromBytes(h); err != nil {
			return nil, fmt.Errorf("shards: %w", err)
		}
		if e.Xorbs, err = index.SplitHashes(xs); err != nil {
			return nil, fmt.Errorf("shards: %s: %w", e.Hash, err)
		}
		if e.FilesKnown {
			if e.Files, err = index.SplitHashes(fs); err != nil {
				return nil, fmt.Errorf("shards: %s: %w", e.Hash, err)
			}
		}
		e.Registered = time.Unix(0, at).UTC()
		if condemned.Valid {
			e.Condemned = time.Unix(0, condemned.Int64).UTC()
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("shards: %w", translate(err))
	}
	return out, nil
}

// CondemnShards implements index.ShardLifecycle.
func (db *DB) CondemnShards(ctx context.Context, condemn, revive []hash.Hash, at time.Time) error {
	c, r := index.SortedUnique(condemn), index.SortedUnique(revive)
	if len(c) == 0 && len(r) == 0 {
		return nil
	}
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := eachHash(ctx, tx, qReviveShard, r, func(h hash.Hash) []any { return []any{h[:]} }); err != nil {
			return err
		}
		return eachHash(ctx, tx, qCondemnShard, c, func(h hash.Hash) []any { return []any{h[:], at.UnixNano(), h[:]} })
	})
	if err != nil {
		return fmt.Errorf("condemn shards: %w", err)
	}
	return nil
}

// SweepShards implements index.ShardLifecycle.
func (db *DB) SweepShards(ctx context.Context, cands []index.ShardCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	if len(cands) > index.MaxSweep {
		return nil, fmt.Errorf("%w: sweep of %d shards, at most %d", index.ErrInvalid, len(cands), index.MaxSweep)
	}
	var swept []hash.Hash
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		swept = swept[:0]
		for _, c := range cands {
			if ok, err := sweepable(ctx, tx, qShardCondemnedAt, c.Shard, condemnedBefore, c.Files); err != nil {
				return err
			} else if !ok {
				continue
			}
			for _, q := range []string{qDropShardDedup, qDropShard, qReviveShard} {
				if _, err := tx.ExecContext(ctx, q, c.Shard[:]); err != nil {
					return translate(err)
				}
			}
			for _, f := range c.Files {
				if _, err := tx.ExecContext(ctx, qDropDeadFile, f[:], f[:]); err != nil {
					return translate(err)
				}
			}
			swept = append(swept, c.Shard)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sweep shards: %w", err)
	}
	return swept, nil
}

// sweepable reports, inside the writer's transaction, whether the condemned row of key (looked up
// with qAt: a xorb's or a shard's condemnation time) was condemned before condemnedBefore and none
// of files is visible again. A row no longer condemned was revived or already swept; a file
// visible again makes it live, and the next mark revives it.
func sweepable(ctx context.Context, tx *sql.Tx, qAt string, key hash.Hash, condemnedBefore time.Time, files []hash.Hash) (bool, error) {
	var at int64
	switch err := tx.QueryRowContext(ctx, qAt, key[:]).Scan(&at); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, translate(err)
	}
	if at >= condemnedBefore.UnixNano() {
		return false, nil
	}
	for _, f := range files {
		var one int
		switch err := tx.QueryRowContext(ctx, qFileVisible, f[:]).Scan(&one); {
		case err == nil:
			return false, nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, translate(err)
		}
	}
	return true, nil
}
