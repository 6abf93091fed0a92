package blake3x

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/blake3"
)

// reference is zeebo/blake3's keyed hash, the implementation this package must agree with.
func reference(key *[32]byte, msg []byte) [32]byte {
	h, err := blake3.NewKeyed(key[:])
	if err != nil {
		panic(err)
	}
	_, _ = h.Write(msg)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// withKernel runs f with the kernel on and, separately, with the portable compress16, so both
// are checked against the reference on a machine that has the kernel.
func withKernel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := enabled
	t.Cleanup(func() { enabled = saved })
	if haveKernel {
		enabled = true
		t.Run("kernel", f)
	} else {
		t.Log("no AVX-512 kernel on this machine/build: checking the portable path only")
	}
	enabled = false
	t.Run("portable", f)
	enabled = saved
}

func testInput(n int) []byte {
	// The official BLAKE3 test vectors' input: byte i is i mod 251.
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

var testKey = func() (k [32]byte) { copy(k[:], "whats the Elvish word for friend"); return }()

// boundaryLengths are the lengths where the chunk batching, the partial last chunk, the partial
// last batch, the choice of the 8- or 16-lane kernel (a last batch of 8 or 9 chunks: 24, 25,
// 40, 41; a tree level of 8 or 9 pairs: 16-19, 144-147 chunks) and the tree shape change.
func boundaryLengths() []int {
	var ls []int
	for _, c := range []int{1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 18, 19, 23, 24, 25, 31, 32, 33, 40, 41, 47, 48, 63, 64, 65,
		127, 128, 129, 144, 145, 146, 147, 255, 256, 257, 300} {
		for _, d := range []int{-65, -64, -63, -1, 0, 1, 63, 64, 65} {
			if n := c*ChunkLen + d; n > ChunkLen {
				ls = append(ls, n)
			}
		}
	}
	return ls
}

func TestSumMatchesReference(t *testing.T) {
	big := make([]byte, 301*ChunkLen)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	keys := [][32]byte{testKey, {}, {0xff, 1, 2, 3}}
	withKernel(t, func(t *testing.T) {
		for _, key := range keys {
			h := New(&key)
			lengths := boundaryLengths()
			for range 40 {
				lengths = append(lengths, ChunkLen+1+rng.IntN(len(big)-ChunkLen-1))
			}
			for _, n := range lengths {
				for _, msg := range [][]byte{big[:n], big[len(big)-n:], testInput(n)} {
					if got, want := h.Sum(msg), reference(&key, msg); got != want {
						t.Fatalf("key %x len %d: got %x want %x", key[:4], n, got, want)
					}
				}
			}
		}
	})
}

// TestOfficialVectorInputs hashes the inputs of the official BLAKE3 test vectors (test_vectors.json
// of the BLAKE3 repository: key "whats the Elvish word for friend", byte i of the input = i mod 251,
// these lengths) that are longer than one chunk. The expected keyed_hash values come from
// zeebo/blake3, whose own test suite checks them against that file.
func TestOfficialVectorInputs(t *testing.T) {
	lengths := []int{1025, 2048, 2049, 3072, 3073, 4096, 4097, 5120, 5121, 6144, 6145, 7168, 7169, 8192, 8193, 16384, 31744, 102400}
	withKernel(t, func(t *testing.T) {
		h := New(&testKey)
		for _, n := range lengths {
			msg := testInput(n)
			if got, want := h.Sum(msg), reference(&testKey, msg); got != want {
				t.Errorf("len %d: got %x want %x", n, got, want)
			}
		}
	})
}

// TestScratchReuse hashes a long message, then shorter ones with the same Hasher: stale chaining
// values left in the reused scratch must not leak into the next hash.
func TestScratchReuse(t *testing.T) {
	withKernel(t, func(t *testing.T) {
		h := New(&testKey)
		for _, n := range []int{300 * ChunkLen, 17 * ChunkLen, 2*ChunkLen + 1, 300*ChunkLen + 5, 64 * ChunkLen} {
			msg := testInput(n)
			if got, want := h.Sum(msg), reference(&testKey, msg); got != want {
				t.Fatalf("len %d: got %x want %x", n, got, want)
			}
		}
	})
}

// TestSumSingleChunkPanics: Sum is for messages of two chunks or more; package hash sends
// shorter ones to zeebo. Hashing one as a tree would give a wrong (non-root chunk) answer.
func TestSumSingleChunkPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Sum of a 1024-byte message did not panic")
		}
	}()
	New(&testKey).Sum(make([]byte, ChunkLen))
}

// FuzzSum compares Sum with zeebo/blake3 on arbitrary messages and keys.
func FuzzSum(f *testing.F) {
	f.Add(testInput(ChunkLen+1), testKey[:])
	f.Add(testInput(16*ChunkLen), []byte{})
	f.Add(testInput(65*ChunkLen-1), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, msg, k []byte) {
		if len(msg) <= ChunkLen {
			msg = append(bytes.Repeat([]byte{0x5a}, ChunkLen+1-len(msg)), msg...)
		}
		var key [32]byte
		copy(key[:], k)
		if got, want := New(&key).Sum(msg), reference(&key, msg); got != want {
			t.Fatalf("len %d key %x: got %x want %x (kernel %v)", len(msg), key, got, want, enabled)
		}
	})
}

// BenchmarkSum compares zeebo/blake3 and this package on message sizes of Xet chunks, side by
// side in one run: go test -run XXX -bench Sum -count 6 ./shared/xet/hash/blake3x
func BenchmarkSum(b *testing.B) {
	for _, size := range []int{2<<10 + 1, 8 << 10, 12 << 10, 64 << 10, 64<<10 + 1000, 128 << 10} {
		msg := testInput(size)
		b.Run(fmt.Sprintf("zeebo/%d", size), func(b *testing.B) {
			h, _ := blake3.NewKeyed(testKey[:])
			var out [32]byte
			b.SetBytes(int64(size))
			for b.Loop() {
				h.Reset()
				_, _ = h.Write(msg)
				h.Sum(out[:0])
			}
		})
		b.Run(fmt.Sprintf("blake3x/%d", size), func(b *testing.B) {
			if !enabled {
				b.Skip("no AVX-512 kernel")
			}
			h := New(&testKey)
			b.SetBytes(int64(size))
			for b.Loop() {
				h.Sum(msg)
			}
		})
	}
}
