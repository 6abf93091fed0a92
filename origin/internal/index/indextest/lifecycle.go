package indextest

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// testDelete: Delete removes visibility like Hide, reports what it removed, records one event
// per delete that removed something, and nothing (no event) for what was not visible.
func testDelete(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(21)
	a := g.Registration("models/acme/a", 3, 1, 1)
	mustRegister(t, ix, a, true)
	other := *a
	other.Scope = "models/acme/fork"
	mustRegister(t, ix, &other, false)
	if err := ix.RecordPossession(ctx, other.Scope, a.Files[0].Terms[0].Xorb); err != nil {
		t.Fatal(err)
	}

	// Nothing visible: ErrNotFound, and no event.
	for _, tc := range []struct {
		scope string
		files []hash.Hash
	}{
		{a.Scope, []hash.Hash{g.Hash()}},
		{"models/acme/none", nil},
		{"models/acme/none", []hash.Hash{a.Files[0].Hash}},
	} {
		if n, err := ix.Delete(ctx, tc.scope, tc.files); !errors.Is(err, index.ErrNotFound) || n != 0 {
			t.Fatalf("Delete(%q, %d files) of nothing visible = %d, %v; want 0, ErrNotFound", tc.scope, len(tc.files), n, err)
		}
	}
	if evs, err := ix.Events(ctx, 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("Events after deletes of nothing = %v, %v; want none", evs, err)
	}
	if _, err := ix.Delete(ctx, "", nil); !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("Delete with an empty scope = %v; want ErrInvalid", err)
	}

	// One visible and one unknown file (and a duplicate): 1 removed; the other scope keeps it.
	unknown := g.Hash()
	if n, err := ix.Delete(ctx, a.Scope, []hash.Hash{a.Files[1].Hash, unknown, a.Files[1].Hash}); err != nil || n != 1 {
		t.Fatalf("Delete(one file) = %d, %v; want 1, nil", n, err)
	}
	wantHidden(t, ix, a.Files[1].Hash, a.Scope)
	wantFile(t, ix, a.Files[1], other.Scope)
	wantFile(t, ix, a.Files[0], a.Scope)
	if n, err := ix.Delete(ctx, a.Scope, []hash.Hash{a.Files[1].Hash}); !errors.Is(err, index.ErrNotFound) || n != 0 {
		t.Fatalf("Delete of a deleted file = %d, %v; want 0, ErrNotFound", n, err)
	}

	// The whole other scope: every file, and its possession rows.
	if n, err := ix.Delete(ctx, other.Scope, nil); err != nil || n != len(a.Files) {
		t.Fatalf("Delete(scope) = %d, %v; want %d, nil", n, err, len(a.Files))
	}
	for _, f := range a.Files {
		wantHidden(t, ix, f.Hash, other.Scope)
	}
	wantFile(t, ix, a.Files[2], a.Scope)
	x := a.Files[0].Terms[0].Xorb
	if got, err := ix.Possessed(ctx, other.Scope, []hash.Hash{x}); err != nil || got[x] {
		t.Fatalf("Possessed after the scope's deletion = %v, %v; want none", got, err)
	}

	evs, err := ix.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// An event names the files asked (edges drop what they cached of each).
	if len(evs) != 2 || evs[0].Scope != a.Scope || !slices.Equal(evs[0].Files, index.SortedUnique([]hash.Hash{a.Files[1].Hash, unknown})) ||
		evs[1].Scope != other.Scope || evs[1].Files != nil {
		t.Fatalf("events = %+v; want one for the file delete of %q, one whole-scope for %q", evs, a.Scope, other.Scope)
	}
	// Registering again makes the files visible again: a deletion is not a ban.
	mustRegister(t, ix, &other, false)
	wantFile(t, ix, a.Files[1], other.Scope)
}

