package datacache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/perf/allocbudget"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// wait bounds every wait of these tests.
const wait = 10 * time.Second

// TestFirstBytesBeforeSegmentArrives: a miss hands out the first verified chunks while the rest
// of the segment is still on its way (stream-through), and never the incomplete chunk.
func TestFirstBytesBeforeSegmentArrives(t *testing.T) {
	o := buildXorb(t, 21, 40, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	_, three := chunkRange(o.l, 0, 3)
	held := &heldReader{release: make(chan struct{}), held: make(chan struct{})}
	f.answer = func(k fetchKey, _ int, b []byte) io.Reader {
		held.head, held.tail = b[:three+5], b[three+5:] // three chunks and part of the fourth
		return held
	}
	c, _ := testCache(t, t.TempDir(), f, 1<<30, 1<<30) // one segment: the whole xorb
	start, end := chunkRange(o.l, 0, o.l.NumChunks())

	type result struct {
		rr  *Range
		err error
	}
	got := make(chan result, 1)
	go func() {
		rr, err := c.ReadRange(context.Background(), o.l, start, end)
		got <- result{rr, err}
	}()
	var res result
	select {
	case res = <-got:
	case <-time.After(wait):
		close(held.release)
		t.Fatal("ReadRange waited for the whole segment before returning")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.rr.Close()
	if !res.rr.Ready() {
		t.Fatal("Ready is false with verified bytes at the Range's start")
	}
	first := make([]byte, three)
	if _, err := io.ReadFull(res.rr, first); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, o.body[:three]) {
		t.Fatal("wrong first bytes")
	}
	if res.rr.Ready() {
		t.Fatal("Ready is true while the fill has nothing verified past the bytes read")
	}
	// The first bytes were read while the answer's tail is held back (release is still open);
	// the fill, having published them, then goes on to block in its next read. That read may
	// come a moment after the publish, so wait for it (bounded) rather than expect it already.
	select {
	case <-held.held:
	case <-time.After(wait):
		t.Fatal("the fill did not go on reading the answer after the first chunks")
	}
	close(held.release)
	rest, err := io.ReadAll(res.rr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rest, o.body[three:end]) {
		t.Fatal("wrong rest")
	}
	if !res.rr.Ready() {
		t.Fatal("Ready is false at the Range's end")
	}
}

// TestCollapsedWhileStreaming: clients that miss a segment while its fill streams join it;
// the origin sends the bytes once.
func TestCollapsedWhileStreaming(t *testing.T) {
	o := buildXorb(t, 22, 200, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	held := &heldReader{release: make(chan struct{}), held: make(chan struct{})}
	f.answer = func(k fetchKey, _ int, b []byte) io.Reader {
		held.head, held.tail = b[:len(b)/2], b[len(b)/2:]
		return held
	}
	c, reg := testCache(t, t.TempDir(), f, 1<<30, 1<<30)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())

	const clients = 16
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	read := func() {
		defer wg.Done()
		got, err := c.ReadBytes(context.Background(), o.l, start, end)
		if err == nil && !bytes.Equal(got, o.body[start:end]) {
			err = errors.New("wrong bytes")
		}
		errs <- err
	}
	wg.Add(1)
	go read()
	select {
	case <-held.held: // the fill is half way
	case <-time.After(wait):
		t.Fatal("the fill did not start")
	}
	wg.Add(clients - 1)
	for i := 1; i < clients; i++ {
		go read()
	}
	close(held.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if total, _, origin := f.counts(); total != 1 || origin != end-start {
		t.Fatalf("%d clients: %d origin transfers of %d bytes; want 1 of %d", clients, total, origin, end-start)
	}
	c.fills.Wait()
	if v := metric(t, reg, "xet_edge_datacache_fill_bytes_total"); v != float64(end-start) {
		t.Fatalf("fill_bytes_total %v, want %d", v, end-start)
	}
	if v := metric(t, reg, "xet_edge_datacache_served_bytes_total"); v != float64(clients*(end-start)) {
		t.Fatalf("served_bytes_total %v, want %d", v, clients*(end-start))
	}
}

// faults of one origin transfer of the whole chunk area b (cut at mid, a chunk boundary's
// neighbourhood) and the retry reason each must be counted under.
func faults(mid int64) []struct {
	name, reason string
	answer       func(b []byte) io.Reader
} {
	return []struct {
		name, reason string
		answer       func(b []byte) io.Reader
	}{
		{"connection dropped mid-fill", "error", func(b []byte) io.Reader {
			return &cutReader{b: b[:mid], err: errors.New("connection reset by peer")}
		}},
		{"short answer", "short", func(b []byte) io.Reader { return &cutReader{b: b[:mid], err: io.EOF} }},
		{"stall past the origin timeout", "timeout", func(b []byte) io.Reader {
			return &cutReader{b: b[:mid], err: fmt.Errorf("origin: timeout: xorb: %w", context.DeadlineExceeded)}
		}},
		{"corrupt chunk", "corrupt", func(b []byte) io.Reader {
			b[mid] ^= 0x20
			return bytes.NewReader(b)
		}},
	}
}

// noTrace fails unless the cache directory holds no segment files and no temp files.
func noTrace(t *testing.T, dir string) {
	t.Helper()
	if names, _ := segmentFiles(t, dir); len(names) != 0 {
		t.Fatalf("failed fill left segment files: %v", names)
	}
	if tmp, _ := os.ReadDir(filepath.Join(dir, tmpDir)); len(tmp) != 0 {
		t.Fatalf("failed fill left %d temp files", len(tmp))
	}
}

// TestFillFaultRetried: a transfer that fails once is retried from the first unverified chunk;
// readers get the right bytes, the retry is counted by reason, and the segment is cached once.
func TestFillFaultRetried(t *testing.T) {
	o := buildXorb(t, 23, 60, 2<<10, 6<<10)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	mid := (end - start) / 2
	for _, tt := range faults(mid) {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeFetcher(o)
			f.answer = func(k fetchKey, before int, b []byte) io.Reader {
				if before == 0 && k.start == start {
					return tt.answer(b)
				}
				return bytes.NewReader(b)
			}
			dir := t.TempDir()
			c, reg := testCache(t, dir, f, 1<<30, 1<<30)
			mustRead(t, c, o, start, end)
			c.fills.Wait()
			if v := labelled(t, reg, "xet_edge_datacache_fill_retries_total", tt.reason); v != 1 {
				t.Fatalf("fill_retries_total{reason=%q} %v, want 1", tt.reason, v)
			}
			total, _, _ := f.counts()
			if total != 2 {
				t.Fatalf("%d origin transfers, want 2", total)
			}
			for k := range f.calls {
				if k.start != start && (k.start <= start || k.start > start+mid || k.end != end) {
					t.Fatalf("retry asked for [%d,%d), want the unverified rest of [%d,%d) after %d", k.start, k.end, start, end, mid)
				}
			}
			if names, n := segmentFiles(t, dir); len(names) != 1 || n != end-start {
				t.Fatalf("cache holds %v (%d bytes), want the one segment", names, n)
			}
			mustRead(t, c, o, start, end) // warm: no new transfer
			if total2, _, _ := f.counts(); total2 != total {
				t.Fatal("warm read fetched again")
			}
		})
	}
}

