package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Lifecycle statements (index.Lifecycle).
const (
	qDeletePossession = `DELETE FROM possession WHERE scope = $1`
	// qVisibleFiles pages in (file, scope) order, the primary key's (migration 0008).
	qVisibleFiles = `SELECT v.scope, v.file, f.record FROM visibility v JOIN files f ON f.hash = v.file
WHERE (v.file, v.scope) > ($2, $1) ORDER BY v.file, v.scope LIMIT $3`
)

// Delete implements index.Lifecycle.
func (db *DB) Delete(ctx context.Context, scope string, files []hash.Hash) (int, error) {
	if err := index.CheckScope(scope); err != nil {
		return 0, err
	}
	if err := db.check(); err != nil {
		return 0, err
	}
	keys := index.SortedUnique(files)
	var removed int
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// The events lock first, as Hide takes it: event order is commit order.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockEvents); err != nil {
			return err
		}
		var (
			tag pgconn.CommandTag
			err error
		)
		if len(keys) == 0 {
			tag, err = tx.Exec(ctx, qHideScope, scope)
		} else {
			tag, err = tx.Exec(ctx, qHideFiles, scope, hashArgs(keys))
		}
		if err != nil {
			return err
		}
		removed = int(tag.RowsAffected())
		if removed == 0 {
			// Rolled back by BeginFunc: nothing recorded, no event.
			return fmt.Errorf("%w: nothing visible to delete", index.ErrNotFound)
		}
		if len(keys) == 0 {
			if _, err := tx.Exec(ctx, qDeletePossession, scope); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, qAddEvent, scope, index.JoinHashes(keys))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete in %q: %w", scope, translate(err))
	}
	return removed, nil
}

