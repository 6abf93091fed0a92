package lifecycle

import (
	"bytes"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
)

// TestGCDeadShards (SQLite + local disk, the collector's clock moved instead of waiting): a
// dead shard (its file deleted, its xorb unreferenced) is not condemned while it is younger than
// the grace period, is condemned once older, and removed a grace period after that, with its
// dedup entry; a shard whose file is still visible (another scope, over the same xorb) and one
// whose file is a root are never condemned; condemned shards are revived when their file is
// visible again (or their entries offer a live xorb again).
func TestGCDeadShards(t *testing.T) {
	ctx := t.Context()
	ix, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "index.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	objs, err := objstore.NewLocal(filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	g := indextest.NewGen(7)
	reg := func(scope string, x hash.Hash) *index.Registration {
		rec := &recon.FileRecord{Hash: g.Hash(), Size: 10, Terms: []recon.Term{{Xorb: x, End: 1, RawBytes: 10, ByteEnd: 8}}}
		r := &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{rec}, Xorbs: []hash.Hash{x}, Dedup: g.Hashes(1)}
		if _, err := ix.RegisterShard(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	var ls []hash.Hash
	for range 3 {
		l := g.Layout(1)
		if _, err := ix.PutXorb(ctx, l, 10); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l.Hash)
	}
	// superseded: visible, but its one entry is taken over by a later shard (unnamed).
	superseded := reg("models/c", ls[2])
	taker := &index.Registration{Shard: g.Hash(), Scope: "models/c", Xorbs: []hash.Hash{ls[2]}, Dedup: superseded.Dedup}
	if _, err := ix.RegisterShard(ctx, taker); err != nil {
		t.Fatal(err)
	}
	dead := reg("models/a", ls[0])
	shared := reg("models/a", ls[1]) // its file deleted; b keeps the xorb and a visible file
	other := reg("models/b", ls[1])
	rooted := reg("models/a", ls[2]) // its file deleted but a root
	if _, err := ix.Delete(ctx, "models/a", nil); err != nil {
		t.Fatal(err)
	}
	const grace = time.Hour
	start := time.Now()
	run := func(at time.Duration) *Report {
		t.Helper()
		r, err := GC(ctx, ix, objs, GCOptions{Grace: grace, Now: func() time.Time { return start.Add(at) },
			Roots: []Roots{fileRoots{rooted.Files[0].Hash}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := run(0); r.Shards != 6 || r.ShardsCondemned != 0 {
		t.Fatalf("gc within the grace period: %+v; want 6 shards, none condemned", r)
	}
	// shared's entries offer ls[1], live through b: kept (the entries are useful).
	if r := run(2 * grace); r.ShardsCondemned != 1 || r.ShardsSwept != 0 {
		t.Fatalf("gc a grace period later: %+v; want only the dead shard condemned", r)
	}
	if r := run(4 * grace); r.ShardsSwept != 1 || r.Shards != 6 {
		t.Fatalf("gc two grace periods later: %+v; want the dead shard swept", r)
	}
	if _, err := ix.ShardBody(ctx, dead.Shard); err == nil {
		t.Fatal("the dead shard's row is still there")
	}
	if _, err := ix.DedupXorbs(ctx, dead.Dedup[0]); err == nil {
		t.Fatal("the dead shard's dedup entry is still there")
	}
	for _, r := range []*index.Registration{shared, other, rooted, superseded} {
		if _, err := ix.ShardBody(ctx, r.Shard); err != nil {
			t.Fatalf("shard %s: %v; want kept", r.Shard, err)
		}
	}
	// b's file goes too: shared and other become dead once their xorb is condemned (other's
	// entry still names it, but offers only that xorb); visible again, other is revived.
	if _, err := ix.Delete(ctx, "models/b", nil); err != nil {
		t.Fatal(err)
	}
	if r := run(5 * grace); r.ShardsCondemned != 2 {
		t.Fatalf("gc after b's delete: %+v; want shared and other condemned", r)
	}
	if _, err := ix.RegisterShard(ctx, other); err != nil {
		t.Fatal(err)
	}
	// other's file is visible again, so its xorb is live, so shared's entry offers a live xorb:
	// both revived.
	if r := run(7 * grace); r.ShardsSwept != 0 || r.ShardsSweepable != 0 || r.ShardsCondemned != 0 {
		t.Fatalf("gc after other's re-registration: %+v; want shared and other revived", r)
	}
	if r := run(9 * grace); r.ShardsCondemned != 0 || r.ShardsSwept != 0 || r.Shards != 5 {
		t.Fatalf("final gc: %+v; want shared, other, rooted, superseded and its taker kept, nothing condemned", r)
	}
	for _, r := range []*index.Registration{shared, other, rooted, superseded} {
		if _, err := ix.ShardBody(ctx, r.Shard); err != nil {
			t.Fatalf("shard %s at the end: %v; want kept", r.Shard, err)
		}
	}
}

// TestGCDeadShardsLegacyRows: a shard row registered before the index recorded its files (files
// NULL) has them read from its body — inline, or its object — so the same rules apply: the dead
// one (its file deleted) is collected with its object, the one whose file is visible is kept.
func TestGCDeadShardsLegacyRows(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "index.db")
	ix, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	objs, err := objstore.NewLocal(filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	g := indextest.NewGen(8)
	l := g.Layout(1)
	if _, err := ix.PutXorb(ctx, l, 10); err != nil {
		t.Fatal(err)
	}
	// Each registration's body is a shard naming its file (what ingest stores).
	reg := func(scope string, inline bool) *index.Registration {
		rec := &recon.FileRecord{Hash: g.Hash(), Size: 10, Terms: []recon.Term{{Xorb: l.Hash, End: 1, RawBytes: 10, ByteEnd: 8}}}
		body := (&shard.Shard{Files: []shard.File{{Hash: rec.Hash, Terms: []shard.Term{{Xorb: l.Hash, RawBytes: 10, End: 1}}}}}).AppendUpload(nil)
		r := &index.Registration{Shard: hash.Chunk(body), Scope: scope, Files: []*recon.FileRecord{rec}, Xorbs: []hash.Hash{l.Hash}, Dedup: g.Hashes(1)}
		if inline {
			r.Body = body
		} else if err := objs.Put(ctx, objstore.ShardKey(r.Shard), bytes.NewReader(body), int64(len(body))); err != nil {
			t.Fatal(err)
		}
		if _, err := ix.RegisterShard(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	deadInline, deadObject := reg("models/a", true), reg("models/a", false)
	live := reg("models/b", false)
	// Make them legacy rows: no files recorded.
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.ExecContext(ctx, `UPDATE shards SET files = NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Delete(ctx, "models/a", nil); err != nil {
		t.Fatal(err)
	}
	const grace = time.Hour
	start := time.Now()
	run := func(at time.Duration) *Report {
		t.Helper()
		r, err := GC(ctx, ix, objs, GCOptions{Grace: grace, Now: func() time.Time { return start.Add(at) }})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// l is live through b's file, so only "no entry names it" can make a shard dead: take the
	// dead shards' entries over.
	taker := &index.Registration{Shard: g.Hash(), Scope: "models/b", Xorbs: []hash.Hash{l.Hash},
		Dedup: append(append([]hash.Hash{}, deadInline.Dedup...), deadObject.Dedup...)}
	if _, err := ix.RegisterShard(ctx, taker); err != nil {
		t.Fatal(err)
	}
	if r := run(2 * grace); r.ShardsCondemned != 2 {
		t.Fatalf("first gc: %+v; want the two dead legacy shards condemned", r)
	}
	if r := run(4 * grace); r.ShardsSwept != 2 || r.ShardObjects != 1 {
		t.Fatalf("second gc: %+v; want both swept, one object deleted", r)
	}
	if _, err := objs.Stat(ctx, objstore.ShardKey(deadObject.Shard)); err == nil {
		t.Fatal("the dead shard's object is still stored")
	}
	if _, err := objs.Stat(ctx, objstore.ShardKey(live.Shard)); err != nil {
		t.Fatalf("the live shard's object: %v", err)
	}
	if _, err := ix.ShardBody(ctx, live.Shard); err != nil {
		t.Fatalf("the live legacy shard: %v", err)
	}
}
