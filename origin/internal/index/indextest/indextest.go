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
	"github.com/xetcdn/xetcdn/shared/xet/hash"
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
		{"HideAndEvents", testHideAndEvents},
		{"EventsPaging", testEventsPaging},
		{"LargeRecord", testLargeRecord},
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

// gen makes deterministic test values.
type gen struct{ r *rand.Rand }

func newGen(seed uint64) *gen { return &gen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

func (g *gen) hash() hash.Hash {
	var h hash.Hash
	for i := 0; i < hash.Size; i += 8 {
		v := g.r.Uint64()
		for j := 0; j < 8; j++ {
			h[i+j] = byte(v >> (8 * j))
		}
	}
	return h
}

func (g *gen) hashes(n int) []hash.Hash {
	out := make([]hash.Hash, n)
	for i := range out {
		out[i] = g.hash()
	}
	return out
}

func (g *gen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return b
}

// registration makes a shard of nFiles files, each with its own record, describing nXorbs
// xorbs and nDedup dedup chunks.
func (g *gen) registration(scope string, nFiles, nXorbs, nDedup int) *index.Registration {
	r := &index.Registration{Shard: g.hash(), Scope: scope, Xorbs: g.hashes(nXorbs), Dedup: g.hashes(nDedup)}
	for range nFiles {
		r.Files = append(r.Files, index.File{Hash: g.hash(), Record: g.bytes(40 + g.r.IntN(200))})
	}
	return r
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

// wantFile checks that file f is readable in scope with exactly the record rec.
func wantFile(t *testing.T, ix index.Index, f hash.Hash, scope string, rec []byte) {
	t.Helper()
	got, err := ix.File(ctxOf(t), f, scope)
	if err != nil {
		t.Fatalf("File(%s, %q): %v", f, scope, err)
	}
	if !bytes.Equal(got, rec) {
		t.Fatalf("File(%s, %q) = %d bytes, want the %d registered", f, scope, len(got), len(rec))
	}
}

// wantHidden checks that file f is not readable in scope.
func wantHidden(t *testing.T, ix index.Index, f hash.Hash, scope string) {
	t.Helper()
	got, err := ix.File(ctxOf(t), f, scope)
	if !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("File(%s, %q) = %d bytes, %v; want ErrNotFound", f, scope, len(got), err)
	}
}

func testLayouts(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := newGen(1)
	type xorb struct {
		h      hash.Hash
		layout []byte
		size   uint64
	}
	var xs []xorb
	for i := range 20 {
		// Sizes cover a one-chunk layout up to a full 8192-chunk one (40 bytes a chunk).
		n := []int{40, 400, 8192 * 40}[i%3]
		xs = append(xs, xorb{g.hash(), g.bytes(n), uint64(1000 + g.r.IntN(64<<20))})
	}
	for _, x := range xs {
		ins, err := ix.PutXorb(ctx, x.h, x.layout, x.size)
		if err != nil || !ins {
			t.Fatalf("PutXorb(%s) = %v, %v; want inserted", x.h, ins, err)
		}
	}
	// A second put is not an insert and does not replace the layout or size.
	ins, err := ix.PutXorb(ctx, xs[0].h, g.bytes(80), 7)
	if err != nil || ins {
		t.Fatalf("second PutXorb = %v, %v; want not inserted, no error", ins, err)
	}
	missing := g.hashes(3)
	ask := []hash.Hash{missing[0]}
	for _, x := range xs {
		ask = append(ask, x.h)
	}
	ask = append(ask, xs[3].h, missing[1]) // a duplicate and another missing one
	got, err := ix.Layouts(ctx, ask)
	if err != nil {
		t.Fatalf("Layouts: %v", err)
	}
	if len(got) != len(xs) {
		t.Fatalf("Layouts returned %d entries, want %d", len(got), len(xs))
	}
	for _, x := range xs {
		if !bytes.Equal(got[x.h], x.layout) {
			t.Errorf("layout of %s: got %d bytes, want the %d put first", x.h, len(got[x.h]), len(x.layout))
		}
		size, err := ix.XorbSize(ctx, x.h)
		if err != nil || size != x.size {
			t.Errorf("XorbSize(%s) = %d, %v; want %d", x.h, size, err, x.size)
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
	many := g.hashes(1200)
	many = append(many, xs[5].h)
	got, err = ix.Layouts(ctx, many)
	if err != nil || len(got) != 1 || !bytes.Equal(got[xs[5].h], xs[5].layout) {
		t.Errorf("Layouts(1201 hashes) = %d entries, %v; want exactly xorb 5", len(got), err)
	}
	if err := ix.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func testRegisterAndRead(t *testing.T, ix index.Index) {
	g := newGen(2)
	r := g.registration("models/acme/a", 4, 3, 5)
	mustRegister(t, ix, r, true)
	for _, f := range r.Files {
		wantFile(t, ix, f.Hash, r.Scope, f.Record)
	}
	wantHidden(t, ix, g.hash(), r.Scope) // unknown file
	// An empty file: the zero hash with an empty record is a valid registration.
	empty := &index.Registration{Shard: g.hash(), Scope: r.Scope,
		Files: []index.File{{Hash: hash.Zero, Record: []byte{}}}}
	mustRegister(t, ix, empty, true)
	wantFile(t, ix, hash.Zero, r.Scope, []byte{})
	// A shard with no files and no xorbs is accepted too.
	mustRegister(t, ix, &index.Registration{Shard: g.hash(), Scope: r.Scope}, true)
}

func testVisibility(t *testing.T, ix index.Index) {
	g := newGen(3)
	a := g.registration("models/acme/a", 3, 2, 2)
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
		wantFile(t, ix, f.Hash, a.Scope, f.Record)
		wantFile(t, ix, f.Hash, b.Scope, f.Record)
	}
	// A different shard re-registering a known file under a third scope keeps the first record.
	c := g.registration("spaces/x/c", 1, 1, 0)
	c.Files = append(c.Files, index.File{Hash: a.Files[0].Hash, Record: g.bytes(99)})
	mustRegister(t, ix, c, true)
	wantFile(t, ix, a.Files[0].Hash, "spaces/x/c", a.Files[0].Record)
	wantHidden(t, ix, c.Files[0].Hash, a.Scope)
}

func testIdempotentRegistration(t *testing.T, ix index.Index) {
	g := newGen(4)
	r := g.registration("models/acme/a", 5, 4, 8)
	// Duplicates inside one registration: the first record of a file wins.
	first := r.Files[0]
	r.Files = append(r.Files, index.File{Hash: first.Hash, Record: g.bytes(10)})
	r.Dedup = append(r.Dedup, r.Dedup[0])
	r.Xorbs = append(r.Xorbs, r.Xorbs[1])
	mustRegister(t, ix, r, true)
	for range 3 {
		mustRegister(t, ix, r, false)
	}
	wantFile(t, ix, first.Hash, r.Scope, first.Record)
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
	g := newGen(5)
	const nShards, perShard = 16, 4
	files := make([]index.File, nShards+1)
	for i := range files {
		files[i] = index.File{Hash: g.hash(), Record: g.bytes(100)}
	}
	chunks := g.hashes(nShards + 1)
	regs := make([]*index.Registration, nShards)
	for i := range regs {
		r := g.registration(fmt.Sprintf("models/org/r%d", i%3), 3, 2, 3)
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
			wantFile(t, ix, f.Hash, r.Scope, f.Record)
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
	g := newGen(6)
	hs := g.hashes(8)
	layouts := make([][]byte, len(hs))
	for i := range layouts {
		layouts[i] = g.bytes(400)
	}
	inserted := make([]int, len(hs))
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := w % len(hs)
			ins, err := ix.PutXorb(ctxOf(t), hs[i], layouts[i], uint64(400+i))
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
	g := newGen(7)
	a := g.registration("models/acme/a", 2, 3, 4)
	mustRegister(t, ix, a, true)
	for _, c := range a.Dedup {
		xs, err := ix.DedupXorbs(ctx, c)
		if err != nil || !slices.Equal(xs, a.Xorbs) {
			t.Fatalf("DedupXorbs(%s) = %v, %v; want %v", c, xs, err, a.Xorbs)
		}
	}
	// A later shard listing a known chunk does not take it over; its new chunks are its own.
	b := g.registration("models/other/b", 1, 2, 1)
	b.Dedup = append(b.Dedup, a.Dedup[2])
	mustRegister(t, ix, b, true)
	if xs, err := ix.DedupXorbs(ctx, a.Dedup[2]); err != nil || !slices.Equal(xs, a.Xorbs) {
		t.Errorf("DedupXorbs of a chunk first registered by a = %v, %v; want a's xorbs", xs, err)
	}
	if xs, err := ix.DedupXorbs(ctx, b.Dedup[0]); err != nil || !slices.Equal(xs, b.Xorbs) {
		t.Errorf("DedupXorbs of b's chunk = %v, %v; want b's xorbs", xs, err)
	}
	// A shard without xorbs still answers (with none).
	c := g.registration("models/other/c", 1, 0, 1)
	mustRegister(t, ix, c, true)
	if xs, err := ix.DedupXorbs(ctx, c.Dedup[0]); err != nil || len(xs) != 0 {
		t.Errorf("DedupXorbs of a xorb-less shard's chunk = %v, %v; want none", xs, err)
	}
	// Xorbs of a shard are not dedup entries by themselves, nor are its files.
	for _, h := range []hash.Hash{g.hash(), a.Xorbs[0], a.Files[0].Hash} {
		if xs, err := ix.DedupXorbs(ctx, h); !errors.Is(err, index.ErrNotFound) {
			t.Errorf("DedupXorbs(%s) = %v, %v; want ErrNotFound", h, xs, err)
		}
	}
}

func testHideAndEvents(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := newGen(8)
	evs, err := ix.Events(ctx, 0, 10)
	if err != nil || len(evs) != 0 {
		t.Fatalf("Events on an empty index = %v, %v; want none", evs, err)
	}
	a := g.registration("models/acme/a", 4, 1, 1)
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
	wantFile(t, ix, a.Files[1].Hash, a.Scope, a.Files[1].Record)
	wantFile(t, ix, a.Files[0].Hash, other.Scope, a.Files[0].Record)

	// Hide the whole of the other scope, then hide something already hidden.
	if err := ix.Hide(ctx, other.Scope, nil); err != nil {
		t.Fatalf("Hide(scope): %v", err)
	}
	for _, f := range a.Files {
		wantHidden(t, ix, f.Hash, other.Scope)
	}
	wantFile(t, ix, a.Files[3].Hash, a.Scope, a.Files[3].Record)
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
	wantFile(t, ix, a.Files[0].Hash, a.Scope, a.Files[0].Record)
}

func testEventsPaging(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := newGen(9)
	const n = 25
	scopes := make([]string, n)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("models/p/%d", i)
		if err := ix.Hide(ctx, scopes[i], g.hashes(i%3)); err != nil {
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

// LargeRecordBytes is the size of the record of a 100,000-term file in the suite: the order of
// the encoded size of such a record (a 32-byte xorb hash and five 32-bit fields per term).
const LargeRecordBytes = 100_000 * 52

func testLargeRecord(t *testing.T, ix index.Index) {
	g := newGen(10)
	r := g.registration("models/acme/big", 1, 1, 1)
	r.Files[0].Record = g.bytes(LargeRecordBytes)
	mustRegister(t, ix, r, true)
	wantFile(t, ix, r.Files[0].Hash, r.Scope, r.Files[0].Record)
}

func testInvalid(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := newGen(11)
	for name, r := range map[string]*index.Registration{
		"nil":         nil,
		"empty scope": {Shard: g.hash()},
		"long scope":  {Shard: g.hash(), Scope: string(make([]byte, index.MaxScopeLen+1))},
		"nil record":  {Shard: g.hash(), Scope: "s", Files: []index.File{{Hash: g.hash()}}},
	} {
		if ins, err := ix.RegisterShard(ctx, r); !errors.Is(err, index.ErrInvalid) || ins {
			t.Errorf("RegisterShard(%s) = %v, %v; want ErrInvalid", name, ins, err)
		}
	}
	if err := ix.Hide(ctx, "", nil); !errors.Is(err, index.ErrInvalid) {
		t.Errorf("Hide with empty scope: %v, want ErrInvalid", err)
	}
	if ins, err := ix.PutXorb(ctx, g.hash(), nil, 1); !errors.Is(err, index.ErrInvalid) || ins {
		t.Errorf("PutXorb without layout = %v, %v; want ErrInvalid", ins, err)
	}
	// Nothing of the rejected registrations is visible.
	if evs, err := ix.Events(ctx, 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events after rejected calls = %v, %v; want none", evs, err)
	}
}

func testCanceled(t *testing.T, ix index.Index) {
	g := newGen(12)
	ctx, cancel := context.WithCancel(ctxOf(t))
	cancel()
	r := g.registration("models/acme/a", 1, 1, 1)
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
	wantFile(t, ix, r.Files[0].Hash, r.Scope, r.Files[0].Record)
}

func testClose(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := newGen(13)
	r := g.registration("models/acme/a", 1, 1, 1)
	mustRegister(t, ix, r, true)
	if err := ix.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := ix.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	checks := map[string]error{}
	_, checks["File"] = ix.File(ctx, r.Files[0].Hash, r.Scope)
	_, checks["RegisterShard"] = ix.RegisterShard(ctx, g.registration("s", 1, 1, 1))
	_, checks["PutXorb"] = ix.PutXorb(ctx, g.hash(), []byte{1}, 1)
	_, checks["Layouts"] = ix.Layouts(ctx, []hash.Hash{g.hash()})
	_, checks["XorbSize"] = ix.XorbSize(ctx, g.hash())
	_, checks["DedupXorbs"] = ix.DedupXorbs(ctx, r.Dedup[0])
	_, checks["Events"] = ix.Events(ctx, 0, 1)
	checks["Hide"] = ix.Hide(ctx, "s", nil)
	checks["Ping"] = ix.Ping(ctx)
	for name, err := range checks {
		if !errors.Is(err, index.ErrUnavailable) {
			t.Errorf("%s after Close: %v, want ErrUnavailable", name, err)
		}
	}
}
