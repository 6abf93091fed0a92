package recon

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Decoding shapes written independently of the encoder, after docs/protocol.md §2.3.
type (
	jRange struct {
		Start *uint64 `json:"start"`
		End   *uint64 `json:"end"`
	}
	jTerm struct {
		Hash           *string `json:"hash"`
		UnpackedLength *uint32 `json:"unpacked_length"`
		Range          *jRange `json:"range"`
	}
	jV2 struct {
		Offset *uint64 `json:"offset_into_first_range"`
		Terms  []jTerm `json:"terms"`
		Xorbs  map[string][]struct {
			URL    *string `json:"url"`
			Ranges []struct {
				Chunks *jRange `json:"chunks"`
				Bytes  *jRange `json:"bytes"`
			} `json:"ranges"`
		} `json:"xorbs"`
	}
	jV1 struct {
		Offset    *uint64 `json:"offset_into_first_range"`
		Terms     []jTerm `json:"terms"`
		FetchInfo map[string][]struct {
			Range    *jRange `json:"range"`
			URL      *string `json:"url"`
			URLRange *jRange `json:"url_range"`
		} `json:"fetch_info"`
	}
)

func (r *jRange) ok() bool { return r != nil && r.Start != nil && r.End != nil }

// checkV2 decodes a v2 body and applies the client's checks: every field present, every term
// covered by one range of its xorb, ranges sorted within an entry, at most max ranges per entry,
// and the answer's terms and ranges reproduced.
func checkV2(t *testing.T, body []byte, a *Answer, max int) {
	t.Helper()
	if _, err := wire.DecodeV2(body); err != nil {
		t.Fatalf("v2 fails the client rules: %v\n%s", err, clipBody(body))
	}
	var v jV2
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("v2 does not decode: %v\n%s", err, clipBody(body))
	}
	if v.Offset == nil || *v.Offset != a.Offset || v.Terms == nil || v.Xorbs == nil {
		t.Fatalf("v2 offset/terms/xorbs missing or wrong")
	}
	if len(v.Terms) != a.Len() || len(v.Xorbs) != len(a.Xorbs) {
		t.Fatalf("v2 has %d terms %d xorbs, want %d %d", len(v.Terms), len(v.Xorbs), a.Len(), len(a.Xorbs))
	}
	for i, jt := range v.Terms {
		want := a.Term(i)
		if jt.Hash == nil || jt.UnpackedLength == nil || !jt.Range.ok() {
			t.Fatalf("term %d lacks a field", i)
		}
		if *jt.Hash != want.Xorb.String() || *jt.UnpackedLength != want.RawBytes ||
			*jt.Range.Start != uint64(want.Start) || *jt.Range.End != uint64(want.End) {
			t.Fatalf("term %d = %+v, want %+v", i, jt, want)
		}
		covered := false
		for _, e := range v.Xorbs[*jt.Hash] {
			for _, r := range e.Ranges {
				if *r.Chunks.Start <= uint64(want.Start) && uint64(want.End) <= *r.Chunks.End {
					covered = true
				}
			}
		}
		if !covered {
			t.Fatalf("term %d has no fetch range", i)
		}
	}
	for _, xf := range a.Xorbs {
		entries := v.Xorbs[xf.Hash.String()]
		n := 0
		for _, e := range entries {
			if e.URL == nil || len(e.Ranges) == 0 || len(e.Ranges) > max {
				t.Fatalf("xorb %s: entry without url or with %d ranges", xf.Hash, len(e.Ranges))
			}
			for k, r := range e.Ranges {
				if !r.Chunks.ok() || !r.Bytes.ok() {
					t.Fatalf("xorb %s: range lacks a field", xf.Hash)
				}
				if k > 0 && *r.Chunks.Start < *e.Ranges[k-1].Chunks.Start {
					t.Fatalf("xorb %s: ranges not sorted", xf.Hash)
				}
				if *r.Chunks.Start != uint64(xf.Chunks[n].Start) || *r.Chunks.End != uint64(xf.Chunks[n].End) ||
					*r.Bytes.Start != xf.Bytes[n].Start || *r.Bytes.End != xf.Bytes[n].End {
					t.Fatalf("xorb %s range %d differs", xf.Hash, n)
				}
				n++
			}
		}
		if n != len(xf.Chunks) {
			t.Fatalf("xorb %s: %d ranges written, want %d", xf.Hash, n, len(xf.Chunks))
		}
	}
}

