package datacache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

const testSegment = 64 << 10

// segmentFiles returns the segment files under dir and their total size.
func segmentFiles(t *testing.T, dir string) (names []string, total int64) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(dir, segmentsDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		names = append(names, p)
		total += info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names, total
}

func TestSegmentsPartitionChunks(t *testing.T) {
	o := buildXorb(t, 1, 200, 2<<10, 6<<10)
	whole := span{a: 0, b: uint32(o.l.NumChunks()), start: 0, end: int64(o.l.ChunkAreaLen())}
	for _, size := range []int64{1, 1000, 4 << 10, testSegment, 1 << 20, 1 << 30} {
		segs := segments(o.l, whole, size)
		next := uint32(0)
		for _, s := range segs {
			if s.a != next || s.a >= s.b {
				t.Fatalf("size %d: segment %+v does not continue at chunk %d", size, s, next)
			}
			if k := s.start / size; chunkStart(o.l, int(s.b)-1)/size != k {
				t.Fatalf("size %d: segment %+v has chunks starting in different windows", size, s)
			}
			if ws, we := o.l.ByteRange(s.a, s.b); int64(ws) != s.start || int64(we) != s.end {
				t.Fatalf("size %d: segment %+v bytes disagree with layout [%d,%d)", size, s, ws, we)
			}
			next = s.b
		}
		if next != whole.b {
			t.Fatalf("size %d: segments end at chunk %d of %d", size, next, whole.b)
		}
	}
}

func TestReadBytes(t *testing.T) {
	o := buildXorb(t, 2, 200, 2<<10, 6<<10)
	n := o.l.NumChunks()
	seg0 := segmentSpan(o.l, 0, testSegment)
	tests := []struct {
		name string
		a, b int
	}{
		{"whole", 0, n},
		{"first chunk", 0, 1},
		{"last chunk", n - 1, n},
		{"exactly segment 0", 0, int(seg0.b)},
		{"straddles segments 0 and 1", int(seg0.b) - 2, int(seg0.b) + 2},
		{"middle", n / 3, 2 * n / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeFetcher(o)
			c, reg := testCache(t, t.TempDir(), f, 1<<30, testSegment)
			start, end := chunkRange(o.l, tt.a, tt.b)
			r, _ := requestSpan(o.l, start, end)
			segs := segments(o.l, r, testSegment)

			mustRead(t, c, o, start, end)
			c.fills.Wait() // the last bytes are served before their segment is committed
			total, perKey, _ := f.counts()
			want := chainKeys(c, o.l, segs)
			if total != len(want) || perKey != 1 {
				t.Fatalf("cold read: %d fetches (max %d per range), want one per chain of segments (%d)", total, perKey, len(want))
			}
			for _, k := range want {
				if f.calls[k] != 1 {
					t.Fatalf("segments [%d,%d) were not fetched in one request", k.start, k.end)
				}
			}
			mustRead(t, c, o, start, end)
			if total2, _, _ := f.counts(); total2 != total {
				t.Fatalf("warm read fetched again: %d fetches, want %d", total2, total)
			}
			if h, m := metric(t, reg, "xet_edge_datacache_hits_total"), metric(t, reg, "xet_edge_datacache_misses_total"); h != float64(len(segs)) || m != float64(len(segs)) {
				t.Fatalf("hits %v misses %v, want %d each", h, m, len(segs))
			}
			if got := metric(t, reg, "xet_edge_datacache_served_bytes_total"); got != float64(2*(end-start)) {
				t.Fatalf("served_bytes %v, want %d", got, 2*(end-start))
			}
			_, onDisk := segmentFiles(t, c.o.Dir)
			if got := metric(t, reg, "xet_edge_datacache_bytes"); got != float64(onDisk) {
				t.Fatalf("bytes gauge %v, files hold %d", got, onDisk)
			}
		})
	}
}

