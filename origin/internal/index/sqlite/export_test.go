package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index/chunkbloom"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ExplainLookups returns, for every lookup query, SQLite's query plan (the detail column of
// EXPLAIN QUERY PLAN, joined by "; ").
func (db *DB) ExplainLookups(ctx context.Context) (map[string]string, error) {
	k := make([]byte, 32)
	qs := map[string]struct {
		q    string
		args []any
	}{
		"XorbSize":      {qXorbSize, []any{k}},
		"Layouts":       {qLayoutsPrefix + ",?,?)", []any{k, k, k}},
		"File":          {qFile, []any{"s", k}},
		"Dedup":         {qDedup, []any{k}},
		"ShardBody":     {qBody, []any{k}},
		"Events":        {qEvents, []any{0, 10}},
		"HideScope":     {qHideScope, []any{"s"}},
		"HideFile":      {qHideFile, []any{"s", k}},
		"HasPossession": {qHasPossession, []any{"s", k}},
		"Possessed":     {qPossessedPre + ",?)", []any{"s", k, k}},
		// The collector's deletes by the secondary keys (migration 0005).
		"DropShardDedup":   {qDropShardDedup, []any{k}},
		"DropPossessionOf": {qDropPossessionOf, []any{k}},
		// Usage accounting's pages, in (file, scope) order: visibility_file's order.
		"VisibleFiles": {qVisibleFiles, []any{k, "s", 1000}},
	}
	out := make(map[string]string, len(qs))
	for name, q := range qs {
		rows, err := db.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q.q, q.args...)
		if err != nil {
			return nil, err
		}
		var details []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				rows.Close()
				return nil, err
			}
			details = append(details, detail)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out[name] = strings.Join(details, "; ")
	}
	return out, nil
}

// DedupNaming counts the dedup entries naming shard (indextest checks a shard's sweep leaves
// none behind: they would answer nothing, through a join, and stay forever).
func (db *DB) DedupNaming(ctx context.Context, shard hash.Hash) (int, error) {
	var n int
	err := db.r.QueryRowContext(ctx, `SELECT count(*) FROM dedup WHERE shard = ?`, shard[:]).Scan(&n)
	return n, err
}

// WaitDedupFilter waits until the dedup filter is built and no rebuild is under way, and
// returns the number of chunks the filter in use is sized for.
func (db *DB) WaitDedupFilter(ctx context.Context) (int64, error) {
	for {
		db.filter.mu.Lock()
		cur, pending := db.filter.cur.Load(), db.filter.pending
		db.filter.mu.Unlock()
		if cur != nil && pending == nil && !cur.Full() {
			return cur.Cap(), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// CloseReadPool closes the read connections: every read fails from then on.
func (db *DB) CloseReadPool() error { return db.r.Close() }

// SetBloomMinChunks sets the least size of a dedup filter and returns a function restoring it.
func SetBloomMinChunks(n int64) (restore func()) {
	old := chunkbloom.MinChunks
	chunkbloom.MinChunks = n
	return func() { chunkbloom.MinChunks = old }
}
