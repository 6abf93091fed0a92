package server

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// textChunk fills a 64 KiB chunk with text-like data: words from a small vocabulary.
func textChunk(rng *rand.Rand, n int) []byte {
	words := []string{"tensor", "layer", "weight", "the", "of", "model", "attention", "head", "bias", "0.125", "-1.5e-3", "\n"}
	b := make([]byte, 0, n+16)
	for len(b) < n {
		b = append(b, words[rng.IntN(len(words))]...)
		b = append(b, ' ')
	}
	return b[:n]
}

// BenchmarkXorbIngestHTTP uploads distinct 16 MiB LZ4 xorbs of 64 KiB text-like chunks over
// HTTP into SQLite + local disk, one at a time, and reports MB/s and the share of the time spent
// in validation (decompress, hash, merkle).
func BenchmarkXorbIngestHTTP(b *testing.B) {
	for _, be := range []backend{sqliteLocal(), postgresMinIO()} {
		b.Run(be.name, func(b *testing.B) { benchIngest(b, be) })
	}
}

func benchIngest(b *testing.B, be backend) {
	e := newEnv(b, be)
	w := e.token("bench", auth.Write)
	const chunks, chunkSize = 256, 64 << 10
	rng := rand.New(rand.NewPCG(1, 1))
	base := make([][]byte, chunks)
	for i := range base {
		base[i] = textChunk(rng, chunkSize)
	}
	build := func(i int) ([]byte, hash.Hash) {
		bl := xorb.NewBuilder(xorb.LZ4)
		for c, raw := range base {
			if c == 0 {
				raw = append(fmt.Appendf(nil, "%08d", i), raw[8:]...) // distinct xorb per upload
			}
			bl.Add(raw, hash.Chunk(raw))
		}
		body, l := bl.Finish()
		return body, l.Hash
	}
	b.SetBytes(chunks * chunkSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		body, h := build(i)
		b.StartTimer()
		resp := e.do("POST", "/v1/xorbs/default/"+h.String(), w, body)
		read(e.t, resp)
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	var valSec float64
	mfs, _ := e.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "xet_origin_ingest_validation_seconds" {
			for _, m := range mf.GetMetric() {
				valSec += m.GetHistogram().GetSampleSum()
			}
		}
	}
	b.ReportMetric(100*valSec/b.Elapsed().Seconds(), "%validation")
}
