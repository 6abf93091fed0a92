package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestDedupTakeoverHeapOnly: a registration taking over dedup entries (newest wins) updates
// them without new index entries (heap-only updates: no index on dedup(shard), room left by the
// fillfactor), and one whose entries already name its shard writes no new row versions.
func TestDedupTakeoverHeapOnly(t *testing.T) {
	db := open(t)
	ctx := t.Context()
	g := indextest.NewGen(70)
	chunks := g.Hashes(40)
	const scope = "models/acme/hot"
	a := &index.Registration{Shard: g.Hash(), Scope: scope, Xorbs: g.Hashes(1), Dedup: chunks}
	b := &index.Registration{Shard: g.Hash(), Scope: scope, Xorbs: g.Hashes(1), Dedup: chunks}
	if up, hot, err := db.RegisterHOT(ctx, a); err != nil || up != 0 || hot != 0 {
		t.Fatalf("first registration: %d updates (%d heap-only), %v; want none", up, hot, err)
	}
	up, hot, err := db.RegisterHOT(ctx, b)
	if err != nil || up != int64(len(chunks)) || hot != up {
		t.Fatalf("taking over %d entries: %d updates, %d of them heap-only, %v; want all heap-only", len(chunks), up, hot, err)
	}
	if xs, err := db.DedupXorbs(ctx, chunks[7]); err != nil || !slices.Equal(xs, b.Xorbs) {
		t.Fatalf("DedupXorbs after the takeover = %v, %v; want the newest shard's %v", xs, err, b.Xorbs)
	}
	if up, _, err := db.RegisterHOT(ctx, b); err != nil || up != 0 {
		t.Fatalf("registering the same shard again: %d dedup updates, %v; want none", up, err)
	}
}

// TestMigrationDedupChunks: migration 0007 on a database of version 6 records, for each existing
// shard, the entries naming it then, so the collector still finds them without dedup(shard); a
// legacy shard registered again takes its full list (and is not reported new); a sweep removes
// exactly the entries naming the swept shard.
func TestMigrationDedupChunks(t *testing.T) {
	ctx := t.Context()
	dsn := postgres.FreshSchema(t)
	if err := postgres.MigrateTo(ctx, dsn, 6); err != nil {
		t.Fatal(err)
	}
	g := indextest.NewGen(71)
	x := g.Hash()
	s1, s2, s3 := g.Hash(), g.Hash(), g.Hash()
	c := g.Hashes(4) // c0, c1 name s1; c2 named s1 and was taken over by s2; c3 names s2
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []hash.Hash{s1, s2, s3} {
		if _, err := conn.Exec(ctx, `INSERT INTO shards(hash, scope, xorbs, files) VALUES ($1, 'models/acme/old', $2, '')`, s[:], x[:]); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range []hash.Hash{s1, s1, s2, s2} {
		if _, err := conn.Exec(ctx, `INSERT INTO dedup(chunk, shard) VALUES ($1, $2)`, c[i][:], s[:]); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)

	db, err := postgres.Open(ctx, postgres.Options{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	named := func() map[hash.Hash]bool {
		t.Helper()
		es, err := db.Shards(ctx, hash.Hash{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[hash.Hash]bool{}
		for _, e := range es {
			out[e.Hash] = e.Named
		}
		return out
	}
	if n := named(); len(n) != 3 || !n[s1] || !n[s2] || n[s3] {
		t.Fatalf("Named after the migration = %v; want s1, s2 named, s3 not", n)
	}
	// s2 registered again (same entries c2, c3): not new, and its row takes the full list.
	if ins, err := db.RegisterShard(ctx, &index.Registration{Shard: s2, Scope: "models/acme/old", Xorbs: []hash.Hash{x}, Dedup: c[2:]}); err != nil || ins {
		t.Fatalf("registering a legacy shard again = %v, %v; want not new", ins, err)
	}
	// s1's entries are taken over but for c0; then s1 is swept: c0 goes, the others stay.
	taker := g.Hash()
	if _, err := db.RegisterShard(ctx, &index.Registration{Shard: taker, Scope: "models/acme/new", Xorbs: []hash.Hash{x}, Dedup: c[1:2]}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	if err := db.CondemnShards(ctx, []hash.Hash{s1, s2}, nil, t0); err != nil {
		t.Fatal(err)
	}
	got, err := db.SweepShards(ctx, []index.ShardCandidate{{Shard: s1}, {Shard: s2}}, time.Now())
	if err != nil || len(got) != 2 {
		t.Fatalf("SweepShards = %v, %v", got, err)
	}
	for _, w := range []struct {
		shard hash.Hash
		n     int
	}{{s1, 0}, {s2, 0}, {taker, 1}} {
		if n, err := db.DedupNaming(ctx, w.shard); err != nil || n != w.n {
			t.Fatalf("entries naming %s after the sweep: %d, %v; want %d", w.shard, n, err, w.n)
		}
	}
	if xs, err := db.DedupXorbs(ctx, c[1]); err != nil || !slices.Equal(xs, []hash.Hash{x}) {
		t.Fatalf("DedupXorbs of the entry taken over = %v, %v", xs, err)
	}
	var left int
	if err := pgxCount(ctx, dsn, `SELECT count(*) FROM dedup`, &left); err != nil || left != 1 {
		t.Fatalf("dedup rows left: %d, %v; want 1 (the taker's)", left, err)
	}
}

func pgxCount(ctx context.Context, dsn, q string, n *int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, q).Scan(n)
}
