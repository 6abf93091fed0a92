package hash

import (
	"math/rand/v2"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/xetcdn/xetcdn/shared/xet/hash/blake3x"
)

func zeeboKeyed(key Hash, msg []byte) Hash {
	h, _ := blake3.NewKeyed(key[:])
	_, _ = h.Write(msg)
	var out Hash
	h.Sum(out[:0])
	return out
}

// TestLongMessagesMatchZeebo checks every entry point of this package that may take the
// blake3x (AVX-512) path against zeebo/blake3, on lengths on both sides of blake3x.MinLen and of
// Xet chunk sizes, with short and long messages interleaved through one pooled hasher.
func TestLongMessagesMatchZeebo(t *testing.T) {
	t.Logf("blake3x kernel enabled: %v", blake3x.Enabled())
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	lengths := []int{0, 1, 63, 64, 65, 1023, 1024, 1025, 2 << 10, 2<<10 + 1, 7<<10 + 5, 8 << 10, 8<<10 + 1,
		9<<10 - 1, 12 << 10, 16<<10 - 1, 16 << 10, 16<<10 + 1,
		32 << 10, 64<<10 - 1, 64 << 10, 64<<10 + 1, 128 << 10, 128<<10 + 1, 300 << 10}
	for range 20 {
		lengths = append(lengths, rng.IntN(len(data)+1))
	}
	key := Hash{9, 8, 7}
	kh := NewKeyedHasher(key)
	for _, n := range lengths {
		msg := data[len(data)-n:]
		if got, want := Chunk(msg), zeeboKeyed(DataKey, msg); got != want {
			t.Fatalf("Chunk len %d: %s, zeebo %s", n, got, want)
		}
		if got, want := kh.Sum(msg), zeeboKeyed(key, msg); got != want {
			t.Fatalf("KeyedHasher.Sum len %d: %s, zeebo %s", n, got, want)
		}
		if got, want := Keyed(key, msg), zeeboKeyed(key, msg); got != want {
			t.Fatalf("Keyed len %d: %s, zeebo %s", n, got, want)
		}
	}
}

// BenchmarkChunkMix hashes Xet-sized chunks (lengths drawn from 8-128 KiB, mean ~64 KiB) through
// Chunk, the edge's verification path; MB/s converts to CPU-seconds per GiB verified. Compare
// with XETCDN_BLAKE3=generic (zeebo/blake3 only) in alternating runs.
func BenchmarkChunkMix(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 128<<10)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	lengths := make([]int, 1024)
	total := 0
	for i := range lengths {
		lengths[i] = 8<<10 + rng.IntN(120<<10+1)
		total += lengths[i]
	}
	b.SetBytes(int64(total / len(lengths)))
	i := 0
	for b.Loop() {
		Chunk(data[:lengths[i%len(lengths)]])
		i++
	}
}

// TestSumHashesMatchesConcatenation: SumHashes (Verification) hashes the raw hashes as one
// message, so it must equal the keyed hash of their concatenation, on counts on both sides of
// one chunk, of the AVX2 and the blake3x lengths, and of the largest term ranges.
func TestSumHashesMatchesConcatenation(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	hs := make([]Hash, 1100)
	for i := range hs {
		for j := range hs[i] {
			hs[i][j] = byte(rng.Uint32())
		}
	}
	kh := NewKeyedHasher(VerificationKey)
	for _, n := range []int{0, 1, 2, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511, 512, 513, 1024, 1100} {
		var cat []byte
		for _, h := range hs[:n] {
			cat = append(cat, h[:]...)
		}
		want := zeeboKeyed(VerificationKey, cat)
		if got := kh.SumHashes(hs[:n]); got != want {
			t.Fatalf("SumHashes of %d hashes: %s, want %s", n, got, want)
		}
		if got := Verification(hs[len(hs)-n:]); got != zeeboKeyed(VerificationKey, catOf(hs[len(hs)-n:])) {
			t.Fatalf("Verification of %d hashes: %s", n, got)
		}
	}
}

func catOf(hs []Hash) []byte {
	var out []byte
	for _, h := range hs {
		out = append(out, h[:]...)
	}
	return out
}