func TestBadRange(t *testing.T) {
	o := buildXorb(t, 3, 50, 2<<10, 6<<10)
	area := int64(o.l.ChunkAreaLen())
	s1, _ := chunkRange(o.l, 1, 2)
	tests := []struct {
		name       string
		start, end int64
		l          *xorb.Layout
	}{
		{"negative start", -1, s1, o.l},
		{"empty", s1, s1, o.l},
		{"reversed", s1, 0, o.l},
		{"past the chunk area", 0, area + 1, o.l},
		{"footer bytes", area, area + 10, o.l},
		{"start inside a chunk", 1, s1, o.l},
		{"end inside a chunk", 0, s1 + 1, o.l},
		{"end one short", 0, s1 - 1, o.l},
		{"inconsistent layout", 0, s1, &xorb.Layout{Hash: o.l.Hash, ChunkHashes: o.l.ChunkHashes, StoredEnds: o.l.StoredEnds[:1], RawEnds: o.l.RawEnds}},
		{"empty layout", 0, s1, &xorb.Layout{Hash: o.l.Hash}},
	}
	f := newFakeFetcher(o)
	c, _ := testCache(t, t.TempDir(), f, 1<<30, testSegment)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.ReadBytes(context.Background(), tt.l, tt.start, tt.end)
			if !errors.Is(err, ErrBadRange) || got != nil {
				t.Fatalf("ReadBytes [%d,%d) = %d bytes, %v; want ErrBadRange", tt.start, tt.end, len(got), err)
			}
		})
	}
	if total, _, _ := f.counts(); total != 0 {
		t.Fatalf("bad ranges caused %d origin fetches", total)
	}
}

