// Package indextest is the conformance suite every index.Index implementation passes.
//
// An implementation's test calls Run with a function that opens a fresh, empty index for one
// subtest (and arranges, with t.Cleanup, to drop whatever it created). The suite closes the
// indexes it gets itself; implementations must tolerate a second Close.
package indextest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Opener returns a fresh, empty index for the test t.
type Opener func(t *testing.T) index.Index

// Run runs the whole suite against the indexes open returns.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ix index.Index)
	}{
		{"Layouts", testLayouts},
		{"RegisterAndRead", testRegisterAndRead},
		{"Visibility", testVisibility},
		{"IdempotentRegistration", testIdempotentRegistration},
		{"ConcurrentRegistration", testConcurrentRegistration},
		{"ConcurrentPutXorb", testConcurrentPutXorb},
		{"Dedup", testDedup},
		{"Inherit", testInherit},
		{"ConcurrentInherit", testConcurrentInherit},
		{"HideAndEvents", testHideAndEvents},
		{"EventsPaging", testEventsPaging},
		{"ConcurrentHide", testConcurrentHide},
		{"Delete", testDelete},
		{"Visible", testVisible},
		{"Collect", testCollect},
		{"InheritCondemned", testInheritCondemned},
		{"CollectorLock", testCollectorLock},
		{"CollectShards", testCollectShards},
		{"LargeRecord", testLargeRecord},
		{"ShardBody", testShardBody},
		{"ConcurrentShardBodies", testConcurrentShardBodies},
		{"Possession", testPossession},
		{"Require", testRequire},
		{"Invalid", testInvalid},
		{"Canceled", testCanceled},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := open(t)
			t.Cleanup(func() { ix.Close() })
			tc.fn(t, ix)
		})
	}
}

// Gen makes deterministic, valid test values (also for benchmarks and load tools).
type Gen struct{ r *rand.Rand }

// NewGen returns a generator whose values are a function of seed.
func NewGen(seed uint64) *Gen { return &Gen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

// Hash returns a random hash.
func (g *Gen) Hash() hash.Hash {
	var h hash.Hash
	for i := 0; i < hash.Size; i += 8 {
		v := g.r.Uint64()
		for j := 0; j < 8; j++ {
			h[i+j] = byte(v >> (8 * j))
		}
	}
	return h
}

// Hashes returns n random hashes.
func (g *Gen) Hashes(n int) []hash.Hash {
	out := make([]hash.Hash, n)
	for i := range out {
		out[i] = g.Hash()
	}
	return out
}

// Layout makes a valid layout of n chunks (its hash is the merkle hash of its chunks).
func (g *Gen) Layout(n int) *xorb.Layout {
	l := &xorb.Layout{ChunkHashes: g.Hashes(n), StoredEnds: make([]uint32, n), RawEnds: make([]uint32, n)}
	leaves := make([]hash.Leaf, n)
	var stored, raw uint32
	for i := range n {
		size := uint32(1 + g.r.IntN(8<<10))
		raw += size
		stored += xorb.HeaderSize + uint32(1+g.r.IntN(int(size)))
		l.StoredEnds[i], l.RawEnds[i] = stored, raw
		leaves[i] = hash.Leaf{Hash: l.ChunkHashes[i], Size: uint64(size)}
	}
	l.Hash = hash.Merkle(leaves)
	return l
}

// Record makes a valid file record of n terms over a handful of xorbs.
func (g *Gen) Record(n int) *recon.FileRecord {
	f := &recon.FileRecord{Hash: g.Hash(), Terms: make([]recon.Term, n)}
	if g.r.IntN(2) == 0 {
		s := g.Hash()
		f.SHA256 = &s
	}
	xorbs := g.Hashes(1 + min(n, 50))
	for i := range f.Terms {
		start := uint32(g.r.IntN(8000))
		end := start + 1 + uint32(g.r.IntN(100))
		bs := uint32(g.r.IntN(60 << 20))
		t := recon.Term{Xorb: xorbs[g.r.IntN(len(xorbs))], Start: start, End: end,
			RawBytes: 1 + uint32(g.r.IntN(1<<20)), ByteStart: bs, ByteEnd: bs + 8*(end-start) + uint32(g.r.IntN(1<<20))}
		f.Terms[i] = t
		f.Size += uint64(t.RawBytes)
	}
	return f
}

// Registration makes a shard of nFiles files, each with its own record, describing nXorbs
// xorbs and nDedup dedup chunks.
func (g *Gen) Registration(scope string, nFiles, nXorbs, nDedup int) *index.Registration {
	r := &index.Registration{Shard: g.Hash(), Scope: scope, Xorbs: g.Hashes(nXorbs), Dedup: g.Hashes(nDedup)}
	for range nFiles {
		r.Files = append(r.Files, g.Record(1+g.r.IntN(8)))
	}
	return r
}

// sameRecord reports whether two records are equal field by field (nil and empty term lists
// are the same).
func sameRecord(a, b *recon.FileRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Hash == b.Hash && a.Size == b.Size && slices.Equal(a.Terms, b.Terms) &&
		(a.SHA256 == nil) == (b.SHA256 == nil) && (a.SHA256 == nil || *a.SHA256 == *b.SHA256)
}

// sameLayout reports whether two layouts are equal.
func sameLayout(a, b *xorb.Layout) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Hash == b.Hash && slices.Equal(a.ChunkHashes, b.ChunkHashes) &&
		slices.Equal(a.StoredEnds, b.StoredEnds) && slices.Equal(a.RawEnds, b.RawEnds)
}

func ctxOf(t *testing.T) context.Context { return t.Context() }

