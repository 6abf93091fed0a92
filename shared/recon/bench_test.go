package recon

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// The worst-case file of the task: 1,000 xorbs x 1,024 chunks, 100,000 terms of ~10 chunks.
// "interleaved": consecutive terms are in different xorbs; a xorb's terms still touch, so they
// merge into one fetch range per xorb. "gapped": interleaved with one chunk left out between a
// xorb's terms, so nothing merges (100,000 fetch ranges, 1,000 URLs at 100 ranges each).
// "merged": each xorb's terms are adjacent in the file and merge into one range per xorb.
const (
	benchXorbs  = 1000
	benchChunks = 1024
	benchTerms  = 100_000
)

func benchSigner(b *testing.B) urlsign.Bound {
	s, err := urlsign.New(urlsign.Options{BaseURL: "https://edge.example.org", Key: bytes.Repeat([]byte{1}, 32), TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	return s.Bind("models/acme/bench", hash.Chunk([]byte("bench file")), s.Expiry(0))
}

// benchRanges returns n random closed ranges inside size bytes (varied lengths).
func benchRanges(size uint64, n int) []httprange.Range {
	r := rand.New(rand.NewPCG(8, 9))
	out := make([]httprange.Range, n)
	for i := range out {
		s := r.Uint64N(size)
		out[i] = httprange.Range{Start: s, End: s + r.Uint64N(size-s)}
	}
	return out
}

func BenchmarkPlanWriteV2(b *testing.B) {
	s := benchSigner(b)
	for _, shape := range []struct {
		name        string
		interleaved bool
		gap         uint32
	}{{"interleaved", true, 0}, {"gapped", true, 1}, {"merged", false, 0}} {
		rec, ls := bigRecord(b, benchXorbs, benchChunks, benchTerms, shape.interleaved, shape.gap)
		ranges := benchRanges(rec.Size, 64)
		for _, mode := range []struct {
			name    string
			ranged  bool
			workers int
		}{{"whole", false, 1}, {"whole-2workers", false, 2}, {"range", true, 1}} {
			b.Run(shape.name+"/"+mode.name, func(b *testing.B) {
				enc := Encoder{Workers: mode.workers}
				var written int64
				i := 0
				b.ReportAllocs()
				start := testenv.CPUTime()
				for b.Loop() {
					var rng *httprange.Range
					if mode.ranged {
						rng = &ranges[i%len(ranges)]
						i++
					}
					a, err := Plan(rec, rng, ls.get)
					if err != nil {
						b.Fatal(err)
					}
					cw := countWriter{}
					if err := enc.WriteV2(&cw, a, s); err != nil {
						b.Fatal(err)
					}
					written += cw.n
				}
				testenv.ReportCPU(b, start)
				b.SetBytes(written / int64(max(b.N, 1)))
			})
		}
	}
}

// BenchmarkPlan and BenchmarkWriteV2 split the whole-file interleaved case into its halves.
func BenchmarkPlan(b *testing.B) {
	rec, ls := bigAnswer(b, benchXorbs, benchChunks, benchTerms, true)
	b.SetBytes(int64(rec.Size))
	b.ReportAllocs()
	start := testenv.CPUTime()
	for b.Loop() {
		if _, err := Plan(rec, nil, ls.get); err != nil {
			b.Fatal(err)
		}
	}
	testenv.ReportCPU(b, start)
}

// BenchmarkPlanRange plans the 64 random ranges of PlanWriteV2/gapped/range without writing:
// the trimming, the search for the first and last terms, and the merge of the emitted terms.
func BenchmarkPlanRange(b *testing.B) {
	rec, ls := bigRecord(b, benchXorbs, benchChunks, benchTerms, true, 1)
	ranges := benchRanges(rec.Size, 64)
	b.SetBytes(int64(rec.Size))
	b.ReportAllocs()
	i := 0
	start := testenv.CPUTime()
	for b.Loop() {
		if _, err := Plan(rec, &ranges[i%len(ranges)], ls.get); err != nil {
			b.Fatal(err)
		}
		i++
	}
	testenv.ReportCPU(b, start)
}

func BenchmarkWriteV2(b *testing.B) {
	rec, ls := bigAnswer(b, benchXorbs, benchChunks, benchTerms, true)
	a, err := Plan(rec, nil, ls.get)
	if err != nil {
		b.Fatal(err)
	}
	s := benchSigner(b)
	cw := countWriter{}
	if err := WriteV2(&cw, a, s); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(cw.n)
	b.ReportAllocs()
	start := testenv.CPUTime()
	for b.Loop() {
		if err := WriteV2(io.Discard, a, s); err != nil {
			b.Fatal(err)
		}
	}
	testenv.ReportCPU(b, start)
}

func BenchmarkUnmarshalFileRecord(b *testing.B) {
	rec, _ := bigAnswer(b, benchXorbs, benchChunks, benchTerms, true)
	data, err := rec.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	start := testenv.CPUTime()
	for b.Loop() {
		if _, err := UnmarshalFileRecord(data); err != nil {
			b.Fatal(err)
		}
	}
	testenv.ReportCPU(b, start)
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