// TestFillFaultExhausted: a transfer that fails on every attempt fails its readers with an
// error — after handing out only verified bytes, never a corrupt one — leaves nothing in the
// cache, is counted, and the next read fills afresh.
func TestFillFaultExhausted(t *testing.T) {
	o := buildXorb(t, 24, 60, 2<<10, 6<<10)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	mid := (end - start) / 2
	for _, tt := range faults(mid) {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeFetcher(o)
			f.answer = func(k fetchKey, before int, b []byte) io.Reader {
				// Every attempt fails: the retry's bytes begin later, so cut it where the
				// first attempt's fault was, relative to the whole chunk area.
				whole := make([]byte, end-start)
				copy(whole[k.start-start:], b)
				r := tt.answer(whole)
				if _, err := io.CopyN(io.Discard, r, k.start-start); err != nil {
					return &cutReader{err: err}
				}
				return r
			}
			dir := t.TempDir()
			c, reg := testCache(t, dir, f, 1<<30, 1<<30)
			rr, err := c.ReadRange(context.Background(), o.l, start, end)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(rr)
				rr.Close()
			}
			if err == nil {
				t.Fatal("read succeeded although every transfer failed")
			}
			if tt.reason == "corrupt" && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err %v, want ErrCorrupt", err)
			}
			if int64(len(got)) > mid || !bytes.Equal(got, o.body[start:start+int64(len(got))]) {
				t.Fatalf("reader got %d bytes before the error, not all verified ones of the %d before the fault", len(got), mid)
			}
			c.fills.Wait()
			if v := labelled(t, reg, "xet_edge_datacache_fill_failures_total", tt.reason); v != 1 {
				t.Fatalf("fill_failures_total{reason=%q} %v, want 1", tt.reason, v)
			}
			if v := labelled(t, reg, "xet_edge_datacache_fill_retries_total", tt.reason); v != fillAttempts-1 {
				t.Fatalf("fill_retries_total{reason=%q} %v, want %d", tt.reason, v, fillAttempts-1)
			}
			noTrace(t, dir)
			f.set(func(f *fakeFetcher) { f.answer = nil })
			mustRead(t, c, o, start, end)
		})
	}
}

