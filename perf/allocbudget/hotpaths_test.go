package allocbudget_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/perf/allocbudget"
	"github.com/xetcdn/xetcdn/perf/fixture"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// The hot paths of docs/architecture.md measured here, each at its public API (the server
// handlers around them change more often than these do):
//
//   - upload side: chunking + chunk hashing as the client streams a file (chunk.Hasher), xorb
//     packing with per-run compression (xorb.Builder), the origin's one-pass xorb validation;
//   - shard side: parsing an upload shard, its dedup entries, encoding one (client);
//   - read side: the record decode an edge does on an origin answer, reconstruction planning,
//     and the encodings behind the edge's answer path: the cached whole-file terms
//     (recon.EncodeTerms), the signed rest of a whole-file answer (AppendRestV2, once per
//     record, scope and URL expiry), a ranged answer written from cached terms (WriteV2Terms),
//     and a full uncached v2 answer (WriteV2); for a realistic 1,000-term file and for the
//     100,000-term worst case of the latency gate.
//
// The origin's shard registration (ingest) is measured in origin/internal/ingest.

// random returns n deterministic pseudo-random bytes.
func random(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

func TestAllocBudgetChunking(t *testing.T) {
	data := random(8<<20, 1)
	allocbudget.Check(t, "chunk/hasher-8MiB", 5, func() {
		h := chunk.NewHasher(bytes.NewReader(data))
		for {
			if _, _, err := h.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				break
			}
		}
		if _, err := h.Info(); err != nil {
			t.Fatal(err)
		}
	})
}

// textXorb returns a xorb of n text-like chunks of size bytes, packed with scheme.
func textXorb(t *testing.T, scheme xorb.Scheme, n, size int) ([]byte, [][]byte, []hash.Hash) {
	rng := rand.New(rand.NewPCG(2, 3))
	raws := make([][]byte, n)
	hs := make([]hash.Hash, n)
	b := xorb.NewBuilder(scheme)
	for i := range raws {
		raws[i] = fixture.TextChunk(rng, size)
		hs[i] = hash.Chunk(raws[i])
		if !b.Add(raws[i], hs[i]) {
			t.Fatalf("chunk %d does not fit", i)
		}
	}
	body, _ := b.Finish()
	return body, raws, hs
}

