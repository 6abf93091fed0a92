package recon

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/jsontest"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// The hand-written encoders of this package write the JSON shapes of shared/wire. Their
// contract is the decoded value, not the bytes: they keep the xorbs in the answer's order
// where json.Marshal sorts map keys, and write '&', '<', '>' and U+2028 raw where json.Marshal
// escapes them. These tests build the wire value of each answer independently of the encoders
// (from Answer's exported fields and the signer), and check that the encoders' bytes decode to
// exactly what json.Marshal of that value decodes to.

// wireTerms is the "terms" list of a.
func wireTerms(a *Answer) []wire.Term {
	terms := make([]wire.Term, a.Len())
	for i := range terms {
		t := a.Term(i)
		terms[i] = wire.Term{Hash: t.Xorb, UnpackedLength: t.RawBytes, Range: wire.ChunkRange{Start: t.Start, End: t.End}}
	}
	return terms
}

// wireV2 is the v2 answer a stands for: per xorb, its ranges in entries of at most maxRanges,
// one URL signing each entry's byte ranges.
func wireV2(a *Answer, s Signer, maxRanges int) *wire.QueryReconstructionResponseV2 {
	if maxRanges <= 0 {
		maxRanges = DefaultMaxRanges
	}
	out := &wire.QueryReconstructionResponseV2{OffsetIntoFirstRange: a.Offset, Terms: wireTerms(a),
		Xorbs: map[hash.Hash][]wire.MultiRangeFetch{}}
	for _, xf := range a.Xorbs {
		entries := []wire.MultiRangeFetch{}
		for lo := 0; lo < len(xf.Chunks); lo += maxRanges {
			hi := min(lo+maxRanges, len(xf.Chunks))
			e := wire.MultiRangeFetch{URL: string(s.AppendURL(nil, xf.Hash, xf.Bytes[lo:hi]))}
			for r := lo; r < hi; r++ {
				e.Ranges = append(e.Ranges, wire.RangeDescriptor{
					Chunks: wire.ChunkRange{Start: xf.Chunks[r].Start, End: xf.Chunks[r].End},
					Bytes:  wire.ByteRange{Start: xf.Bytes[r].Start, End: xf.Bytes[r].End}})
			}
			entries = append(entries, e)
		}
		out.Xorbs[xf.Hash] = entries
	}
	return out
}

// wireV1 is the v1 answer a stands for: one fetch entry, with its own URL, per range.
func wireV1(a *Answer, s Signer) *wire.QueryReconstructionResponse {
	out := &wire.QueryReconstructionResponse{OffsetIntoFirstRange: a.Offset, Terms: wireTerms(a),
		FetchInfo: map[hash.Hash][]wire.FetchInfo{}}
	for _, xf := range a.Xorbs {
		entries := []wire.FetchInfo{}
		for r := range xf.Chunks {
			entries = append(entries, wire.FetchInfo{
				Range:    wire.ChunkRange{Start: xf.Chunks[r].Start, End: xf.Chunks[r].End},
				URL:      string(s.AppendURL(nil, xf.Hash, xf.Bytes[r:r+1])),
				URLRange: wire.ByteRange{Start: xf.Bytes[r].Start, End: xf.Bytes[r].End}})
		}
		out.FetchInfo[xf.Hash] = entries
	}
	return out
}

// sameValue checks that got decodes (encoding/json) to the same value as json.Marshal(want):
// as generic JSON (every key and number, exactly), and into want's type.
func sameValue(t *testing.T, got []byte, want any) {
	t.Helper()
	ref, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(jsontest.Value(t, got), jsontest.Value(t, ref)) {
		t.Fatalf("encoder and wire type differ:\n encoder %s\n wire    %s", clipBody(got), clipBody(ref))
	}
	typ := reflect.TypeOf(want).Elem()
	fromGot, fromRef := reflect.New(typ).Interface(), reflect.New(typ).Interface()
	if err := json.Unmarshal(got, fromGot); err != nil {
		t.Fatalf("does not decode into %T: %v", want, err)
	}
	if err := json.Unmarshal(ref, fromRef); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromGot, fromRef) {
		t.Fatalf("decodes into %T unlike the wire type's encoding:\n encoder %s\n wire    %s", want, clipBody(got), clipBody(ref))
	}
}

// unicodeSigner emits URLs that need no JSON escaping but that json.Marshal escapes anyway
// (HTML characters, U+2028), and non-ASCII text.
type unicodeSigner struct{}

func (unicodeSigner) AppendURL(dst []byte, h hash.Hash, rs []ByteRange) []byte {
	dst = append(dst, "https://cdn.example.org/a&b<c>d'e+f%2Fg\u2028\u2029é/"...)
	return testSigner{}.AppendURL(dst, h, rs)
}

