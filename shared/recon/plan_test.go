package recon

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// fixture: xorb A has raw chunks 100,200,300,400 stored as 8+50, 8+60, 8+70, 8+80 (ends 58,
// 126, 204, 292); xorb B has raw chunks 10,20,30 stored uncompressed (ends 18, 46, 84).
// The file is A[0,2) B[0,3) A[2,4) A[1,3), at file offsets 0, 300, 360, 1060; size 1560.
func fixture(t testing.TB) (*FileRecord, *xorb.Layout, *xorb.Layout) {
	t.Helper()
	a := newLayout(1, []uint32{100, 200, 300, 400}, []uint32{50, 60, 70, 80})
	b := newLayout(2, []uint32{10, 20, 30}, nil)
	rec, err := NewFileRecord(fileOf(termSpec{a, 0, 2}, termSpec{b, 0, 3}, termSpec{a, 2, 4}, termSpec{a, 1, 3}), layoutMap(a, b))
	if err != nil {
		t.Fatal(err)
	}
	return rec, a, b
}

type wantTerm struct {
	x          int // 0 = A, 1 = B
	start, end uint32
	raw        uint32
}

type wantFetch struct {
	x      int
	chunks []ChunkRange
	bytes  []ByteRange
}

func mustRange(t *testing.T, h string) *httprange.Range {
	t.Helper()
	r, err := httprange.ParseOne(h)
	if err != nil {
		t.Fatalf("parse %q: %v", h, err)
	}
	return &r
}