// testVisible: paging through every visibility row in (file, scope) order with its record.
func testVisible(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(22)
	if got, err := ix.VisibleFiles(ctx, index.VisibleKey{}, 0); err != nil || len(got) != 0 {
		t.Fatalf("Visible on an empty index = %v, %v; want none", got, err)
	}
	want := map[index.VisibleKey][]byte{}
	add := func(r *index.Registration) {
		for _, f := range r.Files {
			b, err := f.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			want[index.VisibleKey{Scope: r.Scope, File: f.Hash}] = b
		}
	}
	var first *index.Registration
	for _, scope := range []string{"models/b", "models/a", "models/a/x", "datasets/z"} {
		r := g.Registration(scope, 4, 1, 0)
		mustRegister(t, ix, r, true)
		add(r)
		if first == nil {
			first = r
		}
	}
	// The same files in two more scopes: rows of one file, ordered by scope, across pages.
	for _, scope := range []string{"models/a", "models/c"} {
		r := *first
		r.Scope = scope
		mustRegister(t, ix, &r, false)
		add(&r)
	}
	var (
		got   []index.VisibleFile
		after index.VisibleKey
	)
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatal("Visible does not end")
		}
		p, err := ix.VisibleFiles(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) > 3 {
			t.Fatalf("page of %d rows, limit 3", len(p))
		}
		if len(p) == 0 {
			break
		}
		got = append(got, p...)
		after = p[len(p)-1].VisibleKey
	}
	if len(got) != len(want) {
		t.Fatalf("Visible returned %d rows, want %d", len(got), len(want))
	}
	for i, v := range got {
		if w, ok := want[v.VisibleKey]; !ok || !bytes.Equal(w, v.Record) {
			t.Errorf("row %d (%q, %s): unexpected or wrong record", i, v.Scope, v.File)
		}
		if i > 0 {
			p := got[i-1]
			if c := bytes.Compare(p.File[:], v.File[:]); c > 0 || c == 0 && p.Scope >= v.Scope {
				t.Errorf("row %d out of (file, scope) order", i)
			}
		}
	}
}

// recordOver is a file record with one term in each of xs.
func recordOver(g *Gen, xs ...hash.Hash) *recon.FileRecord {
	f := &recon.FileRecord{Hash: g.Hash()}
	for _, x := range xs {
		t := recon.Term{Xorb: x, Start: 0, End: 1, RawBytes: 100, ByteStart: 0, ByteEnd: 60}
		f.Terms = append(f.Terms, t)
		f.Size += uint64(t.RawBytes)
	}
	return f
}

// testInheritCondemned: a registration does not inherit (Registration.Inherit) a xorb that was
// condemned when it committed, even once that xorb is revived later.
func testInheritCondemned(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(29)
	ls := []*xorb.Layout{g.Layout(2), g.Layout(1)}
	xa, xb := ls[0].Hash, ls[1].Hash
	for _, l := range ls {
		if _, err := ix.PutXorb(ctx, l, 100); err != nil {
			t.Fatal(err)
		}
	}
	const scope = "models/acme/inhgc"
	r1 := &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{recordOver(g, xa)}, Xorbs: []hash.Hash{xa, xb}, Dedup: g.Hashes(1)}
	mustRegister(t, ix, r1, true)
	if err := ix.Condemn(ctx, []hash.Hash{xb}, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	own := g.Hash()
	r2 := &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{recordOver(g, xa)}, Xorbs: []hash.Hash{own},
		Dedup: []hash.Hash{r1.Dedup[0]}, Inherit: []hash.Hash{r1.Dedup[0]}, InheritMax: 8}
	mustRegister(t, ix, r2, true)
	// Revive xb: a registration referencing it.
	mustRegister(t, ix, &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{recordOver(g, xb)}}, true)
	if got, err := ix.DedupXorbs(ctx, r1.Dedup[0]); err != nil || !slices.Equal(got, []hash.Hash{own, xa}) {
		t.Fatalf("DedupXorbs after inheriting with xb condemned, then reviving it = %v, %v; want [%s %s]", got, err, own, xa)
	}
}