// TestBufferCeiling: the receive buffers of all fills stay under Options.BufferMemory, and
// are returned when the fills end.
func TestBufferCeiling(t *testing.T) {
	o := buildXorb(t, 25, 400, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	reg := prometheus.NewRegistry()
	ceiling := int64(2 * bufferBytes)
	c, err := Open(context.Background(), Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fetcher: f,
		SegmentBytes: testSegment, FillParallelism: 16, BufferMemory: ceiling, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var peak int64
	var mu sync.Mutex
	f.answer = func(k fetchKey, _ int, b []byte) io.Reader {
		mu.Lock()
		peak = max(peak, c.pool.inUse.Load())
		mu.Unlock()
		return bytes.NewReader(b)
	}
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustRead(t, c, o, start, end)
		}()
	}
	wg.Wait()
	c.fills.Wait()
	if peak > ceiling || peak == 0 {
		t.Fatalf("buffers in use peaked at %d, ceiling %d", peak, ceiling)
	}
	if v := metric(t, reg, "xet_edge_datacache_buffer_bytes"); v != 0 {
		t.Fatalf("buffer_bytes %v after the fills ended, want 0", v)
	}
}

// TestPrefetch: read-ahead fills the missing segments of a range once, in the background; a
// read afterwards is a hit; read-ahead beyond its bound is skipped, not queued.
func TestPrefetch(t *testing.T) {
	o := buildXorb(t, 26, 200, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	c, reg := testCache(t, t.TempDir(), f, 1<<30, testSegment)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	r, _ := requestSpan(o.l, start, end)
	nsegs := len(segments(o.l, r, testSegment))
	n, err := c.Prefetch(o.l, start, end)
	if err != nil || n != nsegs {
		t.Fatalf("Prefetch = %d, %v; want %d fills", n, err, nsegs)
	}
	c.fills.Wait()
	want := len(chainKeys(c, o.l, segments(o.l, r, testSegment)))
	if total, perKey, _ := f.counts(); total != want || perKey != 1 {
		t.Fatalf("%d origin transfers (max %d per range), want one per chain of segments (%d)", total, perKey, want)
	}
	mustRead(t, c, o, start, end)
	if total, _, _ := f.counts(); total != want {
		t.Fatal("the read after read-ahead fetched again")
	}
	if h, m := metric(t, reg, "xet_edge_datacache_hits_total"), metric(t, reg, "xet_edge_datacache_misses_total"); h != float64(nsegs) || m != 0 {
		t.Fatalf("hits %v misses %v, want %d hits and no miss after read-ahead", h, m, nsegs)
	}
	if n, _ := c.Prefetch(o.l, start, end); n != 0 || labelled2(t, reg, "xet_edge_datacache_prefetch_total", "result", "cached") != float64(nsegs) {
		t.Fatalf("Prefetch of a cached range started %d fills", n)
	}

	// At its bound: with every read-ahead slot held by held fills, more is skipped.
	o2 := buildXorb(t, 27, 200, 2<<10, 6<<10)
	f2 := newFakeFetcher(o2)
	f2.gate = make(chan struct{})
	reg2 := prometheus.NewRegistry()
	c2, err := Open(context.Background(), Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fetcher: f2,
		SegmentBytes: testSegment, PrefetchSegments: 2, Registerer: reg2})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s2, e2 := chunkRange(o2.l, 0, o2.l.NumChunks())
	r2, _ := requestSpan(o2.l, s2, e2)
	n2 := len(segments(o2.l, r2, testSegment))
	if n, err := c2.Prefetch(o2.l, s2, e2); err != nil || n != 2 {
		t.Fatalf("Prefetch at a bound of 2 = %d, %v", n, err)
	}
	if v := labelled2(t, reg2, "xet_edge_datacache_prefetch_total", "result", "skipped"); v != float64(n2-2) {
		t.Fatalf("skipped %v, want %d", v, n2-2)
	}
	close(f2.gate)
}