func mustRegister(t *testing.T, ix index.Index, r *index.Registration, want bool) {
	t.Helper()
	got, err := ix.RegisterShard(ctxOf(t), r)
	if err != nil {
		t.Fatalf("RegisterShard(%s): %v", r.Shard, err)
	}
	if got != want {
		t.Fatalf("RegisterShard(%s) inserted = %v, want %v", r.Shard, got, want)
	}
}

// wantFile checks that file rec.Hash is readable in scope with exactly the record rec.
func wantFile(t *testing.T, ix index.Index, rec *recon.FileRecord, scope string) {
	t.Helper()
	got, err := ix.File(ctxOf(t), rec.Hash, scope)
	if err != nil {
		t.Fatalf("File(%s, %q): %v", rec.Hash, scope, err)
	}
	if !sameRecord(got, rec) {
		t.Fatalf("File(%s, %q) returned a record of %d terms, size %d; want the registered one of %d terms, size %d",
			rec.Hash, scope, len(got.Terms), got.Size, len(rec.Terms), rec.Size)
	}
	b, err := ix.FileBytes(ctxOf(t), rec.Hash, scope)
	if err != nil {
		t.Fatalf("FileBytes(%s, %q): %v", rec.Hash, scope, err)
	}
	want, _ := rec.MarshalBinary()
	if !bytes.Equal(b, want) {
		t.Fatalf("FileBytes(%s, %q) differs from the record's encoding", rec.Hash, scope)
	}
	if err := ix.Visible(ctxOf(t), rec.Hash, scope); err != nil {
		t.Fatalf("Visible(%s, %q): %v", rec.Hash, scope, err)
	}
}

// wantHidden checks that file f is not readable in scope.
func wantHidden(t *testing.T, ix index.Index, f hash.Hash, scope string) {
	t.Helper()
	got, err := ix.File(ctxOf(t), f, scope)
	if !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("File(%s, %q) = %v, %v; want ErrNotFound", f, scope, got, err)
	}
	if b, err := ix.FileBytes(ctxOf(t), f, scope); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("FileBytes(%s, %q) = %d bytes, %v; want ErrNotFound", f, scope, len(b), err)
	}
	if err := ix.Visible(ctxOf(t), f, scope); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("Visible(%s, %q) = %v; want ErrNotFound", f, scope, err)
	}
}

