package chunk

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// benchSize is the input of every benchmark: random (SplitMix64) data, about 230 chunks.
const benchSize = 16 << 20

// BenchmarkChunk measures boundary finding alone (the gear loop) over an in-memory slice.
func BenchmarkChunk(b *testing.B) {
	data := splitMix64(benchSize, 1)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	defer cpuMeter(b, int64(len(data)))()
	for b.Loop() {
		for off := 0; off < len(data); {
			n, _ := Cut(data[off:])
			off += n
		}
	}
}

// BenchmarkHash measures chunk hashing alone (keyed blake3 over chunks of the real sizes).
func BenchmarkHash(b *testing.B) {
	data := splitMix64(benchSize, 1)
	ends := Boundaries(data)
	c := hash.NewChunker()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	defer cpuMeter(b, int64(len(data)))()
	for b.Loop() {
		prev := 0
		for _, e := range ends {
			_ = c.Sum(data[prev:e])
			prev = e
		}
	}
}

// BenchmarkChunkAndHash measures chunking plus chunk hashing on one goroutine, the work every
// upload does per byte.
func BenchmarkChunkAndHash(b *testing.B) {
	data := splitMix64(benchSize, 1)
	c := hash.NewChunker()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	defer cpuMeter(b, int64(len(data)))()
	for b.Loop() {
		for off := 0; off < len(data); {
			n, _ := Cut(data[off:])
			_ = c.Sum(data[off : off+n])
			off += n
		}
	}
}

// BenchmarkReader measures streaming chunking (Reader over an in-memory reader, no hashing).
func BenchmarkReader(b *testing.B) {
	data := splitMix64(benchSize, 1)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	defer cpuMeter(b, int64(len(data)))()
	for b.Loop() {
		r := NewReader(bytes.NewReader(data))
		for {
			if _, err := r.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
				break
			}
		}
	}
}

// BenchmarkHashAll measures the whole of `xet hash` minus file I/O: streaming chunking, chunk
// hashes, SHA-256 (on a second goroutine when GOMAXPROCS > 1) and the file hash.
func BenchmarkHashAll(b *testing.B) {
	data := splitMix64(benchSize, 1)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	defer cpuMeter(b, int64(len(data)))()
	for b.Loop() {
		if _, _, err := HashAll(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHasher measures the streaming Hasher API: chunk hashes on the calling goroutine,
// SHA-256 beside it.
func BenchmarkHasher(b *testing.B) {
	data := splitMix64(benchSize, 1)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	defer cpuMeter(b, int64(len(data)))()
	for b.Loop() {
		h := NewHasher(bytes.NewReader(data))
		for {
			if _, _, err := h.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
				break
			}
		}
	}
}