// TestPrefetchSkipsWhenBuffersShort: while more than half of the receive buffers' ceiling is
// held by running fills, read-ahead starts nothing (it is left to the fills clients wait for).
func TestPrefetchSkipsWhenBuffersShort(t *testing.T) {
	o := buildXorb(t, 29, 200, 2<<10, 6<<10)
	o2 := buildXorb(t, 30, 200, 2<<10, 6<<10)
	f := newFakeFetcher(o, o2)
	f.gate = make(chan struct{})
	f.entered = make(chan fetchKey, 100)
	reg := prometheus.NewRegistry()
	c, err := Open(context.Background(), Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fetcher: f,
		SegmentBytes: testSegment, BufferMemory: 3 * bufferBytes, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer close(f.gate)
	c.chainMax = 1 // one segment per chain: every fill its own request and buffer
	// Two fills hold two of the three buffers (each takes its buffer before it fetches).
	s, e := chunkRange(o.l, 0, o.l.NumChunks())
	if n, err := c.Prefetch(o.l, s, e); err != nil || n < 2 {
		t.Fatalf("Prefetch = %d, %v; want at least 2 fills", n, err)
	}
	<-f.entered
	<-f.entered
	before := labelled2(t, reg, "xet_edge_datacache_prefetch_total", "result", "started")
	s2, e2 := chunkRange(o2.l, 0, o2.l.NumChunks())
	if n, err := c.Prefetch(o2.l, s2, e2); err != nil || n != 0 {
		t.Fatalf("Prefetch with buffers short = %d, %v; want 0", n, err)
	}
	if v := labelled2(t, reg, "xet_edge_datacache_prefetch_total", "result", "started"); v != before {
		t.Fatalf("prefetch started %v fills with buffers short", v-before)
	}
}

// TestCloseStopsFills: Close ends a fill that is waiting on the origin (within a bound, not
// after FillTimeout), and its reader gets an error.
func TestCloseStopsFills(t *testing.T) {
	o := buildXorb(t, 28, 40, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	f.gate = make(chan struct{}) // never opened: the fetch waits for its context
	f.entered = make(chan fetchKey, 10)
	c, err := Open(context.Background(), Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fetcher: f,
		FillTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	read := make(chan error, 1)
	go func() {
		_, err := c.ReadBytes(context.Background(), o.l, start, end)
		read <- err
	}()
	<-f.entered
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("Close did not stop a running fill")
	}
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("the reader of a fill stopped by Close got no error")
		}
	case <-time.After(wait):
		t.Fatal("the reader of a stopped fill still waits")
	}
}

