package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/xetcdn/xetcdn/edge/internal/datacache"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/promtest"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// fetchLog is a memFetcher that also records every range it was asked for.
type fetchLog struct {
	*memFetcher
	ranges [][2]int64 // guarded by memFetcher.mu
}

func (f *fetchLog) FetchXorbRange(ctx context.Context, h hash.Hash, start, end int64) (io.ReadCloser, error) {
	rc, err := f.memFetcher.FetchXorbRange(ctx, h, start, end)
	f.mu.Lock()
	f.ranges = append(f.ranges, [2]int64{start, end})
	f.mu.Unlock()
	return rc, err
}

func (f *fetchLog) snapshot() (int64, [][2]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes, append([][2]int64(nil), f.ranges...)
}

// gathered is the value of counter name{label=value} in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestReadAhead: a reconstruction answered by a cold edge starts the fills of the first terms'
// fetch ranges before any transfer request arrives, no more than Options.ReadAheadBytes of
// them; the transfer requests for those ranges then cause no new origin transfer, and one for
// a range beyond the read-ahead does (the fetcher's count is live). A second answer for the
// file, now warm, is not read ahead.
func TestReadAhead(t *testing.T) {
	const seg = 256 << 10
	body, l := testXorb(t, 3, 48, 20000) // ~20 KB stored per chunk: ~13 chunks per segment
	f := &fetchLog{memFetcher: &memFetcher{body: map[hash.Hash][]byte{l.Hash: body}}}
	reg := prometheus.NewRegistry()
	dc, err := datacache.Open(context.Background(), datacache.Options{Dir: t.TempDir(), MaxBytes: 1 << 30,
		Fetcher: f, SegmentBytes: seg, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	// Three terms in three non-adjacent fetch ranges, one per 256 KiB segment region.
	chunks := [][2]uint32{{0, 8}, {16, 24}, {34, 42}}
	file := shard.File{Hash: hash.Chunk([]byte("read-ahead file"))}
	for _, c := range chunks {
		file.Terms = append(file.Terms, shard.Term{Xorb: l.Hash, Start: c[0], End: c[1], RawBytes: l.RawRange(c[0], c[1])})
	}
	rec, err := recon.NewFileRecord(file, map[hash.Hash]*xorb.Layout{l.Hash: l})
	if err != nil {
		t.Fatal(err)
	}
	byteRange := func(c [2]uint32) httprange.ByteRange {
		s, e := l.ByteRange(c[0], c[1])
		return httprange.ByteRange{Start: uint64(s), End: uint64(e) - 1}
	}
	// Read ahead the first two ranges only.
	budget := int64(byteRange(chunks[0]).Len() + byteRange(chunks[1]).Len())
	signer, err := urlsign.New(urlsign.Options{BaseURL: "https://edge.invalid", Key: bytes.Repeat([]byte{7}, urlsign.MinKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	origin, _ := url.Parse("http://127.0.0.1:1")
	meta := fakeMeta{layouts: map[hash.Hash]*xorb.Layout{l.Hash: l}, files: map[hash.Hash]*recon.FileRecord{rec.Hash: rec}}
	srv, err := New(Options{Meta: meta, Bytes: dc, ReadAhead: dc, ReadAheadBytes: budget, ReadAheadIdleBytes: -1, Tokens: readTokens{},
		Signer: signer, Origin: origin, Permits: 8,
		CorruptErrs: []error{datacache.ErrCorrupt}, BadRangeErrs: []error{datacache.ErrBadRange}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v2/reconstructions/"+rec.Hash.String(), nil))
	if w.Code != http.StatusOK {
		t.Fatalf("reconstruction: %d %s", w.Code, w.Body.String())
	}
	// Wait for the read-ahead run to finish starting its fills (bounded by readAheadTimeout).
	if err := srv.ra.runs.Acquire(context.Background(), readAheadRuns); err != nil {
		t.Fatal(err)
	}
	srv.ra.runs.Release(readAheadRuns)
	if v := promtest.Counter(t, srv.m.readAhead.WithLabelValues("started")); v != 1 {
		t.Fatalf("xet_edge_readahead_total{started} = %v, want 1", v)
	}
	// The first two ranges lie in segments 0 and 1; the third range's segments are not read ahead.
	if v := gathered(t, reg, "xet_edge_datacache_prefetch_total", "result", "started"); v != 2 {
		t.Fatalf("prefetch fills started: %v, want 2 (segments of the first two ranges)", v)
	}
	// Reading the first two ranges waits for the prefetch fills (joins or hits), fetching nothing new.
	get := func(c [2]uint32) {
		t.Helper()
		br := byteRange(c)
		u := string(signer.Bind("s", rec.Hash, signer.Expiry(0)).AppendURL(nil, l.Hash, []httprange.ByteRange{br}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, strings.TrimPrefix(u, "https://edge.invalid"), nil))
		if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), body[br.Start:br.End+1]) {
			t.Fatalf("transfer of chunks %v: %d, %d bytes", c, w.Code, w.Body.Len())
		}
	}
	get(chunks[0])
	get(chunks[1])
	n, ranges := f.snapshot()
	// The two prefetch fills run concurrently: their order at the origin is either.
	sort.Slice(ranges, func(i, j int) bool { return ranges[i][0] < ranges[j][0] })
	if len(ranges) != 2 || ranges[0][0] != 0 || ranges[1][0] < seg || ranges[1][1] > 2*seg+20000 {
		t.Fatalf("origin transfers after read-ahead and the first two transfers: %v, want segments 0 and 1 once", ranges)
	}
	if n > budget+2*seg {
		t.Fatalf("read-ahead pulled %d bytes, bound %d plus segment rounding", n, budget)
	}
	get(chunks[2])
	if _, after := f.snapshot(); len(after) <= 2 {
		t.Fatalf("the range beyond the read-ahead was served without an origin transfer: %v", after)
	}

	// Warm: the file's first fetch range is cached now (its fill commits just after its last
	// byte was served), so the next answer for it is not read ahead at all: no run, no
	// Prefetch (whose per-segment "cached" counter stays put).
	cs, _ := l.ByteRange(chunks[0][0], chunks[0][1])
	for deadline := time.Now().Add(10 * time.Second); !dc.CachedAt(l.Hash, int64(cs)); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first segment was not committed within 10 s")
		}
	}
	cachedBefore := gathered(t, reg, "xet_edge_datacache_prefetch_total", "result", "cached")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v2/reconstructions/"+rec.Hash.String(), nil))
	if w.Code != http.StatusOK {
		t.Fatalf("warm reconstruction: %d %s", w.Code, w.Body.String())
	}
	if err := srv.ra.runs.Acquire(context.Background(), readAheadRuns); err != nil {
		t.Fatal(err)
	}
	srv.ra.runs.Release(readAheadRuns)
	if v := promtest.Counter(t, srv.m.readAhead.WithLabelValues("started")); v != 1 {
		t.Fatalf("warm answer: xet_edge_readahead_total{started} = %v, want still 1", v)
	}
	if v := promtest.Counter(t, srv.m.readAhead.WithLabelValues("skipped_cached")); v != 1 {
		t.Fatalf("warm answer: xet_edge_readahead_total{skipped_cached} = %v, want 1", v)
	}
	if v := gathered(t, reg, "xet_edge_datacache_prefetch_total", "result", "cached"); v != cachedBefore {
		t.Fatalf("warm answer: Prefetch looked at %v cached segments, want none", v-cachedBefore)
	}
	// The warm check is on every answer's path: it allocates nothing.
	a, err := srv.plan(context.Background(), rec, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { srv.readAhead(context.Background(), a) }); n != 0 {
		t.Fatalf("read-ahead of a warm answer: %v allocations, want 0", n)
	}
}

// TestFirstRanges: the fetch ranges of the first terms, in term order, each once, within the
// byte and range bounds.
func TestFirstRanges(t *testing.T) {
	rec, _ := worstFile(t, 4, 200, 400)
	a, err := recon.Plan(rec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		maxBytes  int64
		maxRanges int
	}{{"by ranges", 1 << 40, 5}, {"by bytes", 2000, 64}, {"one byte", 1, 64}} {
		t.Run(tc.name, func(t *testing.T) {
			rs := firstRanges(a, tc.maxBytes, tc.maxRanges)
			if len(rs) == 0 || len(rs) > tc.maxRanges {
				t.Fatalf("%d ranges, bound %d", len(rs), tc.maxRanges)
			}
			if first := a.Term(0); rs[0].h != first.Xorb || rs[0].start > first.Start || rs[0].end < first.End {
				t.Fatalf("first range %+v does not hold the first term %+v", rs[0], first)
			}
			var n int64
			seen := map[readAheadRange]bool{}
			for i, r := range rs {
				if seen[r] {
					t.Fatalf("range %+v listed twice", r)
				}
				seen[r] = true
				if i < len(rs)-1 && n >= tc.maxBytes {
					t.Fatalf("ranges go on past %d bytes", tc.maxBytes)
				}
				n += int64(r.end-r.start) * (xorb.HeaderSize + 60) // synthLayout's stored chunk size
			}
		})
	}
}

// warmMeta is a fakeMeta that is also a LayoutWarmer: it records every WarmLayouts call, and
// its Layout takes delay (or, for xorb gated, waits for gate) or fails for xorb broken.
type warmMeta struct {
	fakeMeta
	delay  time.Duration
	gated  hash.Hash
	gate   chan struct{}
	broken hash.Hash
	mu     sync.Mutex
	warmed [][]hash.Hash
}

func (m *warmMeta) WarmLayouts(_ context.Context, hs []hash.Hash) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.warmed = append(m.warmed, append([]hash.Hash(nil), hs...))
	return nil
}

func (m *warmMeta) Layout(ctx context.Context, h hash.Hash) (*xorb.Layout, error) {
	time.Sleep(m.delay)
	switch h {
	case m.gated:
		select {
		case <-m.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case m.broken:
		return nil, errors.New("warmMeta: broken layout")
	}
	return m.fakeMeta.Layout(ctx, h)
}

// prefetchLog is a ReadAhead that records its Prefetch calls and whether the answer had been
// written when each was made.
type prefetchLog struct {
	answered *atomic.Bool
	mu       sync.Mutex
	calls    []prefetchCall
	idle     []prefetchCall          // PrefetchIdle's
	cached   map[readAheadRange]bool // CachedAt's answers, by xorb and offset (other fields zero)
}

type prefetchCall struct {
	h          hash.Hash
	start, end int64
	afterWrite bool
}

func (p *prefetchLog) Prefetch(l *xorb.Layout, start, end int64) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, prefetchCall{l.Hash, start, end, p.answered.Load()})
	return 1, nil
}

func (p *prefetchLog) PrefetchIdle(_ context.Context, l *xorb.Layout, start, end int64) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = append(p.idle, prefetchCall{l.Hash, start, end, p.answered.Load()})
	return 1, nil
}