// VisibleFiles implements index.Lifecycle.
func (db *DB) VisibleFiles(ctx context.Context, after index.VisibleKey, limit int) ([]index.VisibleFile, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > index.MaxVisiblePage {
		limit = index.MaxVisiblePage
	}
	var out []index.VisibleFile
	err := db.retry(ctx, func() error {
		out = nil
		rows, err := db.pool.Query(ctx, qVisibleFiles, after.Scope, after.File[:], limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				v    index.VisibleFile
				file []byte
			)
			if err := rows.Scan(&v.Scope, &file, &v.Record); err != nil {
				return err
			}
			if v.File, err = index.HashFromBytes(file); err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("visible: %w", translate(err))
	}
	return out, nil
}

// Garbage collection (index.Lifecycle). A Sweep transaction holds the exclusive advisory lock
// lockGC; every registration and PutXorb holds it shared for its own transaction. So a Sweep
// never interleaves with a registration that revives or references the xorbs it removes, nor
// with a PutXorb of one of them: each sees the other's result whole, or not at all.

// lockGC: "xetcdn" 3, collector vs registrations and xorb puts (transaction-scoped).
const lockGC int64 = 0x78657463646e0003

const (
	qFilesScan = `SELECT f.hash, f.record, EXISTS (SELECT 1 FROM visibility v WHERE v.file = f.hash)
FROM files f WHERE f.hash > $1 ORDER BY f.hash LIMIT $2`
	qXorbsScan = `SELECT x.hash, x.stored_size, c.at FROM xorbs x LEFT JOIN condemned c ON c.xorb = x.hash
WHERE x.hash > $1 ORDER BY x.hash LIMIT $2`
	qCondemn = `INSERT INTO condemned(xorb, at)
SELECT x.hash, $2 FROM xorbs x WHERE x.hash = ANY($1::bytea[]) ORDER BY x.hash ON CONFLICT DO NOTHING`
	qRevive      = `DELETE FROM condemned WHERE xorb = ANY($1::bytea[])`
	qSweepPick   = `SELECT xorb FROM condemned WHERE xorb = ANY($1::bytea[]) AND at < $2 ORDER BY xorb FOR UPDATE`
	qVisibleAny  = `SELECT DISTINCT file FROM visibility WHERE file = ANY($1::bytea[])`
	qDropDead    = `DELETE FROM files f WHERE f.hash = ANY($1::bytea[]) AND NOT EXISTS (SELECT 1 FROM visibility v WHERE v.file = f.hash)`
	qDropXorbs   = `DELETE FROM xorbs WHERE hash = ANY($1::bytea[])`
	qDropDedup   = `DELETE FROM dedup WHERE chunk = ANY($1::bytea[])`
	qAddSwept    = `INSERT INTO swept(xorb, at) SELECT unnest($1::bytea[]), now() ON CONFLICT (xorb) DO UPDATE SET at = excluded.at, done = false`
	qSweptList   = `SELECT xorb FROM swept WHERE NOT done ORDER BY xorb LIMIT $1`
	qSweptDone   = `UPDATE swept SET done = true WHERE xorb = ANY($1::bytea[])`
	qSweptState  = `SELECT done FROM swept WHERE xorb = $1`
	qDropSwept   = `DELETE FROM swept WHERE xorb = $1`
	qSweptRefs   = `SELECT xorb FROM swept WHERE xorb = ANY($1::bytea[]) LIMIT 1`
	qLockGC      = `SELECT pg_advisory_xact_lock($1)`
	qLockGCShare = `SELECT pg_advisory_xact_lock_shared($1)`
)

func scanLimit(limit int) int {
	if limit <= 0 || limit > index.MaxScanPage {
		return index.MaxScanPage
	}
	return limit
}

// Files implements index.Lifecycle.
func (db *DB) Files(ctx context.Context, after hash.Hash, limit int) ([]index.FileEntry, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var out []index.FileEntry
	err := db.retry(ctx, func() error {
		out = nil
		rows, err := db.pool.Query(ctx, qFilesScan, after[:], scanLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e index.FileEntry
				h []byte
			)
			if err := rows.Scan(&h, &e.Record, &e.Visible); err != nil {
				return err
			}
			if e.Hash, err = index.HashFromBytes(h); err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("files: %w", translate(err))
	}
	return out, nil
}

// Xorbs implements index.Lifecycle.
func (db *DB) Xorbs(ctx context.Context, after hash.Hash, limit int) ([]index.XorbEntry, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var out []index.XorbEntry
	err := db.retry(ctx, func() error {
		out = nil
		rows, err := db.pool.Query(ctx, qXorbsScan, after[:], scanLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e    index.XorbEntry
				h    []byte
				size int64
				at   *time.Time
			)
			if err := rows.Scan(&h, &size, &at); err != nil {
				return err
			}
			if e.Hash, err = index.HashFromBytes(h); err != nil {
				return err
			}
			e.StoredSize = uint64(size)
			if at != nil {
				e.Condemned = at.UTC()
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("xorbs: %w", translate(err))
	}
	return out, nil
}

// Condemn implements index.Lifecycle.
func (db *DB) Condemn(ctx context.Context, xs []hash.Hash, at time.Time) error {
	if err := db.check(); err != nil {
		return err
	}
	keys := index.SortedUnique(xs)
	if len(keys) == 0 {
		return nil
	}
	err := db.retry(ctx, func() error { _, err := db.pool.Exec(ctx, qCondemn, hashArgs(keys), at); return err })
	if err != nil {
		return fmt.Errorf("condemn: %w", translate(err))
	}
	return nil
}

// Revive implements index.Lifecycle.
func (db *DB) Revive(ctx context.Context, xs []hash.Hash) error {
	if err := db.check(); err != nil {
		return err
	}
	keys := index.SortedUnique(xs)
	if len(keys) == 0 {
		return nil
	}
	err := db.retry(ctx, func() error { _, err := db.pool.Exec(ctx, qRevive, hashArgs(keys)); return err })
	if err != nil {
		return fmt.Errorf("revive: %w", translate(err))
	}
	return nil
}

// Sweep implements index.Lifecycle.
func (db *DB) Sweep(ctx context.Context, cands []index.SweepCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	if len(cands) > index.MaxSweep {
		return nil, fmt.Errorf("%w: sweep of %d xorbs, at most %d", index.ErrInvalid, len(cands), index.MaxSweep)
	}
	if err := db.check(); err != nil {
		return nil, err
	}
	files := make(map[hash.Hash][]hash.Hash, len(cands))
	for _, c := range cands {
		files[c.Xorb] = append(files[c.Xorb], c.DeadFiles...)
	}
	var swept []hash.Hash
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var dead []hash.Hash
		var err error
		if swept, dead, err = sweepPick(ctx, tx, qSweepPick, files, condemnedBefore); err != nil {
			return err
		}
		if len(swept) == 0 {
			return nil
		}
		// The dedup entries of the swept xorbs' chunks go too: an entry left pointing at a
		// shard whose xorbs are gone would answer nothing and, since the first entry of a chunk
		// wins, keep the chunk from ever being offered again.
		chunks, err := sweptChunks(ctx, tx, swept)
		if err != nil {
			return err
		}
		batch := &pgx.Batch{}
		if len(dead) > 0 {
			batch.Queue(qDropDead, hashArgs(index.SortedUnique(dead)))
		}
		if len(chunks) > 0 {
			batch.Queue(qDropDedup, hashArgs(chunks))
		}
		args := hashArgs(swept)
		batch.Queue(qDropXorbs, args)
		batch.Queue(qRevive, args)
		batch.Queue(qAddSwept, args)
		// One event naming the xorbs, so edges evict their bytes; the events lock after the
		// collector's (no other transaction takes both).
		batch.Queue(`SELECT pg_advisory_xact_lock($1)`, lockEvents)
		batch.Queue(`INSERT INTO events(scope, files, xorbs) VALUES ($1, NULL, $2)`, index.SweepScope, index.JoinHashes(swept))
		// Every scope's possession rows of the swept xorbs: a proof of holding bytes that are
		// gone. After the events lock, as a scope's Delete takes them (no lock-order cycle).
		batch.Queue(qDropPossessionOf, args)
		return tx.SendBatch(ctx, batch).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", translate(err))
	}
	return swept, nil
}

// sweptChunks returns the chunk hashes of the xorbs xs, sorted and unique, from their layouts.
func sweptChunks(ctx context.Context, tx pgx.Tx, xs []hash.Hash) ([]hash.Hash, error) {
	rows, err := tx.Query(ctx, qLayouts, hashArgs(xs))
	if err != nil {
		return nil, err
	}
	raw := map[hash.Hash][]byte{}
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return nil, err
		}
		h, err := index.HashFromBytes(k)
		if err != nil {
			rows.Close()
			return nil, err
		}
		raw[h] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	ls, err := index.DecodeLayouts(raw)
	if err != nil {
		return nil, err
	}
	var out []hash.Hash
	for _, l := range ls {
		out = append(out, l.ChunkHashes...)
	}
	return index.SortedUnique(out), nil
}

// txHashes runs a query returning one hash column inside tx.
func txHashes(ctx context.Context, tx pgx.Tx, q string, args ...any) ([]hash.Hash, error) {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanHashes(rows)
}

// scanHashes reads rows of one hash column.
func scanHashes(rows pgx.Rows) ([]hash.Hash, error) {
	var out []hash.Hash
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		h, err := index.HashFromBytes(k)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// Swept implements index.Lifecycle.
func (db *DB) Swept(ctx context.Context, limit int) ([]hash.Hash, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	set, err := db.hashSet(ctx, qSweptList, scanLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("swept: %w", translate(err))
	}
	out := make([]hash.Hash, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	return index.SortedUnique(out), nil
}

// ObjectsDeleted implements index.Lifecycle.
func (db *DB) ObjectsDeleted(ctx context.Context, xs []hash.Hash) error {
	if err := db.check(); err != nil {
		return err
	}
	keys := index.SortedUnique(xs)
	if len(keys) == 0 {
		return nil
	}
	err := db.retry(ctx, func() error { _, err := db.pool.Exec(ctx, qSweptDone, hashArgs(keys)); return err })
	if err != nil {
		return fmt.Errorf("objects deleted: %w", translate(err))
	}
	return nil
}

// putXorb is PutXorb's transaction: a xorb whose object deletion is pending is refused
// (retryable); one whose object is gone may be stored again.
func (db *DB) putXorb(ctx context.Context, h hash.Hash, size int64, layout []byte) (bool, error) {
	var inserted bool
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, qLockGCShare, lockGC); err != nil {
			return err
		}
		var done bool
		switch err := tx.QueryRow(ctx, qSweptState, h[:]).Scan(&done); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case !done:
			return fmt.Errorf("%w: xorb %s is being garbage-collected; retry shortly", index.ErrUnavailable, h)
		default:
			if _, err := tx.Exec(ctx, qDropSwept, h[:]); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, qPutXorb, h[:], size, layout)
		inserted = tag.RowsAffected() == 1
		return err
	})
	return inserted, err
}