// TestCachedAt: CachedAt answers for every chunk start from the segment holding it, without a
// layout: true once that segment is committed, false for a segment never read, false again
// after the segment is evicted.
func TestCachedAt(t *testing.T) {
	o := buildXorb(t, 28, 300, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	whole := span{a: 0, b: uint32(o.l.NumChunks()), end: int64(o.l.ChunkAreaLen())}
	segs := segments(o.l, whole, testSegment)
	if len(segs) < 4 {
		t.Fatalf("want at least 4 segments, have %d", len(segs))
	}
	// Room for two segments: reading a third evicts the first.
	c, _ := testCache(t, t.TempDir(), f, 2*testSegment+testSegment/2, testSegment)
	startsIn := func(s span) []int64 {
		var out []int64
		for i := s.a; i < s.b; i++ {
			out = append(out, chunkStart(o.l, int(i)))
		}
		return out
	}
	for _, s := range segs {
		for _, off := range startsIn(s) {
			if c.CachedAt(o.l.Hash, off) {
				t.Fatalf("chunk at %d reported cached before any read", off)
			}
		}
	}
	mustRead(t, c, o, segs[1].start, segs[1].end)
	c.fills.Wait() // committed just after its last bytes were read
	for _, off := range startsIn(segs[1]) {
		if !c.CachedAt(o.l.Hash, off) {
			t.Fatalf("chunk at %d of the cached segment [%d,%d) reported not cached", off, segs[1].start, segs[1].end)
		}
	}
	for _, off := range append(startsIn(segs[0]), startsIn(segs[2])...) {
		if c.CachedAt(o.l.Hash, off) {
			t.Fatalf("chunk at %d outside the cached segment reported cached", off)
		}
	}
	if c.CachedAt(hash.Chunk([]byte("another xorb")), segs[1].start) || c.CachedAt(o.l.Hash, -1) {
		t.Fatal("another xorb, or a negative offset, reported cached")
	}
	mustRead(t, c, o, segs[2].start, segs[2].end)
	c.fills.Wait()
	mustRead(t, c, o, segs[3].start, segs[3].end)
	c.fills.Wait()
	if c.CachedAt(o.l.Hash, segs[1].start) {
		t.Fatal("an evicted segment reported cached")
	}
	if !c.CachedAt(o.l.Hash, segs[3].start) {
		t.Fatal("the last segment read reported not cached")
	}
}

// TestColdRangeOneOriginRequest (issue 11, a far origin): a cold read of many consecutive
// segments asks the origin once for all of them (within the chain bound), not once per segment
// (each request costs a round trip); an answer cut part-way is resumed at the first unverified
// chunk to the chain's end, the segments after the cut go on reading the new answer, and every
// segment is verified, committed and read right.
func TestColdRangeOneOriginRequest(t *testing.T) {
	o := buildXorb(t, 31, 200, 2<<10, 6<<10)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	r, _ := requestSpan(o.l, start, end)
	segs := segments(o.l, r, testSegment)
	if len(segs) < 8 {
		t.Fatalf("%d segments; the test wants many", len(segs))
	}

	t.Run("clean", func(t *testing.T) {
		f := newFakeFetcher(o)
		c, reg := testCache(t, t.TempDir(), f, 1<<30, testSegment)
		mustRead(t, c, o, start, end)
		c.fills.Wait()
		if total, _, origin := f.counts(); total != 1 || origin != end-start {
			t.Fatalf("cold read of %d segments: %d origin requests for %d bytes, want 1 for %d", len(segs), total, origin, end-start)
		}
		if f.calls[fetchKey{o.l.Hash, start, end}] != 1 {
			t.Fatalf("the origin request was not [%d,%d): %v", start, end, f.calls)
		}
		if v := metric(t, reg, "xet_edge_datacache_fills_total"); v != float64(len(segs)) {
			t.Fatalf("fills_total %v, want one per segment (%d)", v, len(segs))
		}
		mustRead(t, c, o, start, end)
		if total, _, _ := f.counts(); total != 1 {
			t.Fatal("a warm read went to the origin")
		}
	})

	t.Run("cut in the third segment", func(t *testing.T) {
		f := newFakeFetcher(o)
		cut := segs[2].start + segs[2].len()/2
		f.answer = func(k fetchKey, before int, b []byte) io.Reader {
			if k.start == start && before == 0 && int64(len(b)) > cut-start {
				return &cutReader{b: b[:cut-start], err: io.EOF}
			}
			return bytes.NewReader(b)
		}
		c, reg := testCache(t, t.TempDir(), f, 1<<30, testSegment)
		mustRead(t, c, o, start, end)
		c.fills.Wait()
		total, perKey, _ := f.counts()
		if total != 2 || perKey != 1 {
			t.Fatalf("%d origin requests (max %d per range), want 2: the cut one and its resumption", total, perKey)
		}
		var resumed bool
		for k := range f.calls {
			resumed = resumed || (k.start > segs[2].start && k.start <= cut && k.end == end)
		}
		if !resumed {
			t.Fatalf("no request resumed the third segment's unverified rest to the chain's end: %v", f.calls)
		}
		if v := labelled(t, reg, "xet_edge_datacache_fill_retries_total", "short"); v != 1 {
			t.Fatalf("fill_retries_total{reason=short} %v, want 1", v)
		}
		if v := metric(t, reg, "xet_edge_datacache_fills_total"); v != float64(len(segs)) {
			t.Fatalf("fills_total %v, want %d", v, len(segs))
		}
		mustRead(t, c, o, start, end)
		if total2, _, _ := f.counts(); total2 != total {
			t.Fatal("a warm read went to the origin")
		}
	})
}

// chunkReader hands out b one chunk of l per Read, so that a verifier verifies chunk by chunk.
type chunkReader struct {
	b    []byte
	ends []uint32
	at   int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.ends) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.at:r.ends[0]])
	r.at += n
	if r.at == int(r.ends[0]) {
		r.ends = r.ends[1:]
	}
	return n, nil
}