// testCollect: the garbage collector's index protocol. Condemned xorbs leave the dedup answers
// and come back when a registration references them; Sweep removes only what is condemned
// since before its cutoff and whose dead files are still invisible, with the dead records;
// a swept xorb refuses PutXorb until its object is deleted, and refuses registrations until
// it is stored again.
func testCollect(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(23)
	ls := []*xorb.Layout{g.Layout(2), g.Layout(3), g.Layout(1)}
	x1, x2, x3 := ls[0].Hash, ls[1].Hash, ls[2].Hash
	for i, l := range ls {
		if _, err := ix.PutXorb(ctx, l, uint64(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	const scope = "models/acme/gc"
	f1, f2 := recordOver(g, x1, x2), recordOver(g, x3)
	r1 := &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{f1}, Xorbs: []hash.Hash{x1, x2}, Dedup: g.Hashes(1)}
	r2 := &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{f2}, Xorbs: []hash.Hash{x3, x1}, Dedup: g.Hashes(1)}
	mustRegister(t, ix, r1, true)
	mustRegister(t, ix, r2, true)
	// A dedup entry for a chunk of x3, from a shard describing x3 and x1.
	c3 := ls[2].ChunkHashes[0]
	rd := &index.Registration{Shard: g.Hash(), Scope: scope, Xorbs: []hash.Hash{x1, x3}, Dedup: []hash.Hash{c3}}
	mustRegister(t, ix, rd, true)

	files := func() map[hash.Hash]bool {
		t.Helper()
		out := map[hash.Hash]bool{}
		var after hash.Hash
		for {
			p, err := ix.Files(ctx, after, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(p) == 0 {
				return out
			}
			for _, e := range p {
				out[e.Hash] = e.Visible
			}
			after = p[len(p)-1].Hash
		}
	}
	xorbs := func() map[hash.Hash]index.XorbEntry {
		t.Helper()
		out := map[hash.Hash]index.XorbEntry{}
		var after hash.Hash
		for {
			p, err := ix.Xorbs(ctx, after, 2)
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
	if fs := files(); len(fs) != 2 || !fs[f1.Hash] || !fs[f2.Hash] {
		t.Fatalf("Files = %v", fs)
	}
	if xs := xorbs(); len(xs) != 3 || xs[x2].StoredSize != 101 || !xs[x2].Condemned.IsZero() {
		t.Fatalf("Xorbs = %+v", xs)
	}
	if _, err := ix.Delete(ctx, scope, []hash.Hash{f2.Hash}); err != nil {
		t.Fatal(err)
	}
	if fs := files(); !fs[f1.Hash] || fs[f2.Hash] {
		t.Fatalf("Files after deleting f2 = %v", fs)
	}

	// Condemned x3 leaves r2's dedup answer; x1 stays.
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	if err := ix.Condemn(ctx, []hash.Hash{x3, g.Hash()}, t0); err != nil { // an unknown xorb is ignored
		t.Fatal(err)
	}
	if xs := xorbs(); len(xs) != 3 || !xs[x3].Condemned.Equal(t0) || !xs[x1].Condemned.IsZero() {
		t.Fatalf("Xorbs after Condemn = %+v", xs)
	}
	if got, err := ix.DedupXorbs(ctx, r2.Dedup[0]); err != nil || !slices.Equal(got, []hash.Hash{x1}) {
		t.Fatalf("DedupXorbs with x3 condemned = %v, %v; want [x1]", got, err)
	}
	if got, err := ix.DedupXorbsOf(ctx, []hash.Hash{r2.Dedup[0], g.Hash()}); err != nil || !slices.Equal(got, []hash.Hash{x1}) {
		t.Fatalf("DedupXorbsOf with x3 condemned = %v, %v; want [x1]", got, err)
	}
	// A second Condemn keeps the first time.
	if err := ix.Condemn(ctx, []hash.Hash{x3}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if xs := xorbs(); !xs[x3].Condemned.Equal(t0) {
		t.Fatalf("Condemn again moved the time to %v", xs[x3].Condemned)
	}

	// A registration referencing a condemned xorb revives it.
	if err := ix.Condemn(ctx, []hash.Hash{x2}, t0); err != nil {
		t.Fatal(err)
	}
	r3 := &index.Registration{Shard: g.Hash(), Scope: "models/acme/gc2", Files: []*recon.FileRecord{recordOver(g, x2)}}
	mustRegister(t, ix, r3, true)
	if xs := xorbs(); !xs[x2].Condemned.IsZero() {
		t.Fatalf("x2 still condemned after a registration referencing it")
	}
	if err := ix.Condemn(ctx, []hash.Hash{x1}, t0); err != nil {
		t.Fatal(err)
	}
	if err := ix.Revive(ctx, []hash.Hash{x1}); err != nil {
		t.Fatal(err)
	}
	if xs := xorbs(); !xs[x1].Condemned.IsZero() {
		t.Fatalf("x1 still condemned after Revive")
	}

	// Sweep: cutoff before the condemnation, a dead file visible again, a xorb not condemned:
	// nothing. Then x3 with its dead file f2.
	for _, c := range []struct {
		name   string
		cands  []index.SweepCandidate
		cutoff time.Time
	}{
		{"cutoff before", []index.SweepCandidate{{Xorb: x3, DeadFiles: []hash.Hash{f2.Hash}}}, t0},
		{"dead file visible", []index.SweepCandidate{{Xorb: x3, DeadFiles: []hash.Hash{f1.Hash}}}, time.Now()},
		{"not condemned", []index.SweepCandidate{{Xorb: x1}}, time.Now()},
	} {
		if got, err := ix.Sweep(ctx, c.cands, c.cutoff); err != nil || len(got) != 0 {
			t.Fatalf("Sweep (%s) = %v, %v; want nothing", c.name, got, err)
		}
	}
	if sw, err := ix.Swept(ctx, 0); err != nil || len(sw) != 0 {
		t.Fatalf("Swept before any sweep = %v, %v", sw, err)
	}
	got, err := ix.Sweep(ctx, []index.SweepCandidate{{Xorb: x3, DeadFiles: []hash.Hash{f2.Hash}}}, time.Now())
	if err != nil || !slices.Equal(got, []hash.Hash{x3}) {
		t.Fatalf("Sweep(x3) = %v, %v", got, err)
	}
	evs, err := ix.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Scope != index.SweepScope || last.Files != nil || !slices.Equal(last.Xorbs, []hash.Hash{x3}) {
		t.Fatalf("last event after the sweep = %+v; want the sweep's, naming x3", last)
	}
	if evs[0].Xorbs != nil {
		t.Fatalf("a delete's event names xorbs: %+v", evs[0])
	}
	if _, err := ix.XorbSize(ctx, x3); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("XorbSize of a swept xorb: %v", err)
	}
	if fs := files(); len(fs) != 2 || !fs[f1.Hash] {
		t.Fatalf("Files after the sweep = %v; want f1 and r3's file, not f2", fs)
	}
	if got, err := ix.Sweep(ctx, []index.SweepCandidate{{Xorb: x3}}, time.Now()); err != nil || len(got) != 0 {
		t.Fatalf("Sweep of a swept xorb = %v, %v", got, err)
	}
	if got, err := ix.DedupXorbs(ctx, r2.Dedup[0]); err != nil || !slices.Equal(got, []hash.Hash{x1}) {
		t.Fatalf("DedupXorbs with x3 swept = %v, %v; want [x1]", got, err)
	}
	// The swept xorb's chunks lost their dedup entries, so a new registration can offer them.
	if got, err := ix.DedupXorbs(ctx, c3); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("DedupXorbs of a swept xorb's chunk = %v, %v; want ErrNotFound", got, err)
	}
	if sw, err := ix.Swept(ctx, 0); err != nil || !slices.Equal(sw, []hash.Hash{x3}) {
		t.Fatalf("Swept = %v, %v; want [x3]", sw, err)
	}

	// Object deletion pending: PutXorb is refused (retryable), registrations too.
	if _, err := ix.PutXorb(ctx, ls[2], 102); !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("PutXorb of a xorb being collected = %v; want ErrUnavailable", err)
	}
	r4 := &index.Registration{Shard: g.Hash(), Scope: scope, Files: []*recon.FileRecord{recordOver(g, x1, x3)}}
	if _, err := ix.RegisterShard(ctx, r4); !errors.Is(err, index.ErrXorbGone) || !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("RegisterShard referencing a swept xorb = %v; want ErrXorbGone", err)
	}
	wantHidden(t, ix, r4.Files[0].Hash, scope) // nothing of it committed
	if err := ix.ObjectsDeleted(ctx, []hash.Hash{x3}); err != nil {
		t.Fatal(err)
	}
	if sw, err := ix.Swept(ctx, 0); err != nil || len(sw) != 0 {
		t.Fatalf("Swept after ObjectsDeleted = %v, %v", sw, err)
	}
	if _, err := ix.RegisterShard(ctx, r4); !errors.Is(err, index.ErrXorbGone) {
		t.Fatalf("RegisterShard referencing a swept, deleted xorb = %v; want ErrXorbGone", err)
	}
	// Stored again: usable again.
	if ins, err := ix.PutXorb(ctx, ls[2], 102); err != nil || !ins {
		t.Fatalf("PutXorb after the object deletion = %v, %v", ins, err)
	}
	mustRegister(t, ix, r4, true)
	wantFile(t, ix, r4.Files[0], scope)
	r5 := &index.Registration{Shard: g.Hash(), Scope: scope, Xorbs: []hash.Hash{x3}, Dedup: []hash.Hash{c3}}
	mustRegister(t, ix, r5, true)
	if got, err := ix.DedupXorbs(ctx, c3); err != nil || !slices.Equal(got, []hash.Hash{x3}) {
		t.Fatalf("DedupXorbs of a chunk re-registered after its sweep = %v, %v; want [x3]", got, err)
	}
}

// testCollectorLock: one holder of the collector's lock at a time; released, it can be taken
// again.
func testCollectorLock(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	release, err := ix.LockCollector(ctx)
	if err != nil {
		t.Fatalf("LockCollector: %v", err)
	}
	if r2, err := ix.LockCollector(ctx); !errors.Is(err, index.ErrCollectorBusy) {
		if err == nil {
			r2()
		}
		t.Fatalf("LockCollector while held = %v; want ErrCollectorBusy", err)
	}
	release()
	r3, err := ix.LockCollector(ctx)
	if err != nil {
		t.Fatalf("LockCollector after the release: %v", err)
	}
	r3()
}