func checkV1(t *testing.T, body []byte, a *Answer) {
	t.Helper()
	var w wire.QueryReconstructionResponse
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatalf("v1 does not decode: %v", err)
	}
	if err := w.ToV2().Validate(); err != nil {
		t.Fatalf("v1 fails the client rules: %v", err)
	}
	var v jV1
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("v1 does not decode: %v", err)
	}
	if v.Offset == nil || *v.Offset != a.Offset || v.Terms == nil || v.FetchInfo == nil || len(v.Terms) != a.Len() {
		t.Fatalf("v1 offset/terms/fetch_info missing or wrong")
	}
	for _, xf := range a.Xorbs {
		fi := v.FetchInfo[xf.Hash.String()]
		if len(fi) != len(xf.Chunks) {
			t.Fatalf("xorb %s: %d fetch_info entries, want %d", xf.Hash, len(fi), len(xf.Chunks))
		}
		for k, e := range fi {
			if e.URL == nil || !e.Range.ok() || !e.URLRange.ok() ||
				*e.Range.Start != uint64(xf.Chunks[k].Start) || *e.URLRange.End != xf.Bytes[k].End {
				t.Fatalf("xorb %s entry %d wrong", xf.Hash, k)
			}
		}
	}
}

func clipBody(b []byte) []byte {
	if len(b) > 400 {
		return b[:400]
	}
	return b
}

func TestWriteGolden(t *testing.T) {
	rec, a, b := fixture(t)
	tests := []struct {
		name      string
		rng       string
		v2        bool
		maxRanges int
	}{
		{"v2_whole", "", true, 0},
		{"v2_ranged", "bytes=290-1200", true, 0},
		{"v1_ranged", "bytes=290-1200", false, 0},
		{"v2_empty", "bytes=0-0", true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rec
			var rng *httprange.Range
			if tc.rng != "" {
				rng = mustRange(t, tc.rng)
			}
			if tc.name == "v2_empty" {
				r = &FileRecord{}
			}
			ans, err := Plan(r, rng, (&layoutSet{m: layoutMap(a, b)}).get)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			enc := Encoder{MaxRanges: tc.maxRanges}
			if tc.v2 {
				err = enc.WriteV2(&buf, ans, testSigner{})
			} else {
				err = enc.WriteV1(&buf, ans, testSigner{})
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.v2 {
				checkV2(t, buf.Bytes(), ans, DefaultMaxRanges)
			} else {
				checkV1(t, buf.Bytes(), ans)
			}
			path := filepath.Join("testdata", tc.name+".json")
			if *update {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Fatalf("output differs from %s:\n got  %s\n want %s", path, buf.Bytes(), want)
			}
		})
	}
}

// bigAnswer plans a whole file of nTerms terms over nXorbs xorbs of chunksPer chunks each.
// interleaved: consecutive terms are in different xorbs (the worst case for merging); otherwise
// each xorb's terms are adjacent in the file and merge into one range.
func bigAnswer(tb testing.TB, nXorbs, chunksPer, nTerms int, interleaved bool) (*FileRecord, *layoutSet) {
	tb.Helper()
	return bigRecord(tb, nXorbs, chunksPer, nTerms, interleaved, 0)
}

// bigRecord is bigAnswer with the last gap chunks of every term's slot left out, so that no two
// terms of a xorb touch and nothing merges when gap > 0. The record goes through
// MarshalBinary and UnmarshalFileRecord, as records do in the index and the edge cache.
func bigRecord(tb testing.TB, nXorbs, chunksPer, nTerms int, interleaved bool, gap uint32) (*FileRecord, *layoutSet) {
	tb.Helper()
	r := rand.New(rand.NewPCG(uint64(nXorbs), uint64(nTerms)))
	ls := &layoutSet{m: map[hash.Hash]*xorb.Layout{}}
	var xs []*xorb.Layout
	for range nXorbs {
		l := randomLayout(r, chunksPer, 16<<10)
		xs = append(xs, l)
		ls.m[l.Hash] = l
	}
	perXorb := nTerms / nXorbs
	step := uint32(chunksPer / perXorb)
	if step == 0 {
		tb.Fatalf("%d terms do not fit %d xorbs of %d chunks", nTerms, nXorbs, chunksPer)
	}
	rec := &FileRecord{Hash: hash.Chunk([]byte("big")), Terms: make([]Term, 0, nTerms)}
	for i := range nTerms {
		var x, k int
		if interleaved {
			x, k = i%nXorbs, i/nXorbs
		} else {
			x, k = i/perXorb, i%perXorb
		}
		l := xs[x]
		a, b := uint32(k)*step, uint32(k+1)*step-gap
		t := Term{Xorb: l.Hash, Start: a, End: b, RawBytes: l.RawRange(a, b)}
		t.ByteStart, t.ByteEnd = l.ByteRange(a, b)
		rec.Terms = append(rec.Terms, t)
		rec.Size += uint64(t.RawBytes)
	}
	data, err := rec.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	if rec, err = UnmarshalFileRecord(data); err != nil {
		tb.Fatal(err)
	}
	return rec, ls
}

