package datacache

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// benchXorb is a ~16 MiB xorb of 16-48 KiB chunks (half compressible), cached at the default
// segment size.
func benchXorb(b *testing.B) object {
	return buildXorb(b, 30, 512, 16<<10, 48<<10)
}

// BenchmarkReadBytesWarm reads ranges of a fully cached xorb: the hit path (index lookup,
// open, pread, copy out).
func BenchmarkReadBytesWarm(b *testing.B) {
	o := benchXorb(b)
	c, _ := testCache(b, b.TempDir(), newFakeFetcher(o), 1<<30, 0)
	ctx := context.Background()
	if _, err := c.ReadBytes(ctx, o.l, 0, int64(o.l.ChunkAreaLen())); err != nil {
		b.Fatal(err)
	}
	n := o.l.NumChunks()
	for _, chunks := range []int{1, 32, 256} {
		start, end := chunkRange(o.l, n/4, n/4+chunks)
		b.Run(fmt.Sprintf("chunks=%d", chunks), func(b *testing.B) {
			b.SetBytes(end - start)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.ReadBytes(ctx, o.l, start, end); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("chunks=%d/parallel", chunks), func(b *testing.B) {
			b.SetBytes(end - start)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.ReadBytes(ctx, o.l, start, end); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkReadRangeWarm streams ranges of a fully cached xorb to io.Discard (no buffer of the
// range's size).
func BenchmarkReadRangeWarm(b *testing.B) {
	o := benchXorb(b)
	c, _ := testCache(b, b.TempDir(), newFakeFetcher(o), 1<<30, 0)
	ctx := context.Background()
	if _, err := c.ReadBytes(ctx, o.l, 0, int64(o.l.ChunkAreaLen())); err != nil {
		b.Fatal(err)
	}
	n := o.l.NumChunks()
	for _, chunks := range []int{32, 256} {
		start, end := chunkRange(o.l, n/4, n/4+chunks)
		b.Run(fmt.Sprintf("chunks=%d", chunks), func(b *testing.B) {
			b.SetBytes(end - start)
			b.ReportAllocs()
			for b.Loop() {
				rr, err := c.ReadRange(ctx, o.l, start, end)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := rr.WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
				rr.Close()
			}
		})
	}
}

// BenchmarkFill measures a cold segment fill: fetch from an in-memory origin, verify every
// chunk, write, fsync, rename. Each iteration uses a fresh cache directory.
func BenchmarkFill(b *testing.B) {
	o := benchXorb(b)
	seg := segmentSpan(o.l, 0, DefaultSegmentBytes)
	b.SetBytes(seg.len())
	for b.Loop() {
		b.StopTimer()
		c, _ := testCache(b, b.TempDir(), newFakeFetcher(o), 1<<30, 0)
		b.StartTimer()
		if _, err := c.ReadBytes(context.Background(), o.l, seg.start, seg.end); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkColdAmplification reports origin bytes ÷ served bytes for single random ranged
// reads against an empty cache (the worst case: nothing shared yet), by segment size, for range
// lengths typical of small files (1-4 chunks) and of file terms (16-128 chunks).
func BenchmarkColdAmplification(b *testing.B) {
	o := benchXorb(b)
	for _, seg := range []int64{1 << 20, 2 << 20, 4 << 20} {
		for _, r := range []struct{ lo, hi int }{{1, 4}, {16, 128}} {
			b.Run(fmt.Sprintf("segment=%dMiB/chunks=%d-%d", seg>>20, r.lo, r.hi), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				var served, origin int64
				for b.Loop() {
					b.StopTimer()
					f := newFakeFetcher(o)
					c, _ := testCache(b, b.TempDir(), f, 1<<30, seg)
					n := o.l.NumChunks()
					k := r.lo + rng.IntN(r.hi-r.lo+1)
					a := rng.IntN(n - k)
					start, end := chunkRange(o.l, a, a+k)
					b.StartTimer()
					if _, err := c.ReadBytes(context.Background(), o.l, start, end); err != nil {
						b.Fatal(err)
					}
					_, _, got := f.counts()
					served += end - start
					origin += got
				}
				b.ReportMetric(float64(origin)/float64(served), "origin/served")
			})
		}
	}
}