func TestPlanFixture(t *testing.T) {
	rec, a, b := fixture(t)
	if rec.Size != 1560 {
		t.Fatalf("size %d, want 1560", rec.Size)
	}
	hashes := []hash.Hash{a.Hash, b.Hash}
	tests := []struct {
		name    string
		rng     string // "" = whole file
		offset  uint64
		terms   []wantTerm
		fetch   []wantFetch
		layouts int // calls of the layout func
	}{
		{
			name:  "whole file",
			terms: []wantTerm{{0, 0, 2, 300}, {1, 0, 3, 60}, {0, 2, 4, 700}, {0, 1, 3, 500}},
			fetch: []wantFetch{{0, []ChunkRange{{0, 4}}, []ByteRange{{Start: 0, End: 291}}},
				{1, []ChunkRange{{0, 3}}, []ByteRange{{Start: 0, End: 83}}}},
		},
		{
			name: "range covering everything and past EOF", rng: "bytes=0-99999",
			terms: []wantTerm{{0, 0, 2, 300}, {1, 0, 3, 60}, {0, 2, 4, 700}, {0, 1, 3, 500}},
			fetch: []wantFetch{{0, []ChunkRange{{0, 4}}, []ByteRange{{Start: 0, End: 291}}},
				{1, []ChunkRange{{0, 3}}, []ByteRange{{Start: 0, End: 83}}}},
		},
		{
			name: "chunk-aligned inside one term (§9 example shape)", rng: "bytes=100-299",
			terms:   []wantTerm{{0, 1, 2, 200}},
			fetch:   []wantFetch{{0, []ChunkRange{{1, 2}}, []ByteRange{{Start: 58, End: 125}}}},
			layouts: 1,
		},
		{
			name: "single byte mid-chunk", rng: "bytes=150-150", offset: 50,
			terms:   []wantTerm{{0, 1, 2, 200}},
			fetch:   []wantFetch{{0, []ChunkRange{{1, 2}}, []ByteRange{{Start: 58, End: 125}}}},
			layouts: 1,
		},
		{
			name: "first byte", rng: "bytes=0-0",
			terms:   []wantTerm{{0, 0, 1, 100}},
			fetch:   []wantFetch{{0, []ChunkRange{{0, 1}}, []ByteRange{{Start: 0, End: 57}}}},
			layouts: 1,
		},
		{
			name: "last byte", rng: "bytes=1559-1559", offset: 299,
			terms:   []wantTerm{{0, 2, 3, 300}},
			fetch:   []wantFetch{{0, []ChunkRange{{2, 3}}, []ByteRange{{Start: 126, End: 203}}}},
			layouts: 1,
		},
		{
			name: "starts and ends mid-chunk across xorbs", rng: "bytes=290-310", offset: 190,
			terms: []wantTerm{{0, 1, 2, 200}, {1, 0, 2, 30}},
			fetch: []wantFetch{{0, []ChunkRange{{1, 2}}, []ByteRange{{Start: 58, End: 125}}},
				{1, []ChunkRange{{0, 2}}, []ByteRange{{Start: 0, End: 45}}}},
			layouts: 2,
		},
		{
			name: "exactly one whole term", rng: "bytes=300-359",
			terms: []wantTerm{{1, 0, 3, 60}},
			fetch: []wantFetch{{1, []ChunkRange{{0, 3}}, []ByteRange{{Start: 0, End: 83}}}},
		},
		{
			name: "suffix", rng: "bytes=-60", offset: 240,
			terms:   []wantTerm{{0, 2, 3, 300}},
			fetch:   []wantFetch{{0, []ChunkRange{{2, 3}}, []ByteRange{{Start: 126, End: 203}}}},
			layouts: 1,
		},
		{
			name: "open end, adjacent pieces merge", rng: "bytes=1000-", offset: 340,
			terms:   []wantTerm{{0, 3, 4, 400}, {0, 1, 3, 500}},
			fetch:   []wantFetch{{0, []ChunkRange{{1, 4}}, []ByteRange{{Start: 58, End: 291}}}},
			layouts: 1,
		},
		{
			name: "first and last term in the same xorb: one layout call", rng: "bytes=200-1200", offset: 100,
			terms: []wantTerm{{0, 1, 2, 200}, {1, 0, 3, 60}, {0, 2, 4, 700}, {0, 1, 2, 200}},
			fetch: []wantFetch{{0, []ChunkRange{{1, 4}}, []ByteRange{{Start: 58, End: 291}}},
				{1, []ChunkRange{{0, 3}}, []ByteRange{{Start: 0, End: 83}}}},
			layouts: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ls := &layoutSet{m: layoutMap(a, b)}
			var rng *httprange.Range
			if tc.rng != "" {
				rng = mustRange(t, tc.rng)
			}
			ans, err := Plan(rec, rng, ls.get)
			if err != nil {
				t.Fatal(err)
			}
			if ans.Offset != tc.offset {
				t.Errorf("offset %d, want %d", ans.Offset, tc.offset)
			}
			if ls.calls != tc.layouts {
				t.Errorf("layout called %d times, want %d", ls.calls, tc.layouts)
			}
			if ans.Len() != len(tc.terms) {
				t.Fatalf("%d terms, want %d", ans.Len(), len(tc.terms))
			}
			for i, w := range tc.terms {
				got := ans.Term(i)
				if got.Xorb != hashes[w.x] || got.Start != w.start || got.End != w.end || got.RawBytes != w.raw {
					t.Errorf("term %d = %s [%d,%d) %d, want %s [%d,%d) %d", i,
						got.Xorb, got.Start, got.End, got.RawBytes, hashes[w.x], w.start, w.end, w.raw)
				}
				if ans.Xorbs[ans.FetchIndex(i)].Hash != got.Xorb {
					t.Errorf("term %d fetch index points at the wrong xorb", i)
				}
			}
			if len(ans.Xorbs) != len(tc.fetch) {
				t.Fatalf("%d xorbs, want %d", len(ans.Xorbs), len(tc.fetch))
			}
			for i, w := range tc.fetch {
				got := ans.Xorbs[i]
				if got.Hash != hashes[w.x] || !reflect.DeepEqual(got.Chunks, w.chunks) || !reflect.DeepEqual(got.Bytes, w.bytes) {
					t.Errorf("xorb %d = %s %v %v, want %s %v %v", i, got.Hash, got.Chunks, got.Bytes, hashes[w.x], w.chunks, w.bytes)
				}
			}
		})
	}
}

// TestPlanSpecExample is docs/protocol.md §9's worked example: chunks 100, 200, 300 in one term.
func TestPlanSpecExample(t *testing.T) {
	l := newLayout(7, []uint32{100, 200, 300}, nil)
	rec, err := NewFileRecord(fileOf(termSpec{l, 0, 3}), layoutMap(l))
	if err != nil {
		t.Fatal(err)
	}
	ans, err := Plan(rec, mustRange(t, "bytes=100-299"), (&layoutSet{m: layoutMap(l)}).get)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Len() != 1 || ans.Offset != 0 {
		t.Fatalf("got %d terms offset %d, want 1 term offset 0", ans.Len(), ans.Offset)
	}
	if got := ans.Term(0); got.Start != 1 || got.End != 2 || got.RawBytes != 200 {
		t.Errorf("term [%d,%d) %d, want [1,2) 200", got.Start, got.End, got.RawBytes)
	}
}