// TestAllocBudgetVerify: verifying a fill chunk by chunk does not build a BLAKE3 hasher (~10 KB)
// and a decode buffer per read of the origin's answer (perf/BENCHMARKS.md, 2026-12-02 second
// pass on edge CPU per cold GiB): the per-read garbage made the heap and the collector work.
// One op verifies a 64-chunk xorb; what is left per chunk is the flight's progress channel,
// replaced at every publish. An allocation budget (perf/allocbudget), so `make alloc-budgets`
// checks it without the race detector, which makes sync.Pool drop items at random.
func TestAllocBudgetVerify(t *testing.T) {
	o := buildXorb(t, 11, 64, 4<<10, 12<<10) // compressible and random runs
	c, _ := testCache(t, t.TempDir(), newFakeFetcher(o), 64<<20, 1<<20)
	n := o.l.NumChunks()
	s := span{a: 0, b: uint32(n), start: 0, end: int64(o.l.ChunkAreaLen())}
	buf := make([]byte, 64<<10)
	run := func() {
		fl := &flight{c: c, l: o.l, s: s, progress: make(chan struct{})}
		v := fl.newVerifier(nil, buf)
		if err := v.copyFrom(context.Background(), &chunkReader{b: o.body, ends: o.l.StoredEnds}); err != nil || !v.done() {
			t.Fatalf("verify: %v (done %v)", err, v.done())
		}
	}
	run() // warm the pool
	allocbudget.Check(t, "edge/datacache-verify-64-chunks", 10, run)
}

