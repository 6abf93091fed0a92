package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ExplainLookups fills every table with n synthetic rows (1,000 scopes), analyzes them and
// returns, for every lookup statement, the text of its EXPLAIN.
func (db *DB) ExplainLookups(ctx context.Context, n int) (map[string]string, error) {
	fill := []string{
		`INSERT INTO xorbs SELECT sha256(i::text::bytea), i, '\x01' FROM generate_series(1, $1) i`,
		`INSERT INTO files SELECT sha256(i::text::bytea), '\x01' FROM generate_series(1, $1) i`,
		`INSERT INTO visibility SELECT 'models/s/' || (i % 1000), sha256(i::text::bytea) FROM generate_series(1, $1) i`,
		`INSERT INTO shards(hash, scope, xorbs, chunks) SELECT sha256(i::text::bytea), 'models/s/' || (i % 1000), '', sha256((-i)::text::bytea) FROM generate_series(1, $1) i`,
		`INSERT INTO dedup SELECT sha256((-i)::text::bytea), sha256(i::text::bytea) FROM generate_series(1, $1) i`,
		`INSERT INTO events(scope) SELECT 'models/s/' || (i % 1000) FROM generate_series(1, $1) i`,
		`INSERT INTO possession SELECT 'models/s/' || (i % 1000), sha256(i::text::bytea) FROM generate_series(1, $1) i`,
	}
	for _, q := range fill {
		if _, err := db.pool.Exec(ctx, q, n); err != nil {
			return nil, err
		}
	}
	if _, err := db.pool.Exec(ctx, `ANALYZE xorbs, files, visibility, shards, dedup, events, possession`); err != nil {
		return nil, err
	}
	k := make([]byte, 32)
	qs := map[string]struct {
		q    string
		args []any
	}{
		"XorbSize":     {qXorbSize, []any{k}},
		"Layouts":      {qLayouts, []any{[][]byte{k, k, k}}},
		"File":         {qFile, []any{"models/s/7", k}},
		"Dedup":        {qDedup, []any{k}},
		"DedupEntry":   {qDedupEntry, []any{k}},
		"DedupEntries": {qDedupEntries, []any{[][]byte{k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k}}},
		"CollectedOf":  {qCollectedOf, []any{[][]byte{k, k}}},
		"ShardBody":    {qBody, []any{k}},
		"Events":       {qEvents, []any{int64(5), 10}},
		"HideScope":    {qHideScope, []any{"models/s/7"}},
		"HideFiles":    {qHideFiles, []any{"models/s/7", [][]byte{k}}},
		"Possessed":    {qPossessed, []any{"models/s/7", [][]byte{k, k}}},
		// The collector's deletes by the secondary keys (migration 0006), and the dedup entries
		// of shards by their chunk lists (migration 0007).
		"DropShardDedup":   {qDropShardDedup, []any{[][]byte{k, k}}},
		"ShardsScan":       {qShardsScan, []any{k, 100}},
		"DropPossessionOf": {qDropPossessionOf, []any{[][]byte{k, k}}},
		// The lookups of visibility by file alone, a prefix of its primary key (file, scope)
		// (migration 0008). (The collector's qFilesScan is left out: at this size the planner
		// rightly hashes the whole small table for its EXISTS.)
		"VisibleAny": {qVisibleAny, []any{[][]byte{k, k}}},
		"DropDead":   {qDropDead, []any{[][]byte{k, k}}},
		"Visible":    {qVisible, []any{"models/s/7", k}},
		// Usage accounting's pages, in the primary key's order.
		"VisibleFiles": {qVisibleFiles, []any{"models/s/7", k, 1000}},
	}
	out := make(map[string]string, len(qs))
	for name, q := range qs {
		rows, err := db.pool.Query(ctx, "EXPLAIN "+q.q, q.args...)
		if err != nil {
			return nil, err
		}
		var lines []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				rows.Close()
				return nil, err
			}
			lines = append(lines, line)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out[name] = strings.Join(lines, "\n")
	}
	return out, nil
}

// FreshSchema creates an empty schema for t, dropped when t ends, and returns a DSN whose
// connections use it.
func FreshSchema(t testing.TB) string {
	t.Helper()
	dsn := testenv.Require(t, testenv.PostgresDSN)
	var b [6]byte
	rand.Read(b[:])
	schema := "xet_test_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background() // t.Context() is canceled before cleanups run
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("connect to drop %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL: %q", testenv.PostgresDSN, dsn)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// DedupNaming counts the dedup entries naming shard (indextest checks a shard's sweep leaves
// none behind: they would answer nothing, through a join, and stay forever).
func (db *DB) DedupNaming(ctx context.Context, shard hash.Hash) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM dedup WHERE shard = $1`, shard[:]).Scan(&n)
	return n, err
}

// MigrateTo applies the embedded migrations up to version v (inclusive) to the schema of dsn,
// as an origin of that version would have left it.
func MigrateTo(ctx context.Context, dsn string, v int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE schema_version (version integer PRIMARY KEY)`); err != nil {
			return err
		}
		return applyMigrations(ctx, tx, 0, v)
	})
}

// RegisterHOT commits rs as one batch in a transaction of its own (qRegister, as a registrar
// does) and returns how many dedup rows that transaction updated in all and how many of those
// updates were heap-only (no new index entries), from the transaction's own statistics.
func (db *DB) RegisterHOT(ctx context.Context, rs ...*index.Registration) (updated, hot int64, err error) {
	ops := make([]*regOp, len(rs))
	for i, r := range rs {
		b, err := index.NewBatch(r)
		if err != nil {
			return 0, 0, err
		}
		ops[i] = &regOp{ctx: ctx, b: b}
	}
	// The counters are the backend's pending ones (they may include earlier transactions not
	// yet flushed): the difference across the statement, inside the transaction, is its own.
	const qCounts = `SELECT pg_stat_get_xact_tuples_updated('dedup'::regclass), pg_stat_get_xact_tuples_hot_updated('dedup'::regclass)`
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var u0, h0 int64
		if err := tx.QueryRow(ctx, qCounts).Scan(&u0, &h0); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qRegister, registerArgs(ops)...); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, qCounts).Scan(&updated, &hot); err != nil {
			return err
		}
		updated, hot = updated-u0, hot-h0
		return nil
	})
	return updated, hot, err
}

// WaitDedupFilter starts the dedup filter if it is not yet and waits until a filter is in use
// and no build is under way.
func (db *DB) WaitDedupFilter(ctx context.Context) error {
	var probe hash.Hash
	for {
		db.DedupAbsent(probe)
		f := db.filter
		f.mu.Lock()
		ready := f.cur.Load() != nil && f.pending == nil
		f.mu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// DedupChannel is the dedup filters' notification channel.
func (db *DB) DedupChannel() string { return db.channel }

// DedupListenerName is the listener session's application_name.
const DedupListenerName = dedupListenerName