// registerTx is a batch registration's transaction: under the shared collector lock, refuse
// if a referenced xorb was swept, revive the condemned ones, look up the dedup entries the
// batch inherits (Registration.Inherit), then register. Without inherited entries the lock,
// the check, the revival and the registration go in one round trip (a pgx batch inside the
// transaction); with them, the entry lookups join that first round trip, the condemned/swept
// check of the xorbs they offer is a second and the registration a third: for the whole batch,
// where each registration made one or two of its own before. When the check finds a swept
// xorb, the transaction is rolled back, registration and all.
func (db *DB) registerTx(ctx context.Context, refs []hash.Hash, ops []*regOp) (map[hash.Hash]bool, error) {
	var out map[hash.Hash]bool
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var gone []hash.Hash
		out = map[hash.Hash]bool{}
		var starts []hash.Hash
		for _, op := range ops {
			starts = append(starts, op.b.Inherit...)
		}
		starts = index.SortedUnique(starts)
		batch := &pgx.Batch{}
		batch.Queue(qLockGCShare, lockGC)
		var unpossessed []int
		if ri, rs, rx := requireArgs(ops); len(ri) > 0 {
			batch.Queue(qUnpossessed, ri, rs, rx).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var i int32
					if err := rows.Scan(&i); err != nil {
						return err
					}
					unpossessed = append(unpossessed, int(i))
				}
				return rows.Err()
			})
		}
		if len(refs) > 0 {
			ra := hashArgs(refs)
			batch.Queue(qSweptRefs, ra).Query(func(rows pgx.Rows) (err error) {
				gone, err = scanHashes(rows)
				return err
			})
			batch.Queue(qRevive, ra)
		}
		if len(starts) > 0 {
			// After the revival: a referenced xorb an entry offers is not condemned any more.
			offers := queueDedupEntries(batch, starts)
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return err
			}
			if len(unpossessed) > 0 {
				return &notPossessed{ops: unpossessed}
			}
			if len(gone) > 0 {
				return fmt.Errorf("%w: %w: %s", index.ErrNotFound, index.ErrXorbGone, gone[0])
			}
			collected, err := collectedOf(ctx, tx, offers)
			if err != nil {
				return err
			}
			for _, op := range ops {
				op.b.AddInherited(offeredBy(op.b.Inherit, offers, collected))
			}
			batch = &pgx.Batch{}
		}
		args := registerArgs(ops)
		batch.Queue(qRegister, args...).Query(func(rows pgx.Rows) error {
			hs, err := scanHashes(rows)
			for _, h := range hs {
				out[h] = true
			}
			return err
		})
		reserveSend(tx.Conn().PgConn().Frontend(), paramsSize(args)+bindSlack)
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return err
		}
		if len(unpossessed) > 0 {
			return &notPossessed{ops: unpossessed} // rolled back, registration and all
		}
		if len(gone) > 0 {
			return fmt.Errorf("%w: %w: %s", index.ErrNotFound, index.ErrXorbGone, gone[0])
		}
		return nil
	})
	return out, err
}