func TestPlanNotSatisfiable(t *testing.T) {
	rec, a, b := fixture(t)
	for _, h := range []string{"bytes=1560-1560", "bytes=1560-", "bytes=5000-6000", "bytes=-0"} {
		t.Run(h, func(t *testing.T) {
			ls := &layoutSet{m: layoutMap(a, b)}
			_, err := Plan(rec, mustRange(t, h), ls.get)
			if !errors.Is(err, ErrRangeNotSatisfiable) {
				t.Fatalf("err = %v, want ErrRangeNotSatisfiable", err)
			}
			if ls.calls != 0 {
				t.Errorf("layout called %d times", ls.calls)
			}
		})
	}
}

func TestPlanEmptyFile(t *testing.T) {
	rec := &FileRecord{}
	tests := []struct {
		rng string
		ok  bool
	}{
		{"", true},
		{"bytes=0-0", true},
		{"bytes=0-", true},
		{"bytes=0-1000", true},
		{"bytes=-5", true},
		{"bytes=1-1", false},
		{"bytes=1-", false},
	}
	for _, tc := range tests {
		t.Run(tc.rng, func(t *testing.T) {
			var rng *httprange.Range
			if tc.rng != "" {
				rng = mustRange(t, tc.rng)
			}
			ans, err := Plan(rec, rng, nil)
			if !tc.ok {
				if !errors.Is(err, ErrRangeNotSatisfiable) {
					t.Fatalf("err = %v, want ErrRangeNotSatisfiable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ans.Len() != 0 || len(ans.Xorbs) != 0 || ans.Offset != 0 {
				t.Fatalf("answer not empty: %d terms, %d xorbs, offset %d", ans.Len(), len(ans.Xorbs), ans.Offset)
			}
		})
	}
}

func TestPlanLayoutErrors(t *testing.T) {
	rec, a, b := fixture(t)
	fail := errors.New("origin down")
	other := newLayout(9, []uint32{100, 200, 300, 400}, []uint32{51, 60, 70, 80})
	other.Hash = a.Hash // same name, different bytes: must not be trusted
	tests := []struct {
		name   string
		layout LayoutFunc
		want   error
	}{
		{"source error", func(hash.Hash) (*xorb.Layout, error) { return nil, fail }, fail},
		{"nil source", nil, ErrTermMismatch},
		{"wrong layout", func(h hash.Hash) (*xorb.Layout, error) { return b, nil }, ErrTermMismatch},
		{"layout disagrees with record", func(h hash.Hash) (*xorb.Layout, error) { return other, nil }, ErrTermMismatch},
		{"truncated layout", func(h hash.Hash) (*xorb.Layout, error) {
			return &xorb.Layout{Hash: a.Hash, ChunkHashes: a.ChunkHashes[:1], StoredEnds: a.StoredEnds[:1], RawEnds: a.RawEnds[:1]}, nil
		}, ErrTermMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Plan(rec, mustRange(t, "bytes=150-150"), tc.layout)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestNewFileRecordErrors(t *testing.T) {
	a := newLayout(1, []uint32{100, 200}, nil)
	tests := []struct {
		name string
		edit func(*termSpec) uint32 // returns RawBytes override (0: correct)
		want error
	}{
		{"missing xorb", nil, ErrMissingXorb},
		{"chunk range past end", func(ts *termSpec) uint32 { ts.b = 3; return 1 }, ErrTermMismatch},
		{"empty chunk range", func(ts *termSpec) uint32 { ts.a = 1; ts.b = 1; return 1 }, ErrTermMismatch},
		{"wrong raw bytes", func(ts *termSpec) uint32 { return 299 }, ErrTermMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := termSpec{a, 0, 2}
			layouts := layoutMap(a)
			if tc.edit == nil {
				layouts = nil
			}
			f := fileOf(termSpec{a, 0, 2})
			if tc.edit != nil {
				raw := tc.edit(&ts)
				f.Terms[0].Start, f.Terms[0].End = ts.a, ts.b
				if raw != 0 {
					f.Terms[0].RawBytes = raw
				}
			}
			_, err := NewFileRecord(f, layouts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// refPlan is the brute-force reference: expand every term into chunks with file offsets, keep
// the chunks that overlap [start, end), regroup them by term, and merge fetch ranges as maximal
// runs of the union of the kept chunks per xorb.
func refPlan(rec *FileRecord, layouts map[hash.Hash]*xorb.Layout, start, end uint64) (uint64, []Term, []XorbFetch) {
	var offset uint64
	var terms []Term
	var order []hash.Hash
	used := map[hash.Hash][]bool{}
	var pos uint64
	first := true
	for _, t := range rec.Terms {
		l := layouts[t.Xorb]
		lo, hi := -1, -1
		for c := t.Start; c < t.End; c++ {
			n := uint64(l.RawRange(c, c+1))
			if pos < end && pos+n > start {
				if lo < 0 {
					lo = int(c)
					if first {
						offset = start - pos
						first = false
					}
				}
				hi = int(c) + 1
			}
			pos += n
		}
		if lo < 0 {
			continue
		}
		nt := Term{Xorb: t.Xorb, Start: uint32(lo), End: uint32(hi), RawBytes: l.RawRange(uint32(lo), uint32(hi))}
		nt.ByteStart, nt.ByteEnd = l.ByteRange(nt.Start, nt.End)
		terms = append(terms, nt)
		if used[t.Xorb] == nil {
			used[t.Xorb] = make([]bool, l.NumChunks())
			order = append(order, t.Xorb)
		}
		for c := lo; c < hi; c++ {
			used[t.Xorb][c] = true
		}
	}
	var fetch []XorbFetch
	for _, h := range order {
		l := layouts[h]
		xf := XorbFetch{Hash: h}
		u := used[h]
		for c := 0; c < len(u); {
			if !u[c] {
				c++
				continue
			}
			d := c
			for d < len(u) && u[d] {
				d++
			}
			bs, be := l.ByteRange(uint32(c), uint32(d))
			xf.Chunks = append(xf.Chunks, ChunkRange{uint32(c), uint32(d)})
			xf.Bytes = append(xf.Bytes, ByteRange{Start: uint64(bs), End: uint64(be) - 1})
			c = d
		}
		fetch = append(fetch, xf)
	}
	return offset, terms, fetch
}

// randomFile builds a file of random terms over a few random xorbs.
func randomFile(r *rand.Rand) (*FileRecord, map[hash.Hash]*xorb.Layout) {
	var ls []*xorb.Layout
	for range 1 + r.IntN(4) {
		ls = append(ls, randomLayout(r, 1+r.IntN(12), 100))
	}
	var specs []termSpec
	for range 1 + r.IntN(12) {
		l := ls[r.IntN(len(ls))]
		a := r.Uint32N(uint32(l.NumChunks()))
		b := a + 1 + r.Uint32N(uint32(l.NumChunks())-a)
		specs = append(specs, termSpec{l, a, b})
	}
	m := layoutMap(ls...)
	rec, err := NewFileRecord(fileOf(specs...), m)
	if err != nil {
		panic(err) // the generator only makes valid terms
	}
	return rec, m
}

func TestPlanMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		rec, m := randomFile(r)
		var rng httprange.Range
		var start, end uint64
		switch r.IntN(4) {
		case 0:
			rng = httprange.Range{Kind: httprange.Open, Start: r.Uint64N(rec.Size + 3)}
			start, end = rng.Start, rec.Size
		case 1:
			rng = httprange.Range{Kind: httprange.Suffix, N: r.Uint64N(rec.Size+3) + 1}
			start, end = rec.Size-min(rng.N, rec.Size), rec.Size
		default:
			s := r.Uint64N(rec.Size + 3)
			e := s + r.Uint64N(rec.Size/2+2)
			rng = httprange.Range{Kind: httprange.Closed, Start: s, End: e}
			start, end = s, min(e+1, rec.Size)
		}
		ls := &layoutSet{m: m}
		ans, err := Plan(rec, &rng, ls.get)
		if start >= rec.Size {
			if !errors.Is(err, ErrRangeNotSatisfiable) {
				t.Fatalf("iter %d: range %s of %d bytes: err = %v, want 416", iter, rng, rec.Size, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if ls.calls > 2 {
			t.Fatalf("iter %d: layout called %d times", iter, ls.calls)
		}
		off, terms, fetch := refPlan(rec, m, start, end)
		if ans.Offset != off {
			t.Fatalf("iter %d: range %s: offset %d, want %d", iter, rng, ans.Offset, off)
		}
		got := make([]Term, ans.Len())
		for i := range got {
			got[i] = ans.Term(i)
		}
		if !reflect.DeepEqual(got, terms) {
			t.Fatalf("iter %d: range %s:\n got  %+v\n want %+v", iter, rng, got, terms)
		}
		if !reflect.DeepEqual(ans.Xorbs, fetch) {
			t.Fatalf("iter %d: range %s:\n got  %+v\n want %+v", iter, rng, ans.Xorbs, fetch)
		}
		// Deterministic: planning again gives the same answer.
		again, _ := Plan(rec, &rng, ls.get)
		if !reflect.DeepEqual(again.Xorbs, ans.Xorbs) || again.Offset != ans.Offset {
			t.Fatalf("iter %d: planning is not deterministic", iter)
		}
	}
}
