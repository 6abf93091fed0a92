package index_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func TestNewBatch(t *testing.T) {
	g := indextest.NewGen(1)
	a, b, c := g.Record(2), g.Record(3), g.Record(1)
	aDup := g.Record(4)
	aDup.Hash = a.Hash
	x1, x2 := g.Hash(), g.Hash()
	d1, d2 := g.Hash(), g.Hash()
	r := &index.Registration{
		Shard: g.Hash(), Scope: "models/a/b",
		Files: []*recon.FileRecord{c, a, b, aDup},
		Xorbs: []hash.Hash{x2, x1, x2},
		Dedup: []hash.Hash{d2, d1, d2, d1},
	}
	bt, err := index.NewBatch(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(bt.FileHashes) != 3 || len(bt.Records) != 3 {
		t.Fatalf("batch has %d files, %d records; want 3 of each", len(bt.FileHashes), len(bt.Records))
	}
	if !slices.IsSortedFunc(bt.FileHashes, func(a, b hash.Hash) int { return bytes.Compare(a[:], b[:]) }) {
		t.Errorf("file hashes not sorted")
	}
	for i, h := range bt.FileHashes {
		want := map[hash.Hash]*recon.FileRecord{a.Hash: a, b.Hash: b, c.Hash: c}[h]
		enc, _ := want.MarshalBinary()
		if !bytes.Equal(bt.Records[i], enc) {
			t.Errorf("record of %s is not the first one listed", h)
		}
	}
	if want := index.SortedUnique([]hash.Hash{d1, d2}); !slices.Equal(bt.Dedup, want) {
		t.Errorf("dedup = %v, want %v", bt.Dedup, want)
	}
	if xs, _ := index.SplitHashes(bt.Xorbs); !slices.Equal(xs, []hash.Hash{x2, x1}) {
		t.Errorf("xorbs = %v, want shard order without duplicates", xs)
	}
	// The registration itself is left as it was.
	if r.Files[0] != c || r.Dedup[0] != d2 {
		t.Errorf("NewBatch modified its argument")
	}
}

func TestNewBatchInvalid(t *testing.T) {
	g := indextest.NewGen(2)
	bad := g.Record(2)
	bad.Size++
	for name, r := range map[string]*index.Registration{
		"nil":          nil,
		"empty scope":  {},
		"long scope":   {Scope: strings.Repeat("a", index.MaxScopeLen+1)},
		"NUL in scope": {Scope: "a\x00"},
		"bad UTF-8":    {Scope: "a\xc3"},
		"nil record":   {Scope: "a", Files: []*recon.FileRecord{nil}},
		"bad record":   {Scope: "a", Files: []*recon.FileRecord{bad}},
	} {
		if _, err := index.NewBatch(r); !errors.Is(err, index.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := index.NewBatch(&index.Registration{Scope: strings.Repeat("é", index.MaxScopeLen/2)}); err != nil {
		t.Errorf("scope of MaxScopeLen bytes: %v", err)
	}
}

func TestHashLists(t *testing.T) {
	g := indextest.NewGen(3)
	for _, n := range []int{0, 1, 7} {
		hs := g.Hashes(n)
		b := index.JoinHashes(hs)
		if len(b) != n*hash.Size {
			t.Fatalf("JoinHashes(%d) = %d bytes", n, len(b))
		}
		got, err := index.SplitHashes(b)
		if err != nil || !slices.Equal(got, hs) {
			t.Fatalf("SplitHashes(JoinHashes(%d)) = %v, %v", n, got, err)
		}
	}
	for _, n := range []int{1, 31, 33, 65} {
		if _, err := index.SplitHashes(make([]byte, n)); err == nil {
			t.Errorf("SplitHashes of %d bytes succeeded", n)
		}
		if _, err := index.HashFromBytes(make([]byte, n)); err == nil {
			t.Errorf("HashFromBytes of %d bytes succeeded", n)
		}
	}
}

func TestDecode(t *testing.T) {
	g := indextest.NewGen(4)
	rec := g.Record(5)
	enc, _ := rec.MarshalBinary()
	if got, err := index.DecodeFile(rec.Hash, enc); err != nil || got.Hash != rec.Hash || len(got.Terms) != 5 {
		t.Fatalf("DecodeFile = %v, %v", got, err)
	}
	if _, err := index.DecodeFile(g.Hash(), enc); err == nil {
		t.Errorf("DecodeFile under another hash succeeded")
	}
	if _, err := index.DecodeFile(rec.Hash, enc[:len(enc)-1]); err == nil {
		t.Errorf("DecodeFile of a truncated record succeeded")
	}
	l := g.Layout(3)
	lb, err := index.EncodeLayout(l)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := index.DecodeLayouts(map[hash.Hash][]byte{l.Hash: lb}); err != nil || m[l.Hash].NumChunks() != 3 {
		t.Fatalf("DecodeLayouts = %v, %v", m, err)
	}
	if _, err := index.DecodeLayouts(map[hash.Hash][]byte{g.Hash(): lb}); err == nil {
		t.Errorf("DecodeLayouts under another hash succeeded")
	}
	if _, err := index.EncodeLayout(nil); !errors.Is(err, index.ErrInvalid) {
		t.Errorf("EncodeLayout(nil): %v, want ErrInvalid", err)
	}
}

// FuzzSplitHashes checks that stored hash lists never panic and round-trip when well formed.
func FuzzSplitHashes(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 32))
	f.Add(make([]byte, 33))
	f.Add(bytes.Repeat([]byte{0xff}, 96))
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := index.SplitHashes(b)
		if err != nil {
			if len(b)%hash.Size == 0 {
				t.Fatalf("SplitHashes rejected %d bytes: %v", len(b), err)
			}
			return
		}
		if !bytes.Equal(index.JoinHashes(hs), b) {
			t.Fatalf("round trip of %d bytes differs", len(b))
		}
	})
}