// bindSlack is what a Bind message and the messages queued with it take beyond the binary
// size of its array parameters (reserveSend): a length word per parameter, the statement's
// name, format codes, Describe, Execute and Sync, and the batch's small statements.
const bindSlack = 2048

// qUnpossessed returns the registrations of a batch (their index in it) whose scope does not
// possess one of the xorbs they require (index.Registration.Require): one primary-key probe of
// possession per (scope, xorb).
const qUnpossessed = `SELECT DISTINCT u.i FROM unnest($1::int4[], $2::text[], $3::bytea[]) AS u(i, sc, x)
WHERE NOT EXISTS (SELECT 1 FROM possession p WHERE p.scope = u.sc AND p.xorb = u.x)`

// requireArgs builds qUnpossessed's arrays from a batch: each required xorb with its op's index
// and scope.
func requireArgs(ops []*regOp) (is []int32, scopes textArray, xs byteaArray) {
	for i, op := range ops {
		for _, x := range op.b.Require {
			is, scopes, xs = append(is, int32(i)), append(scopes, op.b.Scope), append(xs, x[:])
		}
	}
	return is, scopes, xs
}

// notPossessed is registerTx's error when registrations of the batch (ops, indexes in it) lack
// a required xorb; the transaction was rolled back.
type notPossessed struct{ ops []int }

