package xorb

import (
	"fmt"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// benchXorb builds the reference workload: a 64 MiB xorb of 1,024 text-like 64 KiB chunks,
// LZ4-compressed.
func benchXorb(b *testing.B) ([]byte, *Layout) {
	b.Helper()
	bl := NewBuilder(LZ4)
	for i := range 1024 {
		c := textLike(64<<10, uint64(i))
		if !bl.Add(c, hash.Chunk(c)) {
			b.Fatal("builder refused chunk")
		}
	}
	return bl.Finish()
}

func BenchmarkValidate(b *testing.B) {
	body, l := benchXorb(b)
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(l.RawLen()))
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if _, _, err := Validate(body, ValidateOptions{Expect: &l.Hash, Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time per op summed over all threads: the "per core" cost, independent of how
			// busy the shared machine is.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

func BenchmarkDecodeChunk(b *testing.B) {
	raw := textLike(64<<10, 1)
	for _, s := range []Scheme{LZ4, BG4} {
		b.Run(s.String(), func(b *testing.B) {
			enc, _ := AppendCompressed(nil, raw, s)
			h, _ := ParseChunkHeader(enc)
			var d Decoder
			out := make([]byte, 0, len(raw))
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := d.DecodeChunk(out[:0], h, enc[HeaderSize:]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAppendCompressed(b *testing.B) {
	raw := textLike(64<<10, 1)
	for _, s := range []Scheme{LZ4, BG4} {
		b.Run(s.String(), func(b *testing.B) {
			var e Encoder
			out := make([]byte, 0, 2*len(raw))
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				e.AppendCompressed(out[:0], raw, s)
			}
		})
	}
}

func BenchmarkChooseScheme(b *testing.B) {
	raw := floatLike(64<<10, 1)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		ChooseScheme(raw)
	}
}

func BenchmarkUnmarshalLayout(b *testing.B) {
	_, l := benchXorb(b)
	enc, _ := l.MarshalBinary()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := UnmarshalLayout(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyRange(b *testing.B) {
	body, l := benchXorb(b)
	s, e := l.ByteRange(100, 116) // 16 chunks, 1 MiB raw
	b.SetBytes(int64(l.RawRange(100, 116)))
	for b.Loop() {
		if err := VerifyRange(body[s:e], l, 100, 116); err != nil {
			b.Fatal(err)
		}
	}
}