func testLayouts(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(1)
	type stored struct {
		l    *xorb.Layout
		size uint64
	}
	var xs []stored
	for i := range 12 {
		// From a one-chunk layout up to a full one.
		n := []int{1, 10, xorb.MaxChunks}[i%3]
		xs = append(xs, stored{g.Layout(n), uint64(1000 + g.r.IntN(64<<20))})
	}
	for _, x := range xs {
		ins, err := ix.PutXorb(ctx, x.l, x.size)
		if err != nil || !ins {
			t.Fatalf("PutXorb(%s) = %v, %v; want inserted", x.l.Hash, ins, err)
		}
	}
	// A second put is not an insert and replaces neither the layout nor the size.
	again := *xs[0].l
	again.StoredEnds = slices.Clone(again.StoredEnds)
	again.StoredEnds[0]++
	ins, err := ix.PutXorb(ctx, &again, 7)
	if err != nil || ins {
		t.Fatalf("second PutXorb = %v, %v; want not inserted, no error", ins, err)
	}
	missing := g.Hashes(3)
	ask := []hash.Hash{missing[0]}
	for _, x := range xs {
		ask = append(ask, x.l.Hash)
	}
	ask = append(ask, xs[3].l.Hash, missing[1]) // a duplicate and another missing one
	got, err := ix.Layouts(ctx, ask)
	if err != nil {
		t.Fatalf("Layouts: %v", err)
	}
	if len(got) != len(xs) {
		t.Fatalf("Layouts returned %d entries, want %d", len(got), len(xs))
	}
	for _, x := range xs {
		if !sameLayout(got[x.l.Hash], x.l) {
			t.Errorf("layout of %s differs from the one put first", x.l.Hash)
		}
		size, err := ix.XorbSize(ctx, x.l.Hash)
		if err != nil || size != x.size {
			t.Errorf("XorbSize(%s) = %d, %v; want %d", x.l.Hash, size, err, x.size)
		}
	}
	for _, m := range missing {
		if _, ok := got[m]; ok {
			t.Errorf("Layouts returned an entry for missing xorb %s", m)
		}
		if _, err := ix.XorbSize(ctx, m); !errors.Is(err, index.ErrNotFound) {
			t.Errorf("XorbSize(missing) error = %v, want ErrNotFound", err)
		}
	}
	if got, err := ix.Layouts(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("Layouts(nil) = %d entries, %v; want none", len(got), err)
	}
	// Many hashes at once (more than one batch of any sane IN list).
	many := g.Hashes(1200)
	many = append(many, xs[5].l.Hash)
	got, err = ix.Layouts(ctx, many)
	if err != nil || len(got) != 1 || !sameLayout(got[xs[5].l.Hash], xs[5].l) {
		t.Errorf("Layouts(1201 hashes) = %d entries, %v; want exactly xorb 5", len(got), err)
	}
	m, err := ix.LayoutBytes(ctx, []hash.Hash{xs[1].l.Hash, missing[2]})
	want, _ := xs[1].l.MarshalBinary()
	if err != nil || len(m) != 1 || !bytes.Equal(m[xs[1].l.Hash], want) {
		t.Errorf("LayoutBytes = %d entries, %v; want xorb 1's encoding", len(m), err)
	}
	if err := ix.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func testRegisterAndRead(t *testing.T, ix index.Index) {
	g := NewGen(2)
	r := g.Registration("models/acme/a", 4, 3, 5)
	mustRegister(t, ix, r, true)
	for _, f := range r.Files {
		wantFile(t, ix, f, r.Scope)
	}
	wantHidden(t, ix, g.Hash(), r.Scope) // unknown file
	// An empty file: the zero hash with an empty record is a valid registration.
	empty := &index.Registration{Shard: g.Hash(), Scope: r.Scope,
		Files: []*recon.FileRecord{{Hash: hash.Zero}}}
	mustRegister(t, ix, empty, true)
	wantFile(t, ix, empty.Files[0], r.Scope)
	// A shard with no files and no xorbs is accepted too.
	mustRegister(t, ix, &index.Registration{Shard: g.Hash(), Scope: r.Scope}, true)
}

func testVisibility(t *testing.T, ix index.Index) {
	g := NewGen(3)
	a := g.Registration("models/acme/a", 3, 2, 2)
	mustRegister(t, ix, a, true)
	for _, f := range a.Files {
		wantHidden(t, ix, f.Hash, "models/acme/b")
		wantHidden(t, ix, f.Hash, "models/acme/a/") // no prefix matching
		wantHidden(t, ix, f.Hash, "Models/acme/a")  // scopes are case sensitive
	}
	// The same shard uploaded under another scope grants that scope, and is not new.
	b := *a
	b.Scope = "datasets/other/b"
	mustRegister(t, ix, &b, false)
	for _, f := range a.Files {
		wantFile(t, ix, f, a.Scope)
		wantFile(t, ix, f, b.Scope)
	}
	// A different shard re-registering a known file under a third scope keeps the first record.
	c := g.Registration("spaces/x/c", 1, 1, 0)
	other := g.Record(3)
	other.Hash = a.Files[0].Hash
	c.Files = append(c.Files, other)
	mustRegister(t, ix, c, true)
	wantFile(t, ix, a.Files[0], "spaces/x/c")
	wantHidden(t, ix, c.Files[0].Hash, a.Scope)
}

func testIdempotentRegistration(t *testing.T, ix index.Index) {
	g := NewGen(4)
	r := g.Registration("models/acme/a", 5, 4, 8)
	// Duplicates inside one registration: the first record of a file wins.
	first := r.Files[0]
	dup := g.Record(2)
	dup.Hash = first.Hash
	r.Files = append(r.Files, dup)
	r.Dedup = append(r.Dedup, r.Dedup[0])
	r.Xorbs = append(r.Xorbs, r.Xorbs[1])
	mustRegister(t, ix, r, true)
	for range 3 {
		mustRegister(t, ix, r, false)
	}
	wantFile(t, ix, first, r.Scope)
	xs, err := ix.DedupXorbs(ctxOf(t), r.Dedup[0])
	if err != nil {
		t.Fatalf("DedupXorbs: %v", err)
	}
	if !slices.Equal(xs, r.Xorbs[:4]) {
		t.Fatalf("DedupXorbs = %v, want the shard's 4 distinct xorbs in order %v", xs, r.Xorbs[:4])
	}
}

func testConcurrentRegistration(t *testing.T, ix index.Index) {
	// 16 shards, each registered by 4 goroutines at once (64 in all). The shards overlap:
	// shard i shares files and dedup chunks with shards i-1 and i+1, listed in a different order,
	// so that goroutines contend on the same keys in opposite directions.
	g := NewGen(5)
	const nShards, perShard = 16, 4
	files := make([]*recon.FileRecord, nShards+1)
	for i := range files {
		files[i] = g.Record(4)
	}
	chunks := g.Hashes(nShards + 1)
	regs := make([]*index.Registration, nShards)
	for i := range regs {
		r := g.Registration(fmt.Sprintf("models/org/r%d", i%3), 3, 2, 3)
		r.Files = append(r.Files, files[i+1], files[i])
		r.Dedup = append([]hash.Hash{chunks[i+1]}, append(r.Dedup, chunks[i])...)
		if i%2 == 1 {
			slices.Reverse(r.Files)
			slices.Reverse(r.Dedup)
		}
		regs[i] = r
	}
	inserted := make([]int, nShards)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	start := make(chan struct{})
	for w := range nShards * perShard {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			i := (w*7 + w/nShards) % nShards
			ins, err := ix.RegisterShard(ctxOf(t), regs[i])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ins {
				inserted[i]++
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent RegisterShard: %v", err)
	}
	for i, n := range inserted {
		if n != 1 {
			t.Errorf("shard %d reported inserted %d times, want exactly once", i, n)
		}
	}
	for _, r := range regs {
		for _, f := range r.Files {
			wantFile(t, ix, f, r.Scope)
		}
		for _, c := range r.Dedup {
			if _, err := ix.DedupXorbs(ctxOf(t), c); err != nil {
				t.Fatalf("DedupXorbs(%s) after concurrent registration: %v", c, err)
			}
		}
	}
	// A shared chunk maps to exactly one of the two shards that listed it.
	for i := 1; i < nShards; i++ {
		xs, err := ix.DedupXorbs(ctxOf(t), chunks[i])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(xs, regs[i-1].Xorbs) && !slices.Equal(xs, regs[i].Xorbs) {
			t.Errorf("shared chunk %d maps to xorbs %v of neither registering shard", i, xs)
		}
	}
}

func testConcurrentPutXorb(t *testing.T, ix index.Index) {
	g := NewGen(6)
	layouts := make([]*xorb.Layout, 8)
	for i := range layouts {
		layouts[i] = g.Layout(10 * (i + 1))
	}
	inserted := make([]int, len(layouts))
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := w % len(layouts)
			ins, err := ix.PutXorb(ctxOf(t), layouts[i], uint64(400+i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ins {
				inserted[i]++
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent PutXorb: %v", err)
	}
	for i, n := range inserted {
		if n != 1 {
			t.Errorf("xorb %d inserted %d times, want once", i, n)
		}
	}
}

func testDedup(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(7)
	a := g.Registration("models/acme/a", 2, 3, 4)
	mustRegister(t, ix, a, true)
	for _, c := range a.Dedup {
		xs, err := ix.DedupXorbs(ctx, c)
		if err != nil || !slices.Equal(xs, a.Xorbs) {
			t.Fatalf("DedupXorbs(%s) = %v, %v; want %v", c, xs, err, a.Xorbs)
		}
	}
	// A later shard listing a known chunk takes it over (the newest version of a file answers,
	// docs/protocol.md §8.6 [xetcdn]); the chunks it does not list stay with a.
	b := g.Registration("models/other/b", 1, 2, 1)
	b.Dedup = append(b.Dedup, a.Dedup[2])
	mustRegister(t, ix, b, true)
	if xs, err := ix.DedupXorbs(ctx, a.Dedup[2]); err != nil || !slices.Equal(xs, b.Xorbs) {
		t.Errorf("DedupXorbs of a chunk a registered, then b = %v, %v; want b's xorbs", xs, err)
	}
	if xs, err := ix.DedupXorbs(ctx, a.Dedup[1]); err != nil || !slices.Equal(xs, a.Xorbs) {
		t.Errorf("DedupXorbs of a chunk only a registered = %v, %v; want a's xorbs", xs, err)
	}
	if xs, err := ix.DedupXorbs(ctx, b.Dedup[0]); err != nil || !slices.Equal(xs, b.Xorbs) {
		t.Errorf("DedupXorbs of b's chunk = %v, %v; want b's xorbs", xs, err)
	}
	// Registering a again (an old version uploaded again, byte for byte the same shard) takes
	// nothing back: its row keeps the xorbs it offered then, which lack the newer versions'.
	mustRegister(t, ix, a, false)
	if xs, err := ix.DedupXorbs(ctx, a.Dedup[2]); err != nil || !slices.Equal(xs, b.Xorbs) {
		t.Errorf("DedupXorbs of a chunk b took over, after a again = %v, %v; want b's xorbs", xs, err)
	}
	if xs, err := ix.DedupXorbs(ctx, a.Dedup[1]); err != nil || !slices.Equal(xs, a.Xorbs) {
		t.Errorf("DedupXorbs of a chunk only a registered, after a again = %v, %v; want a's xorbs", xs, err)
	}
	// Several chunks in one lookup: each entry's xorbs in the order of the chunks asked (a
	// chunk asked twice adds its xorbs twice), nothing for a chunk without an entry.
	got, err := ix.DedupXorbsOf(ctx, []hash.Hash{b.Dedup[0], g.Hash(), a.Dedup[1], a.Dedup[2], a.Dedup[1]})
	if want := slices.Concat(b.Xorbs, a.Xorbs, b.Xorbs, a.Xorbs); err != nil || !slices.Equal(got, want) {
		t.Errorf("DedupXorbsOf = %v, %v; want %v", got, err, want)
	}
	// More chunks than one statement may take (Postgres: 64): the same, in the order asked.
	many := append(g.Hashes(70), a.Dedup[3])
	many = append(many, g.Hashes(70)...)
	many = append(many, b.Dedup[0])
	if got, err := ix.DedupXorbsOf(ctx, many); err != nil || !slices.Equal(got, slices.Concat(a.Xorbs, b.Xorbs)) {
		t.Errorf("DedupXorbsOf of 142 chunks = %v, %v; want a's xorbs, then b's", got, err)
	}
	for _, cs := range [][]hash.Hash{nil, {g.Hash(), a.Xorbs[0]}} {
		if got, err := ix.DedupXorbsOf(ctx, cs); err != nil || len(got) != 0 {
			t.Errorf("DedupXorbsOf(%v) = %v, %v; want nothing, no error", cs, got, err)
		}
	}
	// A shard without xorbs still answers (with none).
	c := g.Registration("models/other/c", 1, 0, 1)
	mustRegister(t, ix, c, true)
	if xs, err := ix.DedupXorbs(ctx, c.Dedup[0]); err != nil || len(xs) != 0 {
		t.Errorf("DedupXorbs of a xorb-less shard's chunk = %v, %v; want none", xs, err)
	}
	// Xorbs of a shard are not dedup entries by themselves, nor are its files.
	for _, h := range []hash.Hash{g.Hash(), a.Xorbs[0], a.Files[0].Hash} {
		if xs, err := ix.DedupXorbs(ctx, h); !errors.Is(err, index.ErrNotFound) {
			t.Errorf("DedupXorbs(%s) = %v, %v; want ErrNotFound", h, xs, err)
		}
	}
}

// testInherit: a registration that takes over an entry keeps offering what it offered
// (Registration.Inherit): the backend appends those xorbs to the registration's own, skipping
// those it has, at most InheritMax of them, in the order of Inherit.
func testInherit(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(17)
	a := g.Registration("models/acme/inh-a", 1, 3, 2)
	mustRegister(t, ix, a, true)
	b := g.Registration("models/acme/inh-b", 1, 2, 1)
	b.Dedup = append(b.Dedup, a.Dedup[0])
	b.Inherit, b.InheritMax = []hash.Hash{g.Hash(), a.Dedup[0]}, 2 // a chunk without an entry adds nothing
	mustRegister(t, ix, b, true)
	bOffers := slices.Concat(b.Xorbs, a.Xorbs[:2])
	if xs, err := ix.DedupXorbs(ctx, a.Dedup[0]); err != nil || !slices.Equal(xs, bOffers) {
		t.Fatalf("DedupXorbs after b inherited a's entry = %v, %v; want b's xorbs, then 2 of a's %v", xs, err, bOffers)
	}
	if xs, err := ix.DedupXorbs(ctx, b.Dedup[0]); err != nil || !slices.Equal(xs, bOffers) {
		t.Fatalf("DedupXorbs of b's own chunk = %v, %v; want %v (one list per shard)", xs, err, bOffers)
	}
	// A xorb the registration offers already is skipped and does not count.
	c := g.Registration("models/other/inh-c", 1, 1, 0)
	c.Xorbs = append(c.Xorbs, b.Xorbs[0])
	c.Dedup = []hash.Hash{a.Dedup[0], a.Dedup[1]}
	c.Inherit, c.InheritMax = []hash.Hash{a.Dedup[0], a.Dedup[1]}, 3
	mustRegister(t, ix, c, true)
	want := []hash.Hash{c.Xorbs[0], b.Xorbs[0], b.Xorbs[1], a.Xorbs[0], a.Xorbs[1]}
	if xs, err := ix.DedupXorbs(ctx, a.Dedup[1]); err != nil || !slices.Equal(xs, want) {
		t.Fatalf("DedupXorbs after c inherited b's and a's entries = %v, %v; want %v", xs, err, want)
	}
	// InheritMax 0: nothing inherited.
	d := g.Registration("models/other/inh-d", 1, 1, 0)
	d.Dedup, d.Inherit = []hash.Hash{a.Dedup[0]}, []hash.Hash{a.Dedup[0]}
	mustRegister(t, ix, d, true)
	if xs, err := ix.DedupXorbs(ctx, a.Dedup[0]); err != nil || !slices.Equal(xs, d.Xorbs) {
		t.Fatalf("DedupXorbs after d (InheritMax 0) = %v, %v; want only d's %v", xs, err, d.Xorbs)
	}
	// Many chunks to inherit (Postgres looks up 16 or more with one statement), most without
	// an entry: the entries found, in the order of Inherit.
	e := g.Registration("models/other/inh-e", 1, 1, 1)
	e.Inherit, e.InheritMax = append(g.Hashes(18), a.Dedup[1], b.Dedup[0]), 10
	mustRegister(t, ix, e, true)
	want = append([]hash.Hash{e.Xorbs[0]}, want...) // c's list (a.Dedup[1]); b's adds nothing new
	if xs, err := ix.DedupXorbs(ctx, e.Dedup[0]); err != nil || !slices.Equal(xs, want) {
		t.Fatalf("DedupXorbs after e inherited 20 chunks' entries = %v, %v; want %v", xs, err, want)
	}
}

// testConcurrentInherit: registrations from several scopes at once, each taking over the same
// file start and inheriting its entry (Postgres batches them). The entry ends naming one of
// them, offering its own xorbs first, then only xorbs that an earlier entry offered.
func testConcurrentInherit(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(19)
	base := g.Registration("models/acme/cinh", 1, 2, 1)
	mustRegister(t, ix, base, true)
	start := base.Dedup[0]
	const n = 24
	regs := make([]*index.Registration, n)
	known := map[hash.Hash]bool{base.Xorbs[0]: true, base.Xorbs[1]: true}
	for i := range regs {
		r := g.Registration(fmt.Sprintf("models/acme/cinh-%d", i%4), 1, 1, 1)
		r.Dedup = append(r.Dedup, start)
		r.Inherit, r.InheritMax = []hash.Hash{start}, maxInheritTest
		regs[i], known[r.Xorbs[0]] = r, true
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, r := range regs {
		wg.Go(func() {
			if _, err := ix.RegisterShard(ctx, r); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	xs, err := ix.DedupXorbs(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	var winner *index.Registration
	for _, r := range regs {
		if len(xs) > 0 && xs[0] == r.Xorbs[0] {
			winner = r
		}
	}
	if winner == nil {
		t.Fatalf("DedupXorbs(start) = %v: not led by one of the concurrent registrations", xs)
	}
	seen := map[hash.Hash]bool{}
	for _, x := range xs {
		if !known[x] || seen[x] {
			t.Fatalf("DedupXorbs(start) = %v: %s unknown or repeated", xs, x)
		}
		seen[x] = true
	}
	// Whatever it inherited, the base's xorbs came down to it (every entry of start offered them).
	if !seen[base.Xorbs[0]] || !seen[base.Xorbs[1]] {
		t.Fatalf("DedupXorbs(start) = %v: lost the first version's xorbs %v", xs, base.Xorbs)
	}
	// Each registration's own chunk names it, with its own xorb first.
	for _, r := range regs {
		if got, err := ix.DedupXorbs(ctx, r.Dedup[0]); err != nil || len(got) == 0 || got[0] != r.Xorbs[0] {
			t.Fatalf("DedupXorbs of %s's own chunk = %v, %v", r.Shard, got, err)
		}
	}
}

// maxInheritTest is the InheritMax of testConcurrentInherit: room for every xorb.
const maxInheritTest = 64

func testHideAndEvents(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(8)
	evs, err := ix.Events(ctx, 0, 10)
	if err != nil || len(evs) != 0 {
		t.Fatalf("Events on an empty index = %v, %v; want none", evs, err)
	}
	a := g.Registration("models/acme/a", 4, 1, 1)
	mustRegister(t, ix, a, true)
	other := *a
	other.Scope = "models/acme/fork"
	mustRegister(t, ix, &other, false)

	// Hide two files in a (listed twice and unsorted); the other scope keeps them.
	hidden := []hash.Hash{a.Files[2].Hash, a.Files[0].Hash, a.Files[2].Hash}
	if err := ix.Hide(ctx, a.Scope, hidden); err != nil {
		t.Fatalf("Hide: %v", err)
	}
	wantHidden(t, ix, a.Files[0].Hash, a.Scope)
	wantHidden(t, ix, a.Files[2].Hash, a.Scope)
	wantFile(t, ix, a.Files[1], a.Scope)
	wantFile(t, ix, a.Files[0], other.Scope)

	// Hide the whole of the other scope, then hide something already hidden.
	if err := ix.Hide(ctx, other.Scope, nil); err != nil {
		t.Fatalf("Hide(scope): %v", err)
	}
	for _, f := range a.Files {
		wantHidden(t, ix, f.Hash, other.Scope)
	}
	wantFile(t, ix, a.Files[3], a.Scope)
	if err := ix.Hide(ctx, a.Scope, []hash.Hash{a.Files[0].Hash}); err != nil {
		t.Fatalf("Hide(already hidden): %v", err)
	}

	evs, err = ix.Events(ctx, 0, 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	want := []index.Event{
		{Scope: a.Scope, Files: index.SortedUnique(hidden)},
		{Scope: other.Scope},
		{Scope: a.Scope, Files: []hash.Hash{a.Files[0].Hash}},
	}
	if len(evs) != len(want) {
		t.Fatalf("Events returned %d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, e := range evs {
		if e.Scope != want[i].Scope || !slices.Equal(e.Files, want[i].Files) || (e.Files == nil) != (want[i].Files == nil) {
			t.Errorf("event %d = %+v, want scope %q files %v", i, e, want[i].Scope, want[i].Files)
		}
		if i > 0 && e.Seq <= evs[i-1].Seq {
			t.Errorf("event %d seq %d not after %d", i, e.Seq, evs[i-1].Seq)
		}
		if e.At.IsZero() {
			t.Errorf("event %d has no time", i)
		}
	}
	// Registering again under a scope makes its files visible again.
	mustRegister(t, ix, a, false)
	wantFile(t, ix, a.Files[0], a.Scope)
}

func testEventsPaging(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(9)
	const n = 25
	scopes := make([]string, n)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("models/p/%d", i)
		if err := ix.Hide(ctx, scopes[i], g.Hashes(i%3)); err != nil {
			t.Fatalf("Hide: %v", err)
		}
	}
	var got []index.Event
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("Events paging does not end")
		}
		evs, err := ix.Events(ctx, after, 7)
		if err != nil {
			t.Fatalf("Events(%d, 7): %v", after, err)
		}
		if len(evs) > 7 {
			t.Fatalf("Events(_, 7) returned %d events", len(evs))
		}
		if len(evs) == 0 {
			break
		}
		got = append(got, evs...)
		after = evs[len(evs)-1].Seq
	}
	if len(got) != n {
		t.Fatalf("paged through %d events, want %d", len(got), n)
	}
	for i, e := range got {
		if e.Scope != scopes[i] || len(e.Files) != i%3 {
			t.Errorf("event %d = scope %q with %d files; want %q with %d", i, e.Scope, len(e.Files), scopes[i], i%3)
		}
	}
	if evs, err := ix.Events(ctx, after, 10); err != nil || len(evs) != 0 {
		t.Errorf("Events after the last = %v, %v; want none", evs, err)
	}
}

func testConcurrentHide(t *testing.T, ix index.Index) {
	g := NewGen(14)
	r := g.Registration("models/acme/h", 32, 1, 1)
	mustRegister(t, ix, r, true)
	var wg sync.WaitGroup
	errs := make(chan error, len(r.Files))
	for _, f := range r.Files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- ix.Hide(ctxOf(t), r.Scope, []hash.Hash{f.Hash})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Hide: %v", err)
		}
	}
	evs, err := ix.Events(ctxOf(t), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != len(r.Files) {
		t.Fatalf("%d events for %d hides", len(evs), len(r.Files))
	}
	seen := map[hash.Hash]bool{}
	for i, e := range evs {
		if i > 0 && e.Seq <= evs[i-1].Seq {
			t.Errorf("event %d seq %d not after %d", i, e.Seq, evs[i-1].Seq)
		}
		if len(e.Files) != 1 || seen[e.Files[0]] {
			t.Errorf("event %d = %+v: want one file not seen before", i, e)
			continue
		}
		seen[e.Files[0]] = true
	}
	for _, f := range r.Files {
		wantHidden(t, ix, f.Hash, r.Scope)
	}
}

// LargeTerms is the number of terms of the large file record of the suite.
const LargeTerms = 100_000

func testLargeRecord(t *testing.T, ix index.Index) {
	g := NewGen(10)
	r := g.Registration("models/acme/big", 1, 1, 1)
	r.Files[0] = g.Record(LargeTerms)
	mustRegister(t, ix, r, true)
	wantFile(t, ix, r.Files[0], r.Scope)
}

// Body returns n random bytes standing in for a shard body.
func (g *Gen) Body(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return b
}

func shardBodies(t *testing.T, ix index.Index) index.ShardBodies {
	t.Helper()
	return ix
}

// wantBody checks that ShardBody(h) returns exactly want (nil: registered without a body).
func wantBody(t *testing.T, sb index.ShardBodies, h hash.Hash, want []byte) {
	t.Helper()
	got, err := sb.ShardBody(ctxOf(t), h)
	if err != nil {
		t.Fatalf("ShardBody(%s): %v", h, err)
	}
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		t.Fatalf("ShardBody(%s) = %d bytes (nil %v), want %d bytes (nil %v)", h, len(got), got == nil, len(want), want == nil)
	}
}

func testShardBody(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	sb := shardBodies(t, ix)
	g := NewGen(14)
	// A typical small shard, one past the ~2 KB where Postgres starts toasting, and a large
	// one that must go out of line.
	for _, n := range []int{1872, 2100, 9000, 1 << 20} {
		r := g.Registration("models/acme/body", 4, 2, 4)
		r.Body = g.Body(n)
		mustRegister(t, ix, r, true)
		wantBody(t, sb, r.Shard, r.Body)
		wantFile(t, ix, r.Files[0], r.Scope)
		// The first body stays; registering again (here with another body) changes nothing.
		again := *r
		again.Scope, again.Body = "models/acme/other", g.Body(n)
		mustRegister(t, ix, &again, false)
		wantBody(t, sb, r.Shard, r.Body)
		wantFile(t, ix, r.Files[0], again.Scope)
	}
	// Without a body (stored in the object store), and with an empty one: no inline body.
	for _, body := range [][]byte{nil, {}} {
		r := g.Registration("models/acme/body", 1, 1, 1)
		r.Body = body
		mustRegister(t, ix, r, true)
		wantBody(t, sb, r.Shard, nil)
	}
	if b, err := sb.ShardBody(ctx, g.Hash()); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("ShardBody(unknown) = %d bytes, %v; want ErrNotFound", len(b), err)
	}
	// A registration that fails leaves no body behind.
	bad := g.Registration("models/acme/body", 1, 1, 1)
	bad.Files[0] = &recon.FileRecord{Hash: g.Hash(), Size: 1} // does not encode
	bad.Body = g.Body(100)
	if _, err := ix.RegisterShard(ctx, bad); !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("RegisterShard(bad record with body): %v, want ErrInvalid", err)
	}
	if b, err := sb.ShardBody(ctx, bad.Shard); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("ShardBody of a rejected registration = %d bytes, %v; want ErrNotFound", len(b), err)
	}
}

// testConcurrentShardBodies registers many shards with bodies at once (so that a group-committing
// implementation puts several in one commit), some of them twice in the same burst, and reads
// every body back.
func testConcurrentShardBodies(t *testing.T, ix index.Index) {
	sb := shardBodies(t, ix)
	g := NewGen(15)
	regs := make([]*index.Registration, 48)
	for i := range regs {
		regs[i] = g.Registration(fmt.Sprintf("models/org/b%d", i%4), 2, 2, 2)
		if i%3 != 2 {
			regs[i].Body = g.Body(1000 + 37*i)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(regs))
	for i := range 2 * len(regs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ix.RegisterShard(ctxOf(t), regs[(i*5)%len(regs)]); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent RegisterShard with bodies: %v", err)
	}
	for _, r := range regs {
		wantBody(t, sb, r.Shard, r.Body)
	}
}

// testRequire: a registration requiring xorbs (Registration.Require) commits only when its scope
// possesses every one of them; otherwise it fails with ErrNotPossessed and leaves no trace.
// Registrations running at the same time (one Postgres batch) fail or commit each on its own.
func testRequire(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(31)
	const scope, other = "models/acme/req", "models/acme/req-other"
	x1, x2 := g.Hash(), g.Hash()
	if err := ix.RecordPossession(ctx, scope, x1); err != nil {
		t.Fatal(err)
	}
	if err := ix.RecordPossession(ctx, other, x2); err != nil {
		t.Fatal(err)
	}
	ok := g.Registration(scope, 1, 1, 1)
	ok.Require = []hash.Hash{x1, x1}
	mustRegister(t, ix, ok, true)
	wantFile(t, ix, ok.Files[0], scope)
	bad := g.Registration(scope, 1, 1, 1)
	bad.Require = []hash.Hash{x1, x2} // x2: possessed by another scope only
	if _, err := ix.RegisterShard(ctx, bad); !errors.Is(err, index.ErrNotPossessed) {
		t.Fatalf("RegisterShard requiring a xorb the scope does not possess: %v, want ErrNotPossessed", err)
	}
	wantHidden(t, ix, bad.Files[0].Hash, scope)
	if _, err := ix.DedupXorbs(ctx, bad.Dedup[0]); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("DedupXorbs of the refused registration's chunk: %v, want ErrNotFound", err)
	}
	// Concurrently, from two scopes: every third registration requires what its scope lacks.
	const n = 24
	regs := make([]*index.Registration, n)
	for i := range regs {
		sc, x := scope, x1
		if i%2 == 1 {
			sc, x = other, x2
		}
		if i%3 == 0 {
			x = g.Hash()
		}
		regs[i] = g.Registration(sc, 1, 1, 1)
		regs[i].Require = []hash.Hash{x}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, r := range regs {
		wg.Go(func() { _, errs[i] = ix.RegisterShard(ctx, r) })
	}
	wg.Wait()
	for i, r := range regs {
		if i%3 == 0 {
			if !errors.Is(errs[i], index.ErrNotPossessed) {
				t.Fatalf("registration %d (xorb not possessed): %v, want ErrNotPossessed", i, errs[i])
			}
			wantHidden(t, ix, r.Files[0].Hash, r.Scope)
			continue
		}
		if errs[i] != nil {
			t.Fatalf("registration %d: %v", i, errs[i])
		}
		wantFile(t, ix, r.Files[0], r.Scope)
	}
}

// testPossession: possession is per (scope, xorb), idempotent, safe to record concurrently,
// and Possessed answers exactly the recorded subset of any number of hashes.
func testPossession(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(14)
	const a, b = "models/acme/a", "models/acme/b"
	xs := g.Hashes(1200) // more than one IN list of the SQLite implementation
	if got, err := ix.Possessed(ctx, a, xs[:3]); err != nil || len(got) != 0 {
		t.Fatalf("Possessed before any record = %v, %v; want none", got, err)
	}
	if got, err := ix.Possessed(ctx, a, nil); err != nil || len(got) != 0 {
		t.Fatalf("Possessed(nil) = %v, %v; want none", got, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8*3)
	for range 8 { // the same rows from several writers at once
		wg.Go(func() {
			errs <- ix.RecordPossession(ctx, a, xs[0])
			errs <- ix.RecordPossession(ctx, b, xs[1])
			errs <- ix.RecordPossession(ctx, a, xs[1])
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("RecordPossession: %v", err)
		}
	}
	for i := 2; i < len(xs); i += 2 {
		if err := ix.RecordPossession(ctx, a, xs[i]); err != nil {
			t.Fatalf("RecordPossession %d: %v", i, err)
		}
	}
	ask := append(slices.Clone(xs), xs[0], xs[3]) // duplicates are allowed
	got, err := ix.Possessed(ctx, a, ask)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range xs {
		if want := i == 1 || i%2 == 0; got[x] != want {
			t.Fatalf("Possessed(%s)[%d] = %v, want %v", a, i, got[x], want)
		}
	}
	if len(got) != len(xs)/2+1 {
		t.Fatalf("Possessed(%s) has %d entries, want %d", a, len(got), len(xs)/2+1)
	}
	got, err = ix.Possessed(ctx, b, xs[:3])
	if err != nil || len(got) != 1 || !got[xs[1]] {
		t.Fatalf("Possessed(%s) = %v, %v; want only %s", b, got, err, xs[1])
	}
	// Scopes are compared exactly: neither a prefix nor another case holds anything.
	for _, other := range []string{"models/acme", "models/acme/A", a + " "} {
		if got, err := ix.Possessed(ctx, other, xs[:3]); err != nil || len(got) != 0 {
			t.Errorf("Possessed(%q) = %v, %v; want none", other, got, err)
		}
	}
}

func testInvalid(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(11)
	for name, r := range map[string]*index.Registration{
		"nil":          nil,
		"empty scope":  {Shard: g.Hash()},
		"long scope":   {Shard: g.Hash(), Scope: string(make([]byte, index.MaxScopeLen+1))},
		"NUL in scope": {Shard: g.Hash(), Scope: "models/a\x00b"},
		"non-UTF-8":    {Shard: g.Hash(), Scope: "models/\xff"},
		"nil record":   {Shard: g.Hash(), Scope: "s", Files: []*recon.FileRecord{nil}},
		"bad record":   {Shard: g.Hash(), Scope: "s", Files: []*recon.FileRecord{{Hash: g.Hash(), Size: 1}}},
	} {
		if ins, err := ix.RegisterShard(ctx, r); !errors.Is(err, index.ErrInvalid) || ins {
			t.Errorf("RegisterShard(%s) = %v, %v; want ErrInvalid", name, ins, err)
		}
	}
	if err := ix.RecordPossession(ctx, "", g.Hash()); !errors.Is(err, index.ErrInvalid) {
		t.Errorf("RecordPossession with empty scope: %v, want ErrInvalid", err)
	}
	if err := ix.Hide(ctx, "", nil); !errors.Is(err, index.ErrInvalid) {
		t.Errorf("Hide with empty scope: %v, want ErrInvalid", err)
	}
	if ins, err := ix.PutXorb(ctx, nil, 1); !errors.Is(err, index.ErrInvalid) || ins {
		t.Errorf("PutXorb(nil) = %v, %v; want ErrInvalid", ins, err)
	}
	bad := g.Layout(2)
	bad.RawEnds = bad.RawEnds[:1]
	if ins, err := ix.PutXorb(ctx, bad, 1); !errors.Is(err, index.ErrInvalid) || ins {
		t.Errorf("PutXorb(inconsistent layout) = %v, %v; want ErrInvalid", ins, err)
	}
	// Nothing of the rejected registrations is visible.
	if evs, err := ix.Events(ctx, 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events after rejected calls = %v, %v; want none", evs, err)
	}
}

func testCanceled(t *testing.T, ix index.Index) {
	g := NewGen(12)
	ctx, cancel := context.WithCancel(ctxOf(t))
	cancel()
	r := g.Registration("models/acme/a", 1, 1, 1)
	if _, err := ix.RegisterShard(ctx, r); err == nil {
		t.Fatalf("RegisterShard with a canceled context succeeded")
	}
	if _, err := ix.File(ctx, r.Files[0].Hash, r.Scope); err == nil {
		t.Fatalf("File with a canceled context succeeded")
	}
	// A registration that failed because of its context may or may not have committed, but
	// the index stays usable and a retry reports a consistent answer.
	if _, err := ix.RegisterShard(ctxOf(t), r); err != nil {
		t.Fatalf("RegisterShard after a canceled one: %v", err)
	}
	wantFile(t, ix, r.Files[0], r.Scope)
}

func testClose(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(13)
	r := g.Registration("models/acme/a", 1, 1, 1)
	mustRegister(t, ix, r, true)
	if err := ix.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := ix.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	checks := map[string]error{}
	_, checks["File"] = ix.File(ctx, r.Files[0].Hash, r.Scope)
	_, checks["RegisterShard"] = ix.RegisterShard(ctx, g.Registration("s", 1, 1, 1))
	_, checks["PutXorb"] = ix.PutXorb(ctx, g.Layout(1), 1)
	_, checks["Layouts"] = ix.Layouts(ctx, []hash.Hash{g.Hash()})
	_, checks["XorbSize"] = ix.XorbSize(ctx, g.Hash())
	_, checks["DedupXorbs"] = ix.DedupXorbs(ctx, r.Dedup[0])
	_, checks["Events"] = ix.Events(ctx, 0, 1)
	checks["Hide"] = ix.Hide(ctx, "s", nil)
	checks["RecordPossession"] = ix.RecordPossession(ctx, "s", g.Hash())
	_, checks["Possessed"] = ix.Possessed(ctx, "s", []hash.Hash{g.Hash()})
	checks["Ping"] = ix.Ping(ctx)
	for name, err := range checks {
		if !errors.Is(err, index.ErrUnavailable) {
			t.Errorf("%s after Close: %v, want ErrUnavailable", name, err)
		}
	}
}
