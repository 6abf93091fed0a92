package recon

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// marshalScrambled encodes f like MarshalBinary but with a non-canonical xorb table: every
// distinct xorb in reverse first-use order, then copies of them and one hash no term uses as far
// as the term count allows; terms name any copy at random. UnmarshalFileRecord accepts such tables and must plan them like canonical ones.
func marshalScrambled(t testing.TB, f *FileRecord, r *rand.Rand) []byte {
	t.Helper()
	canonical, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	dec, err := UnmarshalFileRecord(canonical)
	if err != nil {
		t.Fatal(err)
	}
	xs := dec.ix.xorbs
	// The decoder allows at most one table entry per term.
	var table []hash.Hash
	slots := make([][]uint64, len(xs))
	add := func(x int) {
		slots[x] = append(slots[x], uint64(len(table)))
		table = append(table, xs[x])
	}
	if len(xs) < len(f.Terms) {
		table = append(table, hash.Chunk([]byte("unused")))
	}
	for x := len(xs) - 1; x >= 0; x-- {
		add(x)
	}
	for x := 0; len(table) < len(f.Terms); x = (x + 1) % len(xs) {
		add(x)
	}
	slot := func(x int32) uint64 { return slots[x][r.IntN(len(slots[x]))] }
	out := []byte{recordVersion, 0}
	out = append(out, f.Hash[:]...)
	out = binary.AppendUvarint(out, f.Size)
	out = binary.AppendUvarint(out, uint64(len(table)))
	for i := range table {
		out = append(out, table[i][:]...)
	}
	out = binary.AppendUvarint(out, uint64(len(f.Terms)))
	for i, tm := range f.Terms {
		for _, v := range []uint64{slot(dec.ix.xorb[i]), uint64(tm.Start), uint64(tm.End - tm.Start),
			uint64(tm.RawBytes), uint64(tm.ByteStart), uint64(tm.ByteEnd - tm.ByteStart)} {
			out = binary.AppendUvarint(out, v)
		}
	}
	return out
}

// TestPlanIndexVariants plans the same file from a record with its own index (NewFileRecord),
// a decoded one, one decoded from a scrambled xorb table, and a literal without an index; the
// answers and the re-encoded records must be identical.
func TestPlanIndexVariants(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for iter := range 500 {
		rec, m := randomFile(r)
		canonical, err := rec.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := UnmarshalFileRecord(canonical)
		if err != nil {
			t.Fatal(err)
		}
		scrambled, err := UnmarshalFileRecord(marshalScrambled(t, rec, r))
		if err != nil {
			t.Fatalf("iter %d: scrambled table: %v", iter, err)
		}
		literal := exported(rec)
		variants := map[string]*FileRecord{"decoded": decoded, "scrambled": scrambled, "literal": &literal}
		s := r.Uint64N(rec.Size)
		for _, rng := range []*httprange.Range{nil, {Kind: httprange.Closed, Start: s, End: s + r.Uint64N(rec.Size)}} {
			want, err := Plan(rec, rng, (&layoutSet{m: m}).get)
			if err != nil {
				t.Fatal(err)
			}
			for name, v := range variants {
				got, err := Plan(v, rng, (&layoutSet{m: m}).get)
				if err != nil {
					t.Fatalf("iter %d %s: %v", iter, name, err)
				}
				if !sameAnswer(got, want) {
					t.Fatalf("iter %d %s range %v: answers differ:\n got  %+v\n want %+v", iter, name, rng, got.Xorbs, want.Xorbs)
				}
			}
		}
		for name, v := range variants {
			enc, err := v.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(enc, canonical) {
				t.Fatalf("iter %d %s: re-encoding differs from the canonical encoding", iter, name)
			}
		}
	}
}

func sameAnswer(a, b *Answer) bool {
	if a.Offset != b.Offset || a.Len() != b.Len() || !reflect.DeepEqual(a.Xorbs, b.Xorbs) {
		return false
	}
	for i := 0; i < a.Len(); i++ {
		if a.Term(i) != b.Term(i) || a.FetchIndex(i) != b.FetchIndex(i) {
			return false
		}
	}
	return true
}

