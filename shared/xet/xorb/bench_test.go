package xorb

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
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
			done := startCPU(b, time.Millisecond, "cpu-ms/op")
			for b.Loop() {
				if _, _, err := Validate(body, ValidateOptions{Expect: &l.Hash, Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
			done()
		})
	}
}

// BenchmarkValidateNone validates what hf_xet uploads for incompressible files (the small-file
// workload of perf/smallfiles.sh): a 32 MiB xorb of 512 random 64 KiB chunks stored uncompressed.
func BenchmarkValidateNone(b *testing.B) {
	bl := NewBuilder(None)
	for i := range 512 {
		c := randomBytes(64<<10, uint64(i))
		if !bl.Add(c, hash.Chunk(c)) {
			b.Fatal("builder refused chunk")
		}
	}
	body, l := bl.Finish()
	b.SetBytes(int64(l.RawLen()))
	b.ReportAllocs()
	done := startCPU(b, time.Millisecond, "cpu-ms/op")
	for b.Loop() {
		if _, _, err := Validate(body, ValidateOptions{Expect: &l.Hash}); err != nil {
			b.Fatal(err)
		}
	}
	done()
}

// codecInputs are 64 KiB chunks each scheme is meant for: text for LZ4, weights quantized to
// 1/1024 (so that BG4 finds the redundancy in the low mantissa bytes) for BG4.
func codecInputs() map[Scheme][]byte {
	w := floatLike(64<<10, 1)
	for i := 0; i+4 <= len(w); i += 4 {
		f := math.Float32frombits(binary.LittleEndian.Uint32(w[i:]))
		binary.LittleEndian.PutUint32(w[i:], math.Float32bits(float32(math.Round(float64(f)*1024)/1024)))
	}
	return map[Scheme][]byte{LZ4: textLike(64<<10, 1), BG4: w}
}

func BenchmarkDecodeChunk(b *testing.B) {
	for s, raw := range codecInputs() {
		b.Run(s.String(), func(b *testing.B) {
			enc, used := AppendCompressed(nil, raw, s)
			if used != s {
				b.Fatalf("input compressed with %s", used)
			}
			h, _ := ParseChunkHeader(enc)
			var d Decoder
			out := make([]byte, 0, len(raw))
			b.SetBytes(int64(len(raw)))
			done := startCPU(b, time.Microsecond, "cpu-us/op")
			for b.Loop() {
				if _, err := d.DecodeChunk(out[:0], h, enc[HeaderSize:]); err != nil {
					b.Fatal(err)
				}
			}
			done()
		})
	}
}

func BenchmarkAppendCompressed(b *testing.B) {
	for s, raw := range codecInputs() {
		b.Run(s.String(), func(b *testing.B) {
			var e Encoder
			out := make([]byte, 0, 2*len(raw))
			b.SetBytes(int64(len(raw)))
			done := startCPU(b, time.Microsecond, "cpu-us/op")
			for b.Loop() {
				e.AppendCompressed(out[:0], raw, s)
			}
			done()
		})
	}
}

func BenchmarkChooseScheme(b *testing.B) {
	raw := floatLike(64<<10, 1)
	b.SetBytes(int64(len(raw)))
	done := startCPU(b, time.Microsecond, "cpu-us/op")
	for b.Loop() {
		ChooseScheme(raw)
	}
	done()
}

func BenchmarkUnmarshalLayout(b *testing.B) {
	_, l := benchXorb(b)
	enc, _ := l.MarshalBinary()
	b.SetBytes(int64(len(enc)))
	done := startCPU(b, time.Microsecond, "cpu-us/op")
	for b.Loop() {
		if _, err := UnmarshalLayout(enc); err != nil {
			b.Fatal(err)
		}
	}
	done()
}

func BenchmarkVerifyRange(b *testing.B) {
	body, l := benchXorb(b)
	s, e := l.ByteRange(100, 116) // 16 chunks, 1 MiB raw
	b.SetBytes(int64(l.RawRange(100, 116)))
	done := startCPU(b, time.Microsecond, "cpu-us/op")
	for b.Loop() {
		if err := VerifyRange(body[s:e], l, 100, 116); err != nil {
			b.Fatal(err)
		}
	}
	done()
}

// startCPU starts measuring the CPU time of the whole process (all threads) and returns a
// function that reports it per iteration in the given unit. On a shared machine wall-clock ns/op
// depends on the neighbours' load; CPU time per op is the "per core" cost.
func startCPU(b *testing.B, unit time.Duration, name string) func() {
	t0 := testenv.CPUTime()
	return func() {
		b.ReportMetric(float64(testenv.CPUTime()-t0)/float64(unit)/float64(b.N), name)
	}
}