func TestWriteParallelIdentical(t *testing.T) {
	for _, interleaved := range []bool{true, false} {
		rec, ls := bigAnswer(t, 37, 64, 37*6, interleaved)
		r := rand.New(rand.NewPCG(5, 6))
		for iter := range 20 {
			var rng *httprange.Range
			if iter > 0 {
				s := r.Uint64N(rec.Size)
				rng = &httprange.Range{Start: s, End: s + r.Uint64N(rec.Size)}
			}
			ans, err := Plan(rec, rng, ls.get)
			if err != nil {
				t.Fatal(err)
			}
			for _, v2 := range []bool{true, false} {
				write := func(e Encoder, w *bytes.Buffer) error {
					if v2 {
						return e.WriteV2(w, ans, testSigner{})
					}
					return e.WriteV1(w, ans, testSigner{})
				}
				var serial bytes.Buffer
				if err := write(Encoder{MaxRanges: 3}, &serial); err != nil {
					t.Fatal(err)
				}
				if v2 {
					checkV2(t, serial.Bytes(), ans, 3)
				} else {
					checkV1(t, serial.Bytes(), ans)
				}
				for _, k := range []int{2, 3, 7, 1000} {
					var par bytes.Buffer
					if err := write(Encoder{MaxRanges: 3, Workers: k}, &par); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(par.Bytes(), serial.Bytes()) {
						t.Fatalf("interleaved=%v iter %d v2=%v workers=%d: parallel output differs", interleaved, iter, v2, k)
					}
				}
			}
		}
	}
}

// quoteSigner emits URLs that need JSON escaping.
type quoteSigner struct{}

func (quoteSigner) AppendURL(dst []byte, h hash.Hash, _ []ByteRange) []byte {
	return append(dst, "a\"b\\c\x01d\xffé"...)
}

func TestWriteEscapesURL(t *testing.T) {
	rec, a, b := fixture(t)
	ans, err := Plan(rec, nil, (&layoutSet{m: layoutMap(a, b)}).get)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteV2(&buf, ans, quoteSigner{}); err != nil {
		t.Fatal(err)
	}
	var v jV2
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatalf("escaped output does not decode: %v\n%s", err, buf.Bytes())
	}
	if got := *v.Xorbs[a.Hash.String()][0].URL; got != "a\"b\\c\x01d\uFFFDé" {
		t.Fatalf("url decoded as %q", got)
	}
}

type failWriter struct{ after int }

var errWrite = errors.New("client went away")

func (f *failWriter) Write(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, errWrite
	}
	f.after--
	return len(p), nil
}

func TestWriteReportsWriterError(t *testing.T) {
	rec, ls := bigAnswer(t, 10, 256, 2000, true)
	ans, err := Plan(rec, nil, ls.get)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 4} {
		for after := range 4 {
			err := Encoder{Workers: k}.WriteV2(&failWriter{after: after}, ans, testSigner{})
			if !errors.Is(err, errWrite) {
				t.Fatalf("workers=%d after=%d: err = %v", k, after, err)
			}
		}
	}
}

// TestAppendPiecesMatchWriteV1 rebuilds v1 answers from AppendTerms and AppendFetchV1, called
// in pieces of several sizes, and compares them byte for byte with WriteV1's output.
func TestAppendPiecesMatchWriteV1(t *testing.T) {
	rec, a, b := fixture(t)
	small := (&layoutSet{m: layoutMap(a, b)}).get
	big, ls := bigRecord(t, 13, 32, 13*5, true, 1)
	tests := []struct {
		name   string
		rec    *FileRecord
		layout LayoutFunc
		rng    string
		signer Signer
	}{
		{"whole", rec, small, "", testSigner{}},
		{"ranged", rec, small, "bytes=290-1200", testSigner{}},
		{"empty", &FileRecord{}, small, "", testSigner{}},
		{"escaped_urls", rec, small, "", quoteSigner{}},
		{"gapped_whole", big, ls.get, "", testSigner{}},
		{"gapped_ranged", big, ls.get, "bytes=1000-30000", testSigner{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rng *httprange.Range
			if tc.rng != "" {
				rng = mustRange(t, tc.rng)
			}
			ans, err := Plan(tc.rec, rng, tc.layout)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := WriteV1(&want, ans, tc.signer); err != nil {
				t.Fatal(err)
			}
			for _, piece := range []int{1, 2, 7, 1 << 20} {
				got := fmt.Appendf(nil, `{"offset_into_first_range":%d,"terms":[`, ans.Offset)
				for k := 0; k < ans.Len(); k += piece {
					got = AppendTerms(got, ans, k, min(k+piece, ans.Len()))
				}
				got = append(got, `],"fetch_info":{`...)
				for x, xf := range ans.Xorbs {
					if x > 0 {
						got = append(got, ',')
					}
					got = fmt.Appendf(got, `%q:[`, xf.Hash.String())
					for k := 0; k < len(xf.Chunks); k += piece {
						if k > 0 {
							got = append(got, ',')
						}
						hi := min(k+piece, len(xf.Chunks))
						got = AppendFetchV1(got, tc.signer, xf.Hash, xf.Chunks[k:hi], xf.Bytes[k:hi])
					}
					got = append(got, ']')
				}
				got = append(got, "}}"...)
				if !bytes.Equal(got, want.Bytes()) {
					t.Fatalf("pieces of %d:\n got %s\nwant %s", piece, got, want.Bytes())
				}
			}
		})
	}
}