// TestPrefetchIdle: read-ahead of an answer's rest starts nothing while a fill a client's read
// joined (or an answer's first ranges' Prefetch) is running, then fills all of its range once
// that ends; a context that ends first stops it with nothing started.
func TestPrefetchIdle(t *testing.T) {
	o := buildXorb(t, 31, 200, 2<<10, 6<<10)
	o2 := buildXorb(t, 32, 200, 2<<10, 6<<10)
	f := newFakeFetcher(o, o2)
	f.gate = make(chan struct{})
	f.entered = make(chan fetchKey, 1000)
	c, reg := testCache(t, t.TempDir(), f, 1<<30, testSegment)

	s, e := chunkRange(o.l, 0, 10)
	read := make(chan error, 1)
	go func() {
		rr, err := c.ReadRange(context.Background(), o.l, s, e)
		if err == nil {
			_, err = io.Copy(io.Discard, rr)
			rr.Close()
		}
		read <- err
	}()
	if k := <-f.entered; k.h != o.l.Hash {
		t.Fatalf("first fetch of %s, want the read's xorb", k.h)
	}

	s2, e2 := chunkRange(o2.l, 0, o2.l.NumChunks())
	r2, _ := requestSpan(o2.l, s2, e2)
	nsegs := len(segments(o2.l, r2, testSegment))
	type result struct {
		n   int
		err error
	}
	idle := make(chan result, 1)
	go func() {
		n, err := c.PrefetchIdle(context.Background(), o2.l, s2, e2)
		idle <- result{n, err}
	}()
	select {
	case k := <-f.entered:
		t.Fatalf("read-ahead fetched %s while a client's fill ran", k.h)
	case r := <-idle:
		t.Fatalf("PrefetchIdle returned %d, %v while a client's fill ran", r.n, r.err)
	case <-time.After(150 * time.Millisecond):
	}
	close(f.gate) // the read's fill ends; read-ahead goes on
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if r := <-idle; r.err != nil || r.n != nsegs {
		t.Fatalf("PrefetchIdle = %d, %v; want %d segments started", r.n, r.err, nsegs)
	}
	c.fills.Wait()
	before, _, _ := f.counts()
	mustRead(t, c, o2, s2, e2)
	if after, _, _ := f.counts(); after != before {
		t.Fatal("the read after idle read-ahead fetched again")
	}
	if n, err := c.PrefetchIdle(context.Background(), o2.l, s2, e2); err != nil || n != 0 ||
		labelled2(t, reg, "xet_edge_datacache_prefetch_total", "result", "cached") != float64(nsegs) {
		t.Fatalf("PrefetchIdle of a cached range = %d, %v", n, err)
	}

	// A context that ends while a client's read, or an answer's first ranges (Prefetch: what
	// the client reads next), are filling: nothing started, the context's error.
	for name, hold := range map[string]func(c *Cache){
		"a client's read": func(c *Cache) {
			go func() {
				if rr, err := c.ReadRange(context.Background(), o.l, s, e); err == nil {
					rr.Close()
				}
			}()
		},
		"an answer's first ranges": func(c *Cache) {
			if n, err := c.Prefetch(o.l, s, e); err != nil || n == 0 {
				t.Errorf("Prefetch = %d, %v", n, err)
			}
		},
	} {
		fh := newFakeFetcher(o, o2)
		fh.gate = make(chan struct{})
		fh.entered = make(chan fetchKey, 1000)
		ch, _ := testCache(t, t.TempDir(), fh, 1<<30, testSegment)
		hold(ch)
		<-fh.entered
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		n, err := ch.PrefetchIdle(ctx, o2.l, s2, e2)
		cancel()
		close(fh.gate)
		if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("PrefetchIdle with %s filling, to its deadline = %d, %v", name, n, err)
		}
	}
}