func (e *notPossessed) Error() string {
	return fmt.Sprintf("%d registrations lack a required xorb", len(e.ops))
}

// lockCollector: "xetcdn" 4, one garbage collection at a time (session-scoped).
const lockCollector int64 = 0x78657463646e0004

// LockCollector implements index.Lifecycle with a session advisory lock held on a connection
// taken from the pool for the run; Postgres drops it when that session ends (a killed origin).
func (db *DB) LockCollector(ctx context.Context) (func(), error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("collector lock: %w", translate(err))
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockCollector).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("collector lock: %w", translate(err))
	}
	if !ok {
		conn.Release()
		return nil, index.ErrCollectorBusy
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockCollector); err != nil {
			// The session may hold the lock still: close it rather than pool it.
			conn.Conn().Close(ctx)
		}
		conn.Release()
	}, nil
}

// Dead shards (index.ShardLifecycle). SweepShards holds lockGC exclusively, like Sweep, so a
// registration of the same shard (or of one of its files) is wholly before or after it.
//
// The dedup entries naming a shard are found from its row's chunk list (shards.chunks, migration
// 0007): one primary-key probe of dedup per listed chunk, keeping those that still name it. A row
// without a list (NULL: registered by an older replica after the migration) counts as named, so
// it is only collected once every xorb it offers is condemned or gone, and its sweep leaves its
// entries; they answer nothing (DedupXorbs joins the shard row) and the next registration of
// their chunks takes them over.
const (
	qShardsScan = `SELECT s.hash, s.xorbs, s.files, s.files IS NOT NULL,
	s.chunks IS NULL OR EXISTS (SELECT 1 FROM dedup d WHERE d.chunk = ANY(ARRAY(
		SELECT substring(s.chunks FROM i * 32 + 1 FOR 32) FROM generate_series(0, length(s.chunks) / 32 - 1) i)) AND d.shard = s.hash),
	s.at, s.body IS NOT NULL, c.at FROM shards s
LEFT JOIN condemned_shards c ON c.shard = s.hash WHERE s.hash > $1 ORDER BY s.hash LIMIT $2`
	qCondemnShards = `INSERT INTO condemned_shards(shard, at)
SELECT s.hash, $2 FROM shards s WHERE s.hash = ANY($1::bytea[]) ORDER BY s.hash ON CONFLICT DO NOTHING`
	qReviveShards    = `DELETE FROM condemned_shards WHERE shard = ANY($1::bytea[])`
	qSweepShardsPick = `SELECT shard FROM condemned_shards WHERE shard = ANY($1::bytea[]) AND at < $2 ORDER BY shard FOR UPDATE`
	// qDropShardDedup: the entries naming the shards $1 among the chunks their rows list (an
	// entry names a shard only if that shard's list has its chunk).
	qDropShardDedup = `DELETE FROM dedup WHERE chunk = ANY(ARRAY(SELECT substring(s.chunks FROM i * 32 + 1 FOR 32)
	FROM shards s, generate_series(0, length(s.chunks) / 32 - 1) i WHERE s.hash = ANY($1::bytea[]))) AND shard = ANY($1::bytea[])`
	qDropShards       = `DELETE FROM shards WHERE hash = ANY($1::bytea[])`
	qDropPossessionOf = `DELETE FROM possession WHERE xorb = ANY($1::bytea[])`
)

