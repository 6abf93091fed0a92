package indextest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// BenchRegister measures concurrent shard registration: b.N shards of 4 files (each of 3
// terms), 2 xorbs and 4 dedup chunks, registered by workers goroutines. It reports shards/s
// and the p50/p99 latency of one RegisterShard. SetBytes is the encoded size of the records of
// one shard, so MB/s is record bytes committed per second.
func BenchRegister(b *testing.B, ix index.Index, workers int) {
	g := NewGen(uint64(time.Now().UnixNano())) // fresh shards each run: the index may be reused
	regs := make([]*index.Registration, b.N)
	var recBytes int64
	for i := range regs {
		r := g.Registration(fmt.Sprintf("models/bench/r%d", i%50), 4, 2, 4)
		for j := range r.Files {
			r.Files[j] = g.Record(3)
		}
		regs[i] = r
	}
	for _, f := range regs[0].Files {
		enc, _ := f.MarshalBinary()
		recBytes += int64(len(enc))
	}
	b.SetBytes(recBytes)
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	b.ResetTimer()
	start, cpu0 := time.Now(), testenv.CPUTime()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(regs) {
					return
				}
				t0 := time.Now()
				if _, err := ix.RegisterShard(b.Context(), regs[i]); err != nil {
					errs <- err
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), testenv.CPUTime()-cpu0
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("RegisterShard: %v", err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "shards/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	reportPercentiles(b, lat)
}

// BenchFileLarge measures File of a record of LargeTerms terms, one call at a time, and
// reports p50/p99, in sub-benchmarks "decoded" (File) and "raw"
// (FileBytes). SetBytes is the encoded record size.
func BenchFileLarge(b *testing.B, ix index.Index) {
	g := NewGen(uint64(time.Now().UnixNano()))
	r := g.Registration("models/bench/large", 1, 1, 1)
	r.Files[0] = g.Record(LargeTerms)
	if _, err := ix.RegisterShard(b.Context(), r); err != nil {
		b.Fatal(err)
	}
	enc, _ := r.Files[0].MarshalBinary()
	h := r.Files[0].Hash
	b.Run("decoded", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		timed(b, func() error {
			f, err := ix.File(b.Context(), h, r.Scope)
			if err == nil && len(f.Terms) != LargeTerms {
				err = fmt.Errorf("%d terms", len(f.Terms))
			}
			return err
		})
	})
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		timed(b, func() error {
			_, err := ix.FileBytes(b.Context(), h, r.Scope)
			return err
		})
	})
}

// BenchLayouts measures Layouts of n full (xorb.MaxChunks-chunk) xorbs, one call at a time
// (n = 2 is what a ranged reconstruction needs: the first and last term's xorbs), and reports
// p50/p99, decoded (Layouts, which verifies every layout's merkle hash) and
// raw (LayoutBytes). SetBytes is the encoded size of the n layouts.
func BenchLayouts(b *testing.B, ix index.Index, n int) {
	g := NewGen(uint64(time.Now().UnixNano()))
	hs := make([]hash.Hash, n)
	var size int64
	for i := range hs {
		l := g.Layout(xorb.MaxChunks)
		if _, err := ix.PutXorb(b.Context(), l, uint64(l.ChunkAreaLen())); err != nil {
			b.Fatal(err)
		}
		enc, _ := l.MarshalBinary()
		size += int64(len(enc))
		hs[i] = l.Hash
	}
	b.Run("decoded", func(b *testing.B) {
		b.SetBytes(size)
		timed(b, func() error {
			m, err := ix.Layouts(b.Context(), hs)
			if err == nil && len(m) != n {
				err = fmt.Errorf("%d layouts", len(m))
			}
			return err
		})
	})
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(size)
		timed(b, func() error {
			_, err := ix.LayoutBytes(b.Context(), hs)
			return err
		})
	})
}

// timed runs fn b.N times, one at a time, and reports the p50/p99 latency.
func timed(b *testing.B, fn func() error) {
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	cpu0 := testenv.CPUTime()
	for i := range b.N {
		t0 := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	cpu := testenv.CPUTime() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	at := func(p float64) float64 {
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Nanoseconds()) / 1e6
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
