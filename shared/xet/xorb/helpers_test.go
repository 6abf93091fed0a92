package xorb

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// words is a small vocabulary for text-like test data.
var words = []string{"the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was",
	"for", "on", "are", "as", "with", "his", "they", "I", "at", "be", "this", "have", "from",
	"or", "one", "had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your",
	"can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if",
	"will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her",
	"would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go",
	"see", "number", "no", "way", "could", "people", "my", "than", "first", "water", "been",
	"call", "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come",
	"made", "may", "part", "xorb", "chunk", "merkle", "shard", "tensor", "gradient", "weights"}

// textLike returns n bytes of deterministic text: words from a small vocabulary separated by
// spaces, with punctuation and line breaks, drawn with a seeded PRNG.
func textLike(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9E3779B97F4A7C15))
	out := make([]byte, 0, n+16)
	for len(out) < n {
		out = append(out, words[r.IntN(len(words))]...)
		switch r.IntN(16) {
		case 0:
			out = append(out, ".\n"...)
		case 1:
			out = append(out, ", "...)
		default:
			out = append(out, ' ')
		}
	}
	return out[:n]
}

// randomBytes returns n incompressible bytes.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(out[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		out[i] = byte(r.Uint32())
	}
	return out
}

// floatLike returns n bytes of little-endian float32 values near 0 (like model weights), the
// data BG4 is made for.
func floatLike(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	out := make([]byte, n)
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(out[i:], math.Float32bits(float32(r.NormFloat64()*0.02)))
	}
	return out
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buildBody builds an upload body from chunks with a fixed scheme and returns it with its layout.
func buildBody(t testing.TB, s Scheme, chunks ...[]byte) ([]byte, *Layout) {
	t.Helper()
	b := NewBuilder(s)
	for i, c := range chunks {
		if !b.Add(c, hash.Chunk(c)) {
			t.Fatalf("Add chunk %d refused", i)
		}
	}
	return b.Finish()
}

// appendFooterV0 appends a legacy v0 footer (and its info_length) for l, as old writers did.
func appendFooterV0(dst []byte, l *Layout) []byte {
	le := binary.LittleEndian
	start := len(dst)
	dst = append(dst, "XETBLOB"...)
	dst = append(dst, 0)
	dst = append(dst, l.Hash[:]...)
	dst = le.AppendUint32(dst, uint32(l.NumChunks()))
	for _, e := range l.StoredEnds {
		dst = le.AppendUint32(dst, e)
	}
	for _, h := range l.ChunkHashes {
		dst = append(dst, h[:]...)
	}
	dst = append(dst, make([]byte, 16)...)
	return le.AppendUint32(dst, uint32(len(dst)-start))
}