// Shards implements index.ShardLifecycle.
func (db *DB) Shards(ctx context.Context, after hash.Hash, limit int) ([]index.ShardEntry, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var out []index.ShardEntry
	err := db.retry(ctx, func() error {
		out = nil
		rows, err := db.pool.Query(ctx, qShardsScan, after[:], scanLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e         index.ShardEntry
				h, xs, fs []byte
				at        time.Time
				condemned *time.Time
			)
			if err := rows.Scan(&h, &xs, &fs, &e.FilesKnown, &e.Named, &at, &e.Inline, &condemned); err != nil {
				return err
			}
			if e.Hash, err = index.HashFromBytes(h); err != nil {
				return err
			}
			if e.Xorbs, err = index.SplitHashes(xs); err != nil {
				return fmt.Errorf("shard %s: %w", e.Hash, err)
			}
			if e.FilesKnown {
				if e.Files, err = index.SplitHashes(fs); err != nil {
					return fmt.Errorf("shard %s: %w", e.Hash, err)
				}
			}
			e.Registered = at.UTC()
			if condemned != nil {
				e.Condemned = condemned.UTC()
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("shards: %w", translate(err))
	}
	return out, nil
}

// CondemnShards implements index.ShardLifecycle.
func (db *DB) CondemnShards(ctx context.Context, condemn, revive []hash.Hash, at time.Time) error {
	if err := db.check(); err != nil {
		return err
	}
	c, r := index.SortedUnique(condemn), index.SortedUnique(revive)
	if len(c) == 0 && len(r) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if len(r) > 0 {
			batch.Queue(qReviveShards, hashArgs(r))
		}
		if len(c) > 0 {
			batch.Queue(qCondemnShards, hashArgs(c), at)
		}
		return tx.SendBatch(ctx, batch).Close()
	})
	if err != nil {
		return fmt.Errorf("condemn shards: %w", translate(err))
	}
	return nil
}

// SweepShards implements index.ShardLifecycle.
func (db *DB) SweepShards(ctx context.Context, cands []index.ShardCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	if len(cands) > index.MaxSweep {
		return nil, fmt.Errorf("%w: sweep of %d shards, at most %d", index.ErrInvalid, len(cands), index.MaxSweep)
	}
	if err := db.check(); err != nil {
		return nil, err
	}
	files := make(map[hash.Hash][]hash.Hash, len(cands))
	for _, c := range cands {
		files[c.Shard] = append(files[c.Shard], c.Files...)
	}
	var swept []hash.Hash
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var dead []hash.Hash
		var err error
		if swept, dead, err = sweepPick(ctx, tx, qSweepShardsPick, files, condemnedBefore); err != nil {
			return err
		}
		if len(swept) == 0 {
			return nil
		}
		args := hashArgs(swept)
		batch := &pgx.Batch{}
		batch.Queue(qDropShardDedup, args)
		batch.Queue(qDropShards, args)
		batch.Queue(qReviveShards, args)
		if len(dead) > 0 {
			batch.Queue(qDropDead, hashArgs(index.SortedUnique(dead)))
		}
		return tx.SendBatch(ctx, batch).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("sweep shards: %w", translate(err))
	}
	return swept, nil
}

// sweepPick takes the collector's lock in tx and picks, of the keys of files (xorbs or shards,
// each with the files whose visibility keeps it live), those qPick finds condemned before
// condemnedBefore and none of whose files is visible again (a visible one makes the key live; the
// next mark revives it). It returns the picked keys and their files.
func sweepPick(ctx context.Context, tx pgx.Tx, qPick string, files map[hash.Hash][]hash.Hash, condemnedBefore time.Time) (swept, dead []hash.Hash, err error) {
	if _, err := tx.Exec(ctx, qLockGC, lockGC); err != nil {
		return nil, nil, err
	}
	keys := make([]hash.Hash, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	picked, err := txHashes(ctx, tx, qPick, hashArgs(index.SortedUnique(keys)), condemnedBefore)
	if err != nil {
		return nil, nil, err
	}
	var all []hash.Hash
	for _, k := range picked {
		all = append(all, files[k]...)
	}
	visible := map[hash.Hash]bool{}
	if len(all) > 0 {
		vs, err := txHashes(ctx, tx, qVisibleAny, hashArgs(index.SortedUnique(all)))
		if err != nil {
			return nil, nil, err
		}
		for _, v := range vs {
			visible[v] = true
		}
	}
next:
	for _, k := range picked {
		for _, f := range files[k] {
			if visible[f] {
				continue next
			}
		}
		swept = append(swept, k)
		dead = append(dead, files[k]...)
	}
	return swept, dead, nil
}