func (p *prefetchLog) CachedAt(h hash.Hash, off int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cached[readAheadRange{h: h, off: off}]
}

func (p *prefetchLog) snapshot() []prefetchCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]prefetchCall(nil), p.calls...)
}

// writeMark is a ResponseWriter that sets answered at the answer's first byte.
type writeMark struct {
	http.ResponseWriter
	answered *atomic.Bool
}

func (w writeMark) Write(b []byte) (int, error) {
	w.answered.Store(true)
	return w.ResponseWriter.Write(b)
}

// TestColdAnswerReadsAheadFirst: before a cold answer goes out, the layouts of its first
// warmXorbs xorbs were asked for in one batch (in term order, each once) and the fill of its
// first fetch range was started; the other ranges follow in the background. A first layout
// slower than ReadAheadWait does not hold the answer longer (read-ahead goes on afterwards),
// and one that fails stops read-ahead, counted once.
func TestColdAnswerReadsAheadFirst(t *testing.T) {
	rec, layouts := worstFile(t, 10, 200, 12) // term i in xorb i mod 10: ten xorbs, two seen twice
	a, err := recon.Plan(rec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var order []hash.Hash // the xorbs in term order
	for i := range a.Len() {
		order = append(order, a.Term(i).Xorb)
	}
	run := func(t *testing.T, m *warmMeta, wait time.Duration) (*Server, *prefetchLog, time.Duration) {
		t.Helper()
		m.fakeMeta = fakeMeta{layouts: layouts, files: map[hash.Hash]*recon.FileRecord{rec.Hash: rec}}
		answered := &atomic.Bool{}
		p := &prefetchLog{answered: answered}
		signer, err := urlsign.New(urlsign.Options{BaseURL: "https://edge.invalid", Key: bytes.Repeat([]byte{7}, urlsign.MinKeyLen)})
		if err != nil {
			t.Fatal(err)
		}
		origin, _ := url.Parse("http://127.0.0.1:1")
		srv, err := New(Options{Meta: m, Bytes: noBytes{}, ReadAhead: p, ReadAheadBytes: 5 * 10 * (xorb.HeaderSize + 60), // x0 and x1 hold two terms each, in one range
			ReadAheadWait: wait, Tokens: readTokens{}, Signer: signer, Origin: origin, Permits: 8})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		began := time.Now()
		srv.Handler().ServeHTTP(writeMark{w, answered}, httptest.NewRequest(http.MethodGet, "/v2/reconstructions/"+rec.Hash.String(), nil))
		took := time.Since(began)
		if w.Code != http.StatusOK {
			t.Fatalf("reconstruction: %d %s", w.Code, w.Body.String())
		}
		return srv, p, took
	}
	finish := func(t *testing.T, srv *Server) {
		t.Helper()
		if err := srv.ra.runs.Acquire(context.Background(), readAheadRuns); err != nil {
			t.Fatal(err)
		}
		srv.ra.runs.Release(readAheadRuns)
	}

	t.Run("first range before the answer", func(t *testing.T) {
		m := &warmMeta{delay: 20 * time.Millisecond}
		srv, p, _ := run(t, m, time.Second)
		m.mu.Lock()
		warmed := m.warmed
		m.mu.Unlock()
		if len(warmed) != 1 || len(warmed[0]) != warmXorbs {
			t.Fatalf("WarmLayouts calls %v, want one of %d xorbs", warmed, warmXorbs)
		}
		for i, h := range warmed[0] {
			if h != order[i] {
				t.Fatalf("WarmLayouts asked %v, want the answer's first %d xorbs in term order", warmed[0], warmXorbs)
			}
		}
		calls := p.snapshot()
		if len(calls) == 0 || calls[0].h != order[0] || calls[0].afterWrite {
			t.Fatalf("prefetches when the answer went out: %+v, want the first range's, made before it", calls)
		}
		finish(t, srv)
		calls = p.snapshot()
		if len(calls) != 3 || calls[1].h != order[1] || calls[2].h != order[2] {
			t.Fatalf("prefetches %+v, want the first three ranges", calls)
		}
	})

	t.Run("slow layout does not hold the answer", func(t *testing.T) {
		m := &warmMeta{gated: order[0], gate: make(chan struct{})}
		srv, p, took := run(t, m, 50*time.Millisecond)
		if took > 5*time.Second {
			t.Fatalf("the answer waited %v for a layout, bound 50ms", took)
		}
		if calls := p.snapshot(); len(calls) != 0 {
			t.Fatalf("prefetches before the layout came: %+v", calls)
		}
		close(m.gate)
		finish(t, srv)
		if calls := p.snapshot(); len(calls) != 3 || calls[0].h != order[0] || !calls[0].afterWrite {
			t.Fatalf("prefetches %+v, want the first three ranges, after the answer", calls)
		}
		if v := promtest.Counter(t, srv.m.readAhead.WithLabelValues("error")); v != 0 {
			t.Fatalf("xet_edge_readahead_total{error} = %v after a slow layout, want 0", v)
		}
	})

	t.Run("failed layout stops read-ahead", func(t *testing.T) {
		m := &warmMeta{broken: order[0]}
		srv, p, _ := run(t, m, time.Second)
		finish(t, srv)
		if calls := p.snapshot(); len(calls) != 0 {
			t.Fatalf("prefetches after the first layout failed: %+v", calls)
		}
		if v := promtest.Counter(t, srv.m.readAhead.WithLabelValues("error")); v != 1 {
			t.Fatalf("xet_edge_readahead_total{error} = %v, want 1", v)
		}
	})
}

// TestReadAheadIdle: after an answer's first ranges, read-ahead goes on with the rest of the
// answer through PrefetchIdle, from the chunk where the first ranges' budget clipped the last of
// them, in term order, up to Options.ReadAheadIdleBytes. An answer whose first range is cached
// but whose last is not is read ahead; one whose first and last are cached is warm.
func TestReadAheadIdle(t *testing.T) {
	rec, layouts := worstFile(t, 10, 200, 40) // term i in xorb i mod 10, four terms of each
	a, err := recon.Plan(rec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := firstRanges(a, 1<<40, 1000)
	bytesOf := func(r readAheadRange) (int64, int64) {
		s, e := layouts[r.h].ByteRange(r.start, r.end)
		return int64(s), int64(e)
	}
	s0, e0 := bytesOf(all[0])
	s1, e1 := bytesOf(all[1])
	s2, e2 := bytesOf(all[2])
	eager := (e0 - s0) / 2                            // clips inside the first range
	idle := (e0 - s0 - eager) + (e1 - s1) + (e2-s2)/2 // its rest, the second, half the third
	run := func(t *testing.T, cached map[readAheadRange]bool) (*Server, *prefetchLog) {
		t.Helper()
		p := &prefetchLog{answered: &atomic.Bool{}, cached: cached}
		signer, err := urlsign.New(urlsign.Options{BaseURL: "https://edge.invalid", Key: bytes.Repeat([]byte{7}, urlsign.MinKeyLen)})
		if err != nil {
			t.Fatal(err)
		}
		origin, _ := url.Parse("http://127.0.0.1:1")
		meta := &warmMeta{fakeMeta: fakeMeta{layouts: layouts, files: map[hash.Hash]*recon.FileRecord{rec.Hash: rec}}}
		srv, err := New(Options{Meta: meta, Bytes: noBytes{}, ReadAhead: p, ReadAheadBytes: eager, ReadAheadIdleBytes: idle,
			Tokens: readTokens{}, Signer: signer, Origin: origin, Permits: 8})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v2/reconstructions/"+rec.Hash.String(), nil))
		if w.Code != http.StatusOK {
			t.Fatalf("reconstruction: %d %s", w.Code, w.Body.String())
		}
		for _, sem := range []*semaphore.Weighted{srv.ra.runs, srv.ra.idle} {
			n := int64(readAheadRuns)
			if sem == srv.ra.idle {
				n = idleRuns
			}
			if err := sem.Acquire(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			sem.Release(n)
		}
		return srv, p
	}

	srv, p := run(t, nil)
	// The idle run may still be between its slot and its first call when the runs are free:
	// wait for it to finish too (it holds an idle slot throughout).
	for deadline := time.Now().Add(5 * time.Second); promtest.Counter(t, srv.m.readAhead.WithLabelValues("idle_started")) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no idle read-ahead run")
		}
	}
	if err := srv.ra.idle.Acquire(context.Background(), idleRuns); err != nil {
		t.Fatal(err)
	}
	srv.ra.idle.Release(idleRuns)
	p.mu.Lock()
	calls, idles := append([]prefetchCall(nil), p.calls...), append([]prefetchCall(nil), p.idle...)
	p.mu.Unlock()
	if len(calls) != 1 || calls[0].h != all[0].h || calls[0].start != s0 || calls[0].end >= e0 {
		t.Fatalf("first ranges' prefetches %+v, want the first range clipped", calls)
	}
	if len(idles) != 3 {
		t.Fatalf("idle prefetches %+v, want three: the first range's rest, the second, part of the third", idles)
	}
	if idles[0].h != all[0].h || idles[0].start != calls[0].end || idles[0].end != e0 {
		t.Fatalf("idle prefetch %+v, want the first range from %d (where the first ranges stopped) to %d", idles[0], calls[0].end, e0)
	}
	if idles[1].h != all[1].h || idles[1].start != s1 || idles[1].end != e1 {
		t.Fatalf("idle prefetch %+v, want the second range [%d,%d)", idles[1], s1, e1)
	}
	if idles[2].h != all[2].h || idles[2].start != s2 || idles[2].end <= s2 || idles[2].end >= e2 {
		t.Fatalf("idle prefetch %+v, want the third range clipped", idles[2])
	}
	var n int64
	for _, c := range idles {
		n += c.end - c.start
	}
	if n < idle || n > idle+int64(2*(xorb.HeaderSize+60)) { // clipped at a chunk's end
		t.Fatalf("idle read-ahead of %d stored bytes, budget %d", n, idle)
	}

	// First range cached, last not: read ahead. Both cached: warm, skipped.
	last, _ := lastRange(a)
	first := readAheadRange{h: all[0].h, off: all[0].off}
	srv, _ = run(t, map[readAheadRange]bool{first: true})
	if v := promtest.Counter(t, srv.m.readAhead.WithLabelValues("started")); v != 1 {
		t.Fatalf("answer with a cached head and a missing tail: read-ahead started %v times, want 1", v)
	}
	srv, _ = run(t, map[readAheadRange]bool{first: true, {h: last.h, off: last.off}: true})
	if v := promtest.Counter(t, srv.m.readAhead.WithLabelValues("skipped_cached")); v != 1 {
		t.Fatalf("answer with head and tail cached: skipped_cached %v, want 1", v)
	}
}
