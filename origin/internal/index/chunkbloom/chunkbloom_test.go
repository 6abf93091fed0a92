package chunkbloom

import (
	"math/rand/v2"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestBloomRates: a filter holding as many chunks as it is sized for finds every one of them
// and answers "maybe" for at most 1 in 500 others (the design rate is about 1 in 1,700).
func TestBloomRates(t *testing.T) {
	seed := NewSeed()
	const n = 100_000 // over MinChunks: the filter is exactly this size
	b := New(n)
	r := rand.New(rand.NewPCG(1, 2))
	random := func() hash.Hash {
		var h hash.Hash
		for i := 0; i < len(h); i += 8 {
			v := r.Uint64()
			for j := range 8 {
				h[i+j] = byte(v >> (8 * j))
			}
		}
		return h
	}
	in := make([]hash.Hash, n)
	for i := range in {
		in[i] = random()
		b.Add(seed.Probes(&in[i]))
	}
	for i := range in {
		if !b.Has(seed.Probes(&in[i])) {
			t.Fatalf("chunk %d of %d added but not found", i, n)
		}
	}
	fp := 0
	const tries = 200_000
	for range tries {
		c := random()
		if b.Has(seed.Probes(&c)) {
			fp++
		}
	}
	if fp*500 > tries {
		t.Fatalf("%d false positives in %d (%.4f); want at most 1 in 500", fp, tries, float64(fp)/tries)
	}
	t.Logf("%d false positives in %d at capacity", fp, tries)
}