// maxAnswer plans, whole-file, a record whose values reach their limits: chunk indices up to
// xorb.MaxChunks, raw lengths of xorb.MaxRawBytes, stored offsets up to 2^32-1.
func maxAnswer(t *testing.T) *Answer {
	x1, x2 := hash.Chunk([]byte("x1")), hash.Chunk([]byte("x2"))
	rec := &FileRecord{Hash: hash.Chunk([]byte("max")), Terms: []Term{
		{Xorb: x1, Start: 0, End: xorb.MaxChunks, RawBytes: xorb.MaxRawBytes, ByteStart: 0, ByteEnd: math.MaxUint32},
		{Xorb: x2, Start: xorb.MaxChunks - 1, End: xorb.MaxChunks, RawBytes: xorb.MaxChunkRaw, ByteStart: math.MaxUint32 - 9, ByteEnd: math.MaxUint32},
		{Xorb: x1, Start: 0, End: xorb.MaxChunks, RawBytes: xorb.MaxRawBytes, ByteStart: 0, ByteEnd: math.MaxUint32},
	}}
	for _, tm := range rec.Terms {
		rec.Size += uint64(tm.RawBytes)
	}
	data, err := rec.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = UnmarshalFileRecord(data); err != nil {
		t.Fatal(err)
	}
	a, err := Plan(rec, nil, func(hash.Hash) (*xorb.Layout, error) { panic("whole file needs no layout") })
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestEncodersMatchWire(t *testing.T) {
	rec, a, b := fixture(t)
	small := (&layoutSet{m: layoutMap(a, b)}).get
	big, ls := bigRecord(t, 13, 32, 13*5, true, 1)
	signer, err := urlsign.New(urlsign.Options{BaseURL: "https://edge.example.org:4443", Key: make([]byte, urlsign.MinKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	real := signer.Bind("models/acme/x", rec.Hash, time.Unix(1_800_000_000, 0))
	type input struct {
		name   string
		rec    *FileRecord
		layout LayoutFunc
		rng    string
	}
	inputs := []input{
		{"empty file", &FileRecord{}, small, ""},
		{"empty range", rec, small, "bytes=0-0"},
		{"whole", rec, small, ""},
		{"ranged", rec, small, "bytes=290-1200"},
		{"gapped whole", big, ls.get, ""},
		{"gapped ranged", big, ls.get, "bytes=1000-30000"},
	}
	signers := []struct {
		name string
		s    Signer
	}{{"test", testSigner{}}, {"urlsign", real}, {"unescaped specials", unicodeSigner{}}, {"escaped", quoteSigner{}}}
	check := func(t *testing.T, ans *Answer, terms *Terms, s Signer) {
		for _, maxRanges := range []int{0, 1, 3} {
			e := Encoder{MaxRanges: maxRanges}
			var v2, v1, v2p, v2t, v1t bytes.Buffer
			if err := e.WriteV2(&v2, ans, s); err != nil {
				t.Fatal(err)
			}
			sameValue(t, v2.Bytes(), wireV2(ans, s, maxRanges))
			if err := (Encoder{MaxRanges: maxRanges, Workers: 3}).WriteV2(&v2p, ans, s); err != nil {
				t.Fatal(err)
			}
			sameValue(t, v2p.Bytes(), wireV2(ans, s, maxRanges))
			if err := e.WriteV1(&v1, ans, s); err != nil {
				t.Fatal(err)
			}
			sameValue(t, v1.Bytes(), wireV1(ans, s))
			if err := e.WriteV2Terms(&v2t, ans, s, terms); err != nil {
				t.Fatal(err)
			}
			sameValue(t, v2t.Bytes(), wireV2(ans, s, maxRanges))
			if err := e.WriteV1Terms(&v1t, ans, s, terms); err != nil {
				t.Fatal(err)
			}
			sameValue(t, v1t.Bytes(), wireV1(ans, s))
			if ans.whole {
				sameValue(t, e.AppendRestV2(bytes.Clone(terms.Prefix()), ans, s), wireV2(ans, s, maxRanges))
				sameValue(t, e.AppendRestV1(bytes.Clone(terms.Prefix()), ans, s), wireV1(ans, s))
			}
		}
	}
	for _, in := range inputs {
		for _, sg := range signers {
			t.Run(in.name+"/"+sg.name, func(t *testing.T) {
				whole, err := Plan(in.rec, nil, in.layout)
				if err != nil {
					t.Fatal(err)
				}
				terms, err := EncodeTerms(whole)
				if err != nil {
					t.Fatal(err)
				}
				ans := whole
				if in.rng != "" {
					var r httprange.Range
					if r, err = httprange.ParseOne(in.rng); err != nil {
						t.Fatal(err)
					}
					if ans, err = Plan(in.rec, &r, in.layout); err != nil {
						t.Fatal(err)
					}
				}
				check(t, ans, terms, sg.s)
			})
		}
	}
	t.Run("max values", func(t *testing.T) {
		ans := maxAnswer(t)
		terms, err := EncodeTerms(ans)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Len() != 3 || ans.Term(1).ByteEnd != math.MaxUint32 {
			t.Fatalf("max answer has %d terms", ans.Len())
		}
		check(t, ans, terms, real)
	})
}