func TestAllocBudgetXorb(t *testing.T) {
	// 4 MiB of text in 64 KiB chunks, LZ4-compressed as hf_xet sends text.
	body, raws, hs := textXorb(t, xorb.LZ4, 64, 64<<10)
	allocbudget.Check(t, "xorb/validate-lz4-4MiB", 5, func() {
		if _, _, err := xorb.Validate(body, xorb.ValidateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	// The same body streamed (the origin's xorb upload on the local store): its read buffer is
	// pooled, so the budget is the layout, not the body.
	allocbudget.Check(t, "xorb/validate-stream-lz4-4MiB", 5, func() {
		if _, _, err := xorb.ValidateStream(bytes.NewReader(body), io.Discard, nil); err != nil {
			t.Fatal(err)
		}
	})
	allocbudget.Check(t, "xorb/build-auto-4MiB", 5, func() {
		b := xorb.NewBuilder(xorb.Auto)
		for i := range raws {
			b.Add(raws[i], hs[i])
		}
		b.Finish()
	})
}

// layouts returns n synthetic layouts of chunks chunks of 16-240 raw bytes, stored with an
// 8-byte header each (the hashes are random bytes: planning never recomputes them).
func layouts(n, chunks int, seed uint64) ([]*xorb.Layout, map[hash.Hash]*xorb.Layout) {
	rng := rand.New(rand.NewPCG(seed, 1))
	ls := make([]*xorb.Layout, n)
	m := make(map[hash.Hash]*xorb.Layout, n)
	randHash := func() (h hash.Hash) {
		for i := 0; i < len(h); i += 8 {
			binary.LittleEndian.PutUint64(h[i:], rng.Uint64())
		}
		return h
	}
	for x := range ls {
		l := &xorb.Layout{Hash: randHash(), ChunkHashes: make([]hash.Hash, chunks),
			StoredEnds: make([]uint32, chunks), RawEnds: make([]uint32, chunks)}
		var se, re uint32
		for c := range chunks {
			l.ChunkHashes[c] = randHash()
			n := 16 + rng.Uint32N(225)
			se += xorb.HeaderSize + n
			re += n
			l.StoredEnds[c], l.RawEnds[c] = se, re
		}
		ls[x], m[l.Hash] = l, l
	}
	return ls, m
}

// record builds the file record of refs over ls, as ingest does on registration.
func record(t *testing.T, ls []*xorb.Layout, m map[hash.Hash]*xorb.Layout, refs []fixture.Ref) (shard.File, *recon.FileRecord) {
	f := shard.File{Hash: hash.Chunk([]byte(fmt.Sprint(len(refs))))}
	for _, r := range refs {
		l := ls[r.Xorb]
		f.Terms = append(f.Terms, shard.Term{Xorb: l.Hash, Start: r.Start, End: r.End, RawBytes: l.RawRange(r.Start, r.End)})
	}
	rec, err := recon.NewFileRecord(f, m)
	if err != nil {
		t.Fatal(err)
	}
	return f, rec
}

func signer(t *testing.T, file hash.Hash) urlsign.Bound {
	s, err := urlsign.New(urlsign.Options{BaseURL: "https://edge.example.org", Key: bytes.Repeat([]byte{1}, 32), TTL: time.Hour,
		Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	return s.Bind("models/acme/bench", file, s.Expiry(time.Minute))
}

func TestAllocBudgetRecon(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		xorbs, chunks, terms int
		shape                string // "mix": MixRefs; else fixture.Shape
		runs                 int
	}{
		{"realistic-1k", 64, 1024, 1000, "mix", 20},
		// The 100,000-term file of the latency gate: 1,000 xorbs, consecutive terms in different
		// xorbs, so that no two fetch ranges merge.
		{"worst-100k", 1000, 1024, 100_000, string(fixture.Worst), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, m := layouts(tc.xorbs, tc.chunks, 5)
			var refs []fixture.Ref
			var err error
			if tc.shape == "mix" {
				refs, err = fixture.MixRefs(ls, 9, 0, tc.terms, tc.terms)
			} else {
				refs, err = fixture.ReconRefs(fixture.Shape(tc.shape), tc.xorbs, tc.chunks, tc.terms)
			}
			if err != nil {
				t.Fatal(err)
			}
			f, rec := record(t, ls, m, refs)
			get := func(h hash.Hash) (*xorb.Layout, error) { return m[h], nil }
			s := signer(t, rec.Hash)
			// A range from a quarter to three quarters of the file: trimming at both ends.
			rng := &httprange.Range{Start: rec.Size / 4, End: rec.Size * 3 / 4}
			whole, err := recon.Plan(rec, nil, get)
			if err != nil {
				t.Fatal(err)
			}
			ranged, err := recon.Plan(rec, rng, get)
			if err != nil {
				t.Fatal(err)
			}
			terms, err := recon.EncodeTerms(whole)
			if err != nil {
				t.Fatal(err)
			}
			data, err := rec.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			p := "recon/" + tc.name + "/"
			allocbudget.Check(t, p+"new-record", tc.runs, func() {
				if _, err := recon.NewFileRecord(f, m); err != nil {
					t.Fatal(err)
				}
			})
			allocbudget.Check(t, p+"unmarshal-record", tc.runs, func() {
				if _, err := recon.UnmarshalFileRecord(data); err != nil {
					t.Fatal(err)
				}
			})
			allocbudget.Check(t, p+"plan-whole", tc.runs, func() {
				if _, err := recon.Plan(rec, nil, get); err != nil {
					t.Fatal(err)
				}
			})
			allocbudget.Check(t, p+"plan-range", tc.runs, func() {
				if _, err := recon.Plan(rec, rng, get); err != nil {
					t.Fatal(err)
				}
			})
			allocbudget.Check(t, p+"encode-terms", tc.runs, func() {
				if _, err := recon.EncodeTerms(whole); err != nil {
					t.Fatal(err)
				}
			})
			allocbudget.Check(t, p+"append-rest-v2", tc.runs, func() {
				// As the edge sizes the buffer of a whole-file answer's signed rest.
				recon.Encoder{}.AppendRestV2(make([]byte, 0, 64+200*whole.NumRanges()), whole, s)
			})
			allocbudget.Check(t, p+"write-v2-terms-range", tc.runs, func() {
				if err := (recon.Encoder{}).WriteV2Terms(io.Discard, ranged, s, terms); err != nil {
					t.Fatal(err)
				}
			})
			allocbudget.Check(t, p+"write-v2-whole", tc.runs, func() {
				if err := (recon.Encoder{}).WriteV2(io.Discard, whole, s); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

func TestAllocBudgetShard(t *testing.T) {
	// An hf_xet-like upload shard: 4 files of 64 terms over 16 xorbs of 1,024 chunks, and the
	// xorb-info blocks of 2 new xorbs.
	xs := fixture.XorbSpec{Tag: "budget", Seed: 3, Chunks: 1024, MinChunk: 16, MaxChunk: 240}.BuildAll(16, 1)
	ls := make([]*xorb.Layout, len(xs))
	for i := range xs {
		ls[i] = xs[i].Layout
	}
	sh, err := fixture.RegistrationShard(ls, 11, 0, 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	sh.Xorbs = []shard.Xorb{fixture.XorbBlock(ls[0]), fixture.XorbBlock(ls[1])}
	body := sh.AppendUpload(nil)
	allocbudget.Check(t, "shard/parse-4files", 20, func() {
		if _, err := shard.Parse(body); err != nil {
			t.Fatal(err)
		}
	})
	allocbudget.Check(t, "shard/eligible-chunks", 20, func() { shard.EligibleChunks(sh) })
	allocbudget.Check(t, "shard/append-upload", 20, func() { sh.AppendUpload(nil) })
}