// TestPlanStaleIndex: a copy of a record whose Terms were replaced must not use the index of the
// original terms.
func TestPlanStaleIndex(t *testing.T) {
	rec, a, b := fixture(t)
	cp := *rec
	cp.Terms = append([]Term(nil), rec.Terms[1:]...) // B[0,3) A[2,4) A[1,3)
	cp.Size -= uint64(rec.Terms[0].RawBytes)
	got, err := Plan(&cp, nil, (&layoutSet{m: layoutMap(a, b)}).get)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Plan(&FileRecord{Hash: cp.Hash, Size: cp.Size, Terms: cp.Terms}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !sameAnswer(got, want) || got.Xorbs[0].Hash != b.Hash {
		t.Fatalf("stale index used: got %+v, want %+v", got.Xorbs, want.Xorbs)
	}
}

// TestPlanSizeMismatch: a literal record whose Size exceeds its terms gives ErrCorrupt, not a
// panic, for ranges past the terms.
func TestPlanSizeMismatch(t *testing.T) {
	rec, a, b := fixture(t)
	bad := exported(rec)
	bad.Size += 100
	for _, h := range []string{"bytes=1600-1600", "bytes=0-1600", "bytes=1559-"} {
		_, err := Plan(&bad, mustRange(t, h), (&layoutSet{m: layoutMap(a, b)}).get)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", h, err)
		}
	}
}

// TestTermIndexFind checks the sampled search against a linear walk, across block boundaries.
func TestTermIndexFind(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 2, blockTerms - 1, blockTerms, blockTerms + 1, 3*blockTerms + 7} {
		terms := make([]Term, n)
		var size uint64
		for i := range terms {
			terms[i] = Term{Start: 0, End: 1, RawBytes: 1 + r.Uint32N(5)}
			size += uint64(terms[i].RawBytes)
		}
		ix := indexTerms(terms)
		for off := uint64(0); off <= size+1; off++ {
			for _, strict := range []bool{true, false} {
				wi, wpos, wok := 0, uint64(0), false
				for pos := uint64(0); wi < n; wi++ {
					next := pos + uint64(terms[wi].RawBytes)
					if next > off || (!strict && next == off) {
						wpos, wok = pos, true
						break
					}
					pos = next
				}
				if !wok {
					wi = 0
				}
				i, pos, ok := ix.find(terms, off, strict)
				if i != wi || pos != wpos || ok != wok {
					t.Fatalf("n %d off %d strict %v: find = %d %d %v, want %d %d %v", n, off, strict, i, pos, ok, wi, wpos, wok)
				}
			}
		}
	}
}

// TestIndexTermsXorbs: the term index numbers the distinct xorbs in order of first use and
// gives every term its xorb's number, with few distinct xorbs (searched in place), many (a map
// from linearXorbs on), and runs, repeats and returns in between.
func TestIndexTermsXorbs(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, distinct := range []int{1, 2, linearXorbs - 1, linearXorbs, linearXorbs + 1, 3 * linearXorbs, 500} {
		pool := make([]hash.Hash, distinct)
		for i := range pool {
			pool[i][0], pool[i][1], pool[i][31] = byte(i), byte(i>>8), 0xa5
		}
		terms := make([]Term, 4*distinct+10)
		for i := range terms {
			switch {
			case i < distinct:
				terms[i].Xorb = pool[i] // every xorb used
			case i%3 == 0:
				terms[i].Xorb = terms[i-1].Xorb // a run
			default:
				terms[i].Xorb = pool[r.IntN(distinct)]
			}
			terms[i].End, terms[i].RawBytes = 1, 1
		}
		r.Shuffle(len(terms), func(i, j int) { terms[i], terms[j] = terms[j], terms[i] })
		ix := indexTerms(terms)
		num := map[hash.Hash]int32{}
		var order []hash.Hash
		for i := range terms {
			x, ok := num[terms[i].Xorb]
			if !ok {
				x = int32(len(order))
				num[terms[i].Xorb] = x
				order = append(order, terms[i].Xorb)
			}
			if ix.xorb[i] != x {
				t.Fatalf("%d distinct: term %d has xorb number %d, want %d", distinct, i, ix.xorb[i], x)
			}
		}
		if !slices.Equal(ix.xorbs, order) {
			t.Fatalf("%d distinct: %d xorbs listed, want %d in order of first use", distinct, len(ix.xorbs), len(order))
		}
	}
}