func TestConcurrentMissesCollapse(t *testing.T) {
	o := buildXorb(t, 4, 200, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	f.gate = make(chan struct{})
	f.entered = make(chan fetchKey, 1000)
	c, reg := testCache(t, t.TempDir(), f, 1<<30, testSegment)
	n := o.l.NumChunks()
	whole := span{a: 0, b: uint32(n), end: int64(o.l.ChunkAreaLen())}
	nsegs := len(segments(o.l, whole, testSegment))

	const readers = 16
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	read := func(i int) {
		defer wg.Done()
		a, b := (i*7)%(n/2), n-(i*5)%(n/2) // overlapping, different ranges
		start, end := chunkRange(o.l, a, b)
		got, err := c.ReadBytes(context.Background(), o.l, start, end)
		if err == nil && !bytes.Equal(got, o.body[start:end]) {
			err = errors.New("wrong bytes")
		}
		errs <- err
	}
	wg.Add(readers)
	go read(0)
	<-f.entered // a fill is running and held: the others find flights in progress
	for i := 1; i < readers; i++ {
		go read(i)
	}
	close(f.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every segment is fetched by exactly one request (chained fills join the running
	// flights of segments they overlap): the origin sends each byte once.
	total, perKey, origin := f.counts()
	if perKey != 1 || total > nsegs || origin != int64(o.l.ChunkAreaLen()) {
		t.Fatalf("%d readers caused %d fetches (max %d per range) of %d bytes; want each of the %d segments' %d bytes fetched once",
			readers, total, perKey, origin, nsegs, o.l.ChunkAreaLen())
	}
	if got := metric(t, reg, "xet_edge_datacache_fills_total"); got != float64(nsegs) {
		t.Fatalf("fills_total %v, want %d", got, nsegs)
	}
	if got := metric(t, reg, "xet_edge_datacache_fill_bytes_total"); got != float64(o.l.ChunkAreaLen()) {
		t.Fatalf("fill_bytes_total %v, want the chunk area once (%d)", got, o.l.ChunkAreaLen())
	}
}

func TestCancelledCallerDoesNotFailOthers(t *testing.T) {
	o := buildXorb(t, 5, 20, 2<<10, 3<<10)
	f := newFakeFetcher(o)
	f.gate = make(chan struct{})
	f.entered = make(chan fetchKey, 10)
	c, _ := testCache(t, t.TempDir(), f, 1<<30, 1<<20) // one segment
	start, end := chunkRange(o.l, 0, o.l.NumChunks())

	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() {
		_, err := c.ReadBytes(ctxA, o.l, start, end)
		doneA <- err
	}()
	<-f.entered
	doneB := make(chan error, 1)
	go func() {
		got, err := c.ReadBytes(context.Background(), o.l, start, end)
		if err == nil && !bytes.Equal(got, o.body[start:end]) {
			err = errors.New("wrong bytes")
		}
		doneB <- err
	}()
	cancelA()
	if err := <-doneA; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v, want context.Canceled", err)
	}
	close(f.gate)
	if err := <-doneB; err != nil {
		t.Fatalf("second caller failed after the first left: %v", err)
	}
	total, _, _ := f.counts()
	if total != 1 {
		t.Fatalf("%d fetches, want 1", total)
	}
	if f.ctxErrs[0] != nil {
		t.Fatalf("the fill's context ended with the first caller: %v", f.ctxErrs[0])
	}
}

func TestCorruptOriginBytesNeverServed(t *testing.T) {
	o := buildXorb(t, 6, 40, 2<<10, 6<<10)
	mid := o.l.NumChunks() / 2
	ms, me := chunkRange(o.l, mid, mid+1)
	tests := []struct {
		name    string
		corrupt func(k fetchKey, b []byte)
	}{
		{"payload byte flipped", func(k fetchKey, b []byte) {
			if k.start <= ms && me <= k.end {
				b[me-1-k.start] ^= 0x40
			}
		}},
		{"header length changed", func(k fetchKey, b []byte) {
			if k.start <= ms && me <= k.end {
				b[ms+1-k.start]++
			}
		}},
		{"all zeros", func(k fetchKey, b []byte) { clear(b) }},
		{"last byte of the first segment flipped", func(k fetchKey, b []byte) {
			if k.start == 0 {
				b[len(b)-1] ^= 1
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeFetcher(o)
			f.corrupt = tt.corrupt
			dir := t.TempDir()
			c, reg := testCache(t, dir, f, 1<<30, 1<<30) // one segment: the whole xorb
			start, end := chunkRange(o.l, 0, o.l.NumChunks())
			got, err := c.ReadBytes(context.Background(), o.l, start, end)
			if !errors.Is(err, ErrCorrupt) || got != nil {
				t.Fatalf("ReadBytes = %d bytes, %v; want ErrCorrupt", len(got), err)
			}
			if v := metric(t, reg, "xet_edge_datacache_verify_failures_total"); v != fillAttempts {
				t.Fatalf("verify_failures_total %v, want one per attempt (%d)", v, fillAttempts)
			}
			if v := labelled(t, reg, "xet_edge_datacache_fill_failures_total", "corrupt"); v != 1 {
				t.Fatalf("fill_failures_total{reason=corrupt} %v, want 1", v)
			}
			if v := metric(t, reg, "xet_edge_datacache_served_bytes_total"); v != 0 {
				t.Fatalf("served_bytes_total %v after a corrupt fill", v)
			}
			if names, _ := segmentFiles(t, dir); len(names) != 0 {
				t.Fatalf("corrupt fill left files: %v", names)
			}
			if tmp, _ := os.ReadDir(filepath.Join(dir, tmpDir)); len(tmp) != 0 {
				t.Fatalf("corrupt fill left temp files")
			}
			f.set(func(f *fakeFetcher) { f.corrupt = nil })
			mustRead(t, c, o, start, end) // nothing bad was remembered
		})
	}
}

func TestEvictionKeepsBudget(t *testing.T) {
	o := buildXorb(t, 7, 300, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	whole := span{a: 0, b: uint32(o.l.NumChunks()), end: int64(o.l.ChunkAreaLen())}
	segs := segments(o.l, whole, testSegment)
	if len(segs) < 6 {
		t.Fatalf("want at least 6 segments, have %d", len(segs))
	}
	budget := 3 * testSegment
	dir := t.TempDir()
	c, reg := testCache(t, dir, f, int64(budget), testSegment)
	for _, s := range segs {
		mustRead(t, c, o, s.start, s.end)
		c.fills.Wait() // committed (and evicted) just after its last bytes were read
		if _, onDisk := segmentFiles(t, dir); onDisk > int64(budget) {
			t.Fatalf("%d bytes on disk, budget %d", onDisk, budget)
		}
	}
	if v := metric(t, reg, "xet_edge_datacache_evictions_total"); v == 0 {
		t.Fatal("no evictions counted")
	}
	_, onDisk := segmentFiles(t, dir)
	if v := metric(t, reg, "xet_edge_datacache_bytes"); v != float64(onDisk) {
		t.Fatalf("bytes gauge %v, files hold %d", v, onDisk)
	}
	before, _, _ := f.counts()
	last := segs[len(segs)-1]
	mustRead(t, c, o, last.start, last.end) // most recently used: still cached
	if after, _, _ := f.counts(); after != before {
		t.Fatal("most recently used segment was evicted")
	}
	mustRead(t, c, o, segs[0].start, segs[0].end) // least recently used: gone, refetched
	if after, _, _ := f.counts(); after != before+1 {
		t.Fatalf("oldest segment: %d fetches, want 1", after-before)
	}
}

func TestRestartRecovery(t *testing.T) {
	o := buildXorb(t, 8, 200, 2<<10, 6<<10)
	dir := t.TempDir()
	f := newFakeFetcher(o)
	c, _ := testCache(t, dir, f, 1<<30, testSegment)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	mustRead(t, c, o, start, end)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadBytes(context.Background(), o.l, start, end); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	names, _ := segmentFiles(t, dir)
	if len(names) < 4 {
		t.Fatalf("want at least 4 segment files, have %d", len(names))
	}
	// Damage the directory the ways a crash or a disk can.
	if err := os.Truncate(names[0], 10); err != nil { // size disagrees with the name
		t.Fatal(err)
	}
	data, err := os.ReadFile(names[1])
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff // same size, wrong bytes: caught by the lazy verification
	if err := os.WriteFile(names[1], data, 0o644); err != nil {
		t.Fatal(err)
	}
	stray := []string{
		filepath.Join(dir, tmpDir, "fill-123"),                         // an unfinished fill
		filepath.Join(dir, segmentsDir, "zz", "not-a-segment"),         // junk
		filepath.Join(filepath.Dir(names[2]), "ABC.0.10"),              // not canonical
		filepath.Join(dir, segmentsDir, "00", filepath.Base(names[2])), // wrong prefix dir
	}
	for _, p := range stray {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	f2 := newFakeFetcher(o)
	c2, reg := testCache(t, dir, f2, 1<<30, testSegment)
	for _, p := range stray {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stray file %s survived Open (%v)", p, err)
		}
	}
	mustRead(t, c2, o, start, end)
	total, perKey, _ := f2.counts()
	if total != 2 || perKey != 1 {
		t.Fatalf("after restart: %d fetches, want 2 (the truncated and the damaged segment)", total)
	}
	if v := metric(t, reg, "xet_edge_datacache_disk_verify_failures_total"); v != 1 {
		t.Fatalf("disk_verify_failures_total %v, want 1", v)
	}
	mustRead(t, c2, o, start, end)
	if total2, _, _ := f2.counts(); total2 != total {
		t.Fatal("second read after restart fetched again")
	}

	// A smaller budget at the next start evicts down to it at once.
	c2.Close()
	c3, reg3 := testCache(t, dir, newFakeFetcher(o), 2*testSegment, testSegment)
	_ = c3
	if _, onDisk := segmentFiles(t, dir); onDisk > 2*testSegment {
		t.Fatalf("%d bytes on disk after reopening with budget %d", onDisk, 2*testSegment)
	}
	if v := metric(t, reg3, "xet_edge_datacache_evictions_total"); v == 0 {
		t.Fatal("no evictions counted at Open")
	}
}

func TestOriginErrorsAreReturned(t *testing.T) {
	o := buildXorb(t, 9, 10, 2<<10, 3<<10)
	f := newFakeFetcher(o)
	errOrigin := errors.New("origin down")
	f.err = errOrigin
	dir := t.TempDir()
	c, reg := testCache(t, dir, f, 1<<30, testSegment)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	if _, err := c.ReadBytes(context.Background(), o.l, start, end); !errors.Is(err, errOrigin) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want the origin's error", err)
	}
	if v := metric(t, reg, "xet_edge_datacache_verify_failures_total"); v != 0 {
		t.Fatalf("an origin error counted as a verify failure")
	}
	if names, _ := segmentFiles(t, dir); len(names) != 0 {
		t.Fatal("failed fill left files")
	}
}

// TestReadAmplification reads random chunk ranges and checks that every segment was pulled
// from the origin exactly once; it logs origin bytes ÷ served bytes.
func TestReadAmplification(t *testing.T) {
	objs := []object{buildXorb(t, 10, 300, 2<<10, 6<<10), buildXorb(t, 11, 300, 2<<10, 6<<10)}
	f := newFakeFetcher(objs...)
	c, reg := testCache(t, t.TempDir(), f, 1<<30, testSegment)
	rng := rand.New(rand.NewPCG(3, 4))
	touched := make(map[fetchKey]bool)
	var served, firstHalf int64
	const reads = 400
	for i := 0; i < reads; i++ {
		o := objs[rng.IntN(len(objs))]
		n := o.l.NumChunks()
		a := rng.IntN(n)
		b := min(n, a+1+rng.IntN(16))
		start, end := chunkRange(o.l, a, b)
		mustRead(t, c, o, start, end)
		r, _ := requestSpan(o.l, start, end)
		for _, s := range segments(o.l, r, testSegment) {
			touched[fetchKey{o.l.Hash, s.start, s.end}] = true
		}
		served += end - start
		if i == reads/2-1 {
			_, _, firstHalf = f.counts()
		}
	}
	var want int64
	for k := range touched {
		want += k.end - k.start
	}
	_, perKey, origin := f.counts()
	if perKey != 1 || origin != want {
		t.Fatalf("origin sent %d bytes (max %d fetches per segment); the touched segments hold %d", origin, perKey, want)
	}
	if v := metric(t, reg, "xet_edge_datacache_served_bytes_total"); v != float64(served) {
		t.Fatalf("served_bytes_total %v, want %d", v, served)
	}
	t.Logf("random 1-16 chunk reads, %d KiB segments: %d reads, served %d B, origin %d B: amplification %.2f (first half %.2f)",
		testSegment>>10, reads, served, origin, float64(origin)/float64(served), float64(firstHalf)/float64(served/2))
}

// TestReadRangeStreams reads a range that mixes cached and freshly filled segments through
// WriteTo and through small Reads, with the cached files evicted while the Range is open.
func TestReadRangeStreams(t *testing.T) {
	o := buildXorb(t, 12, 300, 2<<10, 6<<10)
	n := o.l.NumChunks()
	start, end := chunkRange(o.l, 10, n-10)
	for _, mode := range []string{"WriteTo", "Read"} {
		t.Run(mode, func(t *testing.T) {
			f := newFakeFetcher(o)
			dir := t.TempDir()
			c, _ := testCache(t, dir, f, 1<<30, testSegment)
			ms, me := chunkRange(o.l, n/2, n/2+5)
			mustRead(t, c, o, ms, me) // some segments cached, the rest filled by ReadRange
			rr, err := c.ReadRange(context.Background(), o.l, start, end)
			if err != nil {
				t.Fatal(err)
			}
			defer rr.Close()
			if rr.Len() != end-start {
				t.Fatalf("Len %d, want %d", rr.Len(), end-start)
			}
			names, _ := segmentFiles(t, dir)
			for _, p := range names { // eviction unlinks files; open ones stay readable
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
			var got bytes.Buffer
			if mode == "WriteTo" {
				if _, err := rr.WriteTo(&got); err != nil {
					t.Fatal(err)
				}
			} else {
				buf := make([]byte, 1000)
				for {
					k, err := rr.Read(buf)
					got.Write(buf[:k])
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			if !bytes.Equal(got.Bytes(), o.body[start:end]) || rr.Len() != 0 {
				t.Fatalf("streamed %d bytes (Len %d left), want the %d bytes of the range", got.Len(), rr.Len(), end-start)
			}
			rr.Close()
			if _, err := rr.Read(make([]byte, 1)); err == nil {
				t.Fatal("Read after Close succeeded")
			}
		})
	}
}

// TestRangeDiscard skips into a range that mixes cached files and freshly filled segments and
// reads the rest: the bytes after the skip are the object's, in both kinds of part.
func TestRangeDiscard(t *testing.T) {
	o := buildXorb(t, 13, 300, 2<<10, 6<<10)
	n := o.l.NumChunks()
	start, end := chunkRange(o.l, 10, n-10)
	size := end - start
	tests := []struct {
		name    string
		skip    int64
		wantErr bool
	}{
		{"nothing", 0, false},
		{"one byte", 1, false},
		{"into the cached middle", size / 2, false},
		{"across several segments", size - 3*testSegment/2, false},
		{"all but one byte", size - 1, false},
		{"everything", size, false},
		{"past the end", size + 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := testCache(t, t.TempDir(), newFakeFetcher(o), 1<<30, testSegment)
			ms, me := chunkRange(o.l, n/2, n/2+5)
			mustRead(t, c, o, ms, me) // the middle segments are files, the rest filled in memory
			rr, err := c.ReadRange(context.Background(), o.l, start, end)
			if err != nil {
				t.Fatal(err)
			}
			defer rr.Close()
			k, err := rr.Discard(tc.skip)
			if tc.wantErr {
				if !errors.Is(err, io.ErrUnexpectedEOF) || k != size || rr.Len() != 0 {
					t.Fatalf("Discard(%d) of %d: %d, %v; want %d, ErrUnexpectedEOF", tc.skip, size, k, err, size)
				}
				return
			}
			if err != nil || k != tc.skip || rr.Len() != size-tc.skip {
				t.Fatalf("Discard(%d): %d, %v, Len %d", tc.skip, k, err, rr.Len())
			}
			var got bytes.Buffer
			if _, err := rr.WriteTo(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), o.body[start+tc.skip:end]) {
				t.Fatalf("after Discard(%d): %d bytes differ from the object's %d", tc.skip, got.Len(), size-tc.skip)
			}
		})
	}
}
