package indextest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// testCollectShards: the dead-shard protocol (index.ShardLifecycle) and the possession rows of
// swept xorbs. Shards lists every row with its files, offered xorbs and whether a dedup entry
// names it; CondemnShards condemns and revives; SweepShards removes only shards condemned before
// its cutoff none of whose files is visible, with the dedup entries naming them and their dead
// records, and never touches another shard's entries. Sweep drops every scope's possession rows
// of the xorbs it removes.
func testCollectShards(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(31)
	l := g.Layout(2)
	x := l.Hash
	if _, err := ix.PutXorb(ctx, l, 100); err != nil {
		t.Fatal(err)
	}
	const scope = "models/acme/shards"
	fDead, fLive := recordOver(g, x), recordOver(g, x)
	dead := &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{fDead}, Xorbs: []hash.Hash{x}, Dedup: g.Hashes(2)}
	live := &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{fLive}, Xorbs: []hash.Hash{x}, Dedup: g.Hashes(1)}
	mustRegister(t, ix, dead, true)
	mustRegister(t, ix, live, true)
	// A third shard takes over one of dead's entries.
	taker := &index.Registration{Shard: g.Hash(), Scope: scope, Xorbs: []hash.Hash{x}, Dedup: dead.Dedup[:1]}
	mustRegister(t, ix, taker, true)

	shards := func() map[hash.Hash]index.ShardEntry {
		t.Helper()
		out := map[hash.Hash]index.ShardEntry{}
		var after hash.Hash
		for {
			p, err := ix.Shards(ctx, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(p) == 0 {
				return out
			}
			for _, e := range p {
				out[e.Hash] = e
			}
			after = p[len(p)-1].Hash
		}
	}
	ss := shards()
	if len(ss) != 3 {
		t.Fatalf("Shards = %d rows, want 3", len(ss))
	}
	for _, r := range []*index.Registration{dead, live, taker} {
		e := ss[r.Shard]
		var want []hash.Hash
		for _, f := range r.Files {
			want = append(want, f.Hash)
		}
		if !e.FilesKnown || !slices.Equal(e.Files, want) || !slices.Equal(e.Xorbs, r.Xorbs) || !e.Named ||
			!e.Inline == (len(r.Body) > 0) || !e.Condemned.IsZero() || time.Since(e.Registered) > time.Hour {
			t.Fatalf("Shards entry of %s = %+v; want files %v, xorbs %v, named, not condemned", r.Shard, e, want, r.Xorbs)
		}
	}

	if _, err := ix.Delete(ctx, scope, []hash.Hash{fDead.Hash}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	if err := ix.CondemnShards(ctx, []hash.Hash{dead.Shard, live.Shard, g.Hash()}, nil, t0); err != nil { // unknown: ignored
		t.Fatal(err)
	}
	if ss := shards(); len(ss) != 3 || !ss[dead.Shard].Condemned.Equal(t0) || !ss[live.Shard].Condemned.Equal(t0) {
		t.Fatalf("Shards after CondemnShards = %+v", ss)
	}
	// Not before the cutoff: nothing swept.
	if got, err := ix.SweepShards(ctx, []index.ShardCandidate{{Shard: dead.Shard, Files: []hash.Hash{fDead.Hash}}}, t0); err != nil || len(got) != 0 {
		t.Fatalf("SweepShards before the grace = %v, %v; want none", got, err)
	}
	// A visible file keeps its shard; the dead one goes, with its entries and dead record.
	cands := []index.ShardCandidate{{Shard: dead.Shard, Files: []hash.Hash{fDead.Hash}}, {Shard: live.Shard, Files: []hash.Hash{fLive.Hash}}}
	got, err := ix.SweepShards(ctx, cands, time.Now())
	if err != nil || !slices.Equal(got, []hash.Hash{dead.Shard}) {
		t.Fatalf("SweepShards = %v, %v; want only the dead shard %s", got, err, dead.Shard)
	}
	if _, err := ix.ShardBody(ctx, dead.Shard); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("ShardBody of a swept shard = %v; want ErrNotFound", err)
	}
	if _, err := ix.DedupXorbs(ctx, dead.Dedup[1]); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("DedupXorbs of the swept shard's entry = %v; want ErrNotFound", err)
	}
	// The entries naming it are gone, not only unreachable through the join (backends that
	// can count them: the raw databases in their own tests).
	if d, ok := ix.(interface {
		DedupNaming(context.Context, hash.Hash) (int, error)
	}); ok {
		if n, err := d.DedupNaming(ctx, dead.Shard); err != nil || n != 0 {
			t.Fatalf("dedup entries naming the swept shard: %d, %v; want 0", n, err)
		}
	}
	if xs, err := ix.DedupXorbs(ctx, dead.Dedup[0]); err != nil || !slices.Equal(xs, []hash.Hash{x}) {
		t.Fatalf("DedupXorbs of the entry taken over = %v, %v; want the taker's", xs, err)
	}
	if xs, err := ix.DedupXorbs(ctx, live.Dedup[0]); err != nil || !slices.Equal(xs, []hash.Hash{x}) {
		t.Fatalf("DedupXorbs of the kept shard = %v, %v", xs, err)
	}
	ss = shards()
	if _, ok := ss[dead.Shard]; ok || len(ss) != 2 || ss[live.Shard].Condemned.IsZero() {
		t.Fatalf("Shards after the sweep = %+v", ss)
	}
	var after hash.Hash
	after[0] = 0
	fs, err := ix.Files(ctx, after, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Hash == fDead.Hash {
			t.Fatal("the swept shard's dead file record is still there")
		}
	}
	wantFile(t, ix, fLive, scope)
	// Revive, and sweeping again changes nothing.
	if err := ix.CondemnShards(ctx, nil, []hash.Hash{live.Shard}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ss := shards(); !ss[live.Shard].Condemned.IsZero() {
		t.Fatalf("live shard still condemned after revival")
	}
	if got, err := ix.SweepShards(ctx, cands, time.Now()); err != nil || len(got) != 0 {
		t.Fatalf("SweepShards again = %v, %v; want none", got, err)
	}
	// Registering the swept shard again brings it back whole.
	mustRegister(t, ix, dead, true)
	wantFile(t, ix, fDead, scope)

	// Possession rows of a swept xorb go, every scope's; the others' stay.
	l2 := g.Layout(1)
	keep := g.Layout(1)
	for _, l := range []*xorb.Layout{l2, keep} {
		if _, err := ix.PutXorb(ctx, l, 50); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"models/p/a", "models/p/b"} {
			if err := ix.RecordPossession(ctx, s, l.Hash); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ix.Condemn(ctx, []hash.Hash{l2.Hash}, t0); err != nil {
		t.Fatal(err)
	}
	if got, err := ix.Sweep(ctx, []index.SweepCandidate{{Xorb: l2.Hash}}, time.Now()); err != nil || len(got) != 1 {
		t.Fatalf("Sweep = %v, %v", got, err)
	}
	for _, s := range []string{"models/p/a", "models/p/b"} {
		got, err := ix.Possessed(ctx, s, []hash.Hash{l2.Hash, keep.Hash})
		if err != nil || got[l2.Hash] || !got[keep.Hash] {
			t.Fatalf("Possessed(%q) after sweeping one xorb = %v, %v; want only the kept one", s, got, err)
		}
	}
}