// TestAddInherited: the inherited xorbs a batch offers, on both of AddInherited's paths (a few
// xorbs compared in place, many through a map): those it offers already are skipped, the rest
// kept in order up to InheritMax, and a second call replaces what the first one added.
func TestAddInherited(t *testing.T) {
	g := indextest.NewGen(7)
	want := func(own, inherited []hash.Hash, most int) []byte {
		out := index.JoinHashes(own)
		added := 0
		for _, x := range inherited {
			if added == most {
				break
			}
			if held, err := index.SplitHashes(out); err != nil || !slices.Contains(held, x) {
				out = append(out, x[:]...)
				added++
			}
		}
		return out
	}
	for _, c := range []struct{ own, inherited, max int }{
		{0, 5, 256}, {4, 8, 256}, {16, 16, 256}, {16, 16, 3}, {40, 200, 256}, {300, 300, 256}, {2, 100, 1},
	} {
		own := make([]hash.Hash, c.own)
		for i := range own {
			own[i] = g.Hash()
		}
		// Half of the inherited xorbs are offered already, and some come twice.
		inh := make([]hash.Hash, c.inherited)
		for i := range inh {
			switch {
			case i%2 == 0 && c.own > 0:
				inh[i] = own[(i*7)%c.own]
			case i%5 == 3:
				inh[i] = inh[i-1]
			default:
				inh[i] = g.Hash()
			}
		}
		r := &index.Registration{Shard: g.Hash(), Scope: "models/a/b", Xorbs: own, InheritMax: c.max}
		b, err := index.NewBatch(r)
		if err != nil {
			t.Fatal(err)
		}
		b.AddInherited(inh)
		if w := want(own, inh, c.max); !bytes.Equal(b.Xorbs, w) {
			t.Errorf("%+v: %d xorbs offered, want %d (or another order)", c, len(b.Xorbs)/hash.Size, len(w)/hash.Size)
		}
		// Again with fewer: what the first call added is gone.
		b.AddInherited(inh[:len(inh)/3])
		if w := want(own, inh[:len(inh)/3], c.max); !bytes.Equal(b.Xorbs, w) {
			t.Errorf("%+v, second call: %d xorbs offered, want %d", c, len(b.Xorbs)/hash.Size, len(w)/hash.Size)
		}
	}
}

// TestAddInheritedAllocs: a registration's usual inheritance (16 offered, 16 inherited, bound
// 256) allocates only the grown xorb list, no map sized for the bound.
func TestAddInheritedAllocs(t *testing.T) {
	g := indextest.NewGen(8)
	own, inh := make([]hash.Hash, 16), make([]hash.Hash, 16)
	for i := range own {
		own[i], inh[i] = g.Hash(), g.Hash()
	}
	b, err := index.NewBatch(&index.Registration{Shard: g.Hash(), Scope: "models/a/b", Xorbs: own, InheritMax: 256})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { b.AddInherited(inh) }); n > 0 {
		t.Errorf("AddInherited allocates %.0f times per call after the first, want 0", n)
	}
}

// TestCompareHashes: CompareHashes orders as bytes.Compare does, hashes differing in any byte
// (first, last, inside a word, across words) and equal ones included.
func TestCompareHashes(t *testing.T) {
	g := indextest.NewGen(9)
	base := g.Hash()
	hs := []hash.Hash{base, g.Hash(), g.Hash(), hash.Zero}
	for _, i := range []int{0, 7, 8, 15, 16, 23, 24, 31} {
		for _, d := range []byte{1, 0x80, 0xff} {
			h := base
			h[i] += d
			hs = append(hs, h)
		}
	}
	for _, a := range hs {
		for _, b := range hs {
			if got, want := index.CompareHashes(a, b), bytes.Compare(a[:], b[:]); got != want {
				t.Fatalf("CompareHashes(%s, %s) = %d, bytes.Compare = %d", a, b, got, want)
			}
		}
	}
}
