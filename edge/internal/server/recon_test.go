package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/xetcdn/xetcdn/edge/internal/datacache"
	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// readTokens accepts every request as a read token of scope "s".
type readTokens struct{}

func (readTokens) VerifyRequest(*http.Request) (*auth.Claims, error) {
	return &auth.Claims{Scope: "s", Access: auth.Read}, nil
}

// synthLayout is a consistent layout of n chunks of 100 raw / 60 stored bytes (chunk hashes
// derived from seed; Plan does not hash anything).
func synthLayout(seed uint64, n int) *xorb.Layout {
	l := &xorb.Layout{ChunkHashes: make([]hash.Hash, n), StoredEnds: make([]uint32, n), RawEnds: make([]uint32, n)}
	leaves := make([]hash.Leaf, n)
	for i := range n {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:], seed)
		binary.LittleEndian.PutUint64(b[8:], uint64(i))
		l.ChunkHashes[i] = hash.Chunk(b[:])
		l.StoredEnds[i] = uint32(i+1) * (xorb.HeaderSize + 60)
		l.RawEnds[i] = uint32(i+1) * 100
		leaves[i] = hash.Leaf{Hash: l.ChunkHashes[i], Size: 100}
	}
	l.Hash = hash.Merkle(leaves)
	return l
}

// worstFile is the worst case of the performance targets: terms of 10 chunks, consecutive
// terms in different xorbs (term i in xorb i mod xorbs), so no two fetch ranges merge.
func worstFile(tb testing.TB, xorbs, chunks, terms int) (*recon.FileRecord, map[hash.Hash]*xorb.Layout) {
	tb.Helper()
	ls := make([]*xorb.Layout, xorbs)
	byHash := make(map[hash.Hash]*xorb.Layout, xorbs)
	for i := range ls {
		ls[i] = synthLayout(uint64(i), chunks)
		byHash[ls[i].Hash] = ls[i]
	}
	f := shard.File{Hash: hash.Chunk(fmt.Appendf(nil, "worst %d %d %d", xorbs, chunks, terms))}
	for i := range terms {
		l := ls[i%xorbs]
		a := uint32((i / xorbs * 10) % (chunks - 10))
		f.Terms = append(f.Terms, shard.Term{Xorb: l.Hash, Start: a, End: a + 10, RawBytes: l.RawRange(a, a+10)})
	}
	rec, err := recon.NewFileRecord(f, byHash)
	if err != nil {
		tb.Fatal(err)
	}
	return rec, byHash
}

// reconFixture is a Server answering reconstructions of one file, with a frozen clock so that
// signed URLs are reproducible.
type reconFixture struct {
	srv    *Server
	signer *urlsign.Signer
	rec    *recon.FileRecord
	meta   fakeMeta
	now    *time.Time // the signer's clock
}

func newReconFixture(tb testing.TB, rec *recon.FileRecord, layouts map[hash.Hash]*xorb.Layout, o Options) *reconFixture {
	tb.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	signer, err := urlsign.New(urlsign.Options{BaseURL: "https://edge.invalid", Key: bytes.Repeat([]byte{9}, urlsign.MinKeyLen),
		Now: func() time.Time { return now }})
	if err != nil {
		tb.Fatal(err)
	}
	meta := fakeMeta{layouts: layouts, files: map[hash.Hash]*recon.FileRecord{rec.Hash: rec}}
	o.Meta, o.Bytes, o.Tokens, o.Signer = meta, noBytes{}, readTokens{}, signer
	o.Origin, _ = url.Parse("http://127.0.0.1:1")
	if o.Permits == 0 {
		o.Permits = 8
	}
	srv, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return &reconFixture{srv: srv, signer: signer, rec: rec, meta: meta, now: &now}
}

// want is the v2 answer recon writes for rng of the file, serially, with fresh planning and
// URLs expiring at the signer's expiry rounded up to DefaultURLExpiryRound.
func (fx *reconFixture) want(tb testing.TB, rng *httprange.Range) []byte {
	return fx.wantVersion(tb, rng, true)
}

func (fx *reconFixture) wantVersion(tb testing.TB, rng *httprange.Range, v2 bool) []byte {
	tb.Helper()
	a, err := recon.Plan(fx.rec, rng, func(h hash.Hash) (*xorb.Layout, error) { return fx.meta.layouts[h], nil })
	if err != nil {
		tb.Fatal(err)
	}
	var b bytes.Buffer
	s := fx.signer.Bind("s", fx.rec.Hash, fx.signer.Expiry(DefaultURLExpiryRound))
	if v2 {
		err = recon.WriteV2(&b, a, s)
	} else {
		err = recon.WriteV1(&b, a, s)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func (fx *reconFixture) get(tb testing.TB, rangeHdr string) (int, []byte) {
	tb.Helper()
	w := fx.do(tb, "v2", rangeHdr)
	return w.Code, w.Body.Bytes()
}

// do asks for the file's reconstruction in version ("v1", "v2") with an optional Range.
func (fx *reconFixture) do(tb testing.TB, version, rangeHdr string) *httptest.ResponseRecorder {
	tb.Helper()
	req := httptest.NewRequest(http.MethodGet, "/"+version+"/reconstructions/"+fx.rec.Hash.String(), nil)
	if rangeHdr != "" {
		req.Header.Set("Range", rangeHdr)
	}
	w := httptest.NewRecorder()
	fx.srv.Handler().ServeHTTP(w, req)
	return w
}

func (fx *reconFixture) planCounts(tb testing.TB) (hits, misses float64) {
	tb.Helper()
	var m dto.Metric
	for _, r := range []struct {
		label string
		v     *float64
	}{{"hit", &hits}, {"miss", &misses}} {
		if err := fx.srv.m.planCache.WithLabelValues(r.label).Write(&m); err != nil {
			tb.Fatal(err)
		}
		*r.v = m.GetCounter().GetValue()
	}
	return hits, misses
}

// noBytes is an XorbBytes for servers that only answer reconstructions.
type noBytes struct{}

func (noBytes) ReadRange(_ context.Context, l *xorb.Layout, _, _ int64) (*datacache.Range, error) {
	return nil, fmt.Errorf("noBytes: no bytes of %s", l.Hash)
}

// TestReconPlanCache checks that whole-file answers (no Range, or a Range of every byte) come
// from the plan cache after the first, byte-identical to a fresh plan, that other ranges are
// planned afresh, and that the parallel writer gives the same bytes.
func TestReconPlanCache(t *testing.T) {
	rec, layouts := worstFile(t, 20, 64, 400)
	size := rec.Size
	mid := httprange.Range{Kind: httprange.Closed, Start: size / 3, End: size/2 + 7}
	steps := []struct {
		name           string
		hdr            string
		rng            *httprange.Range
		hits, misses   float64 // counters after the step
		status         int
		compareToFresh bool
	}{
		{"whole, first: planned and cached", "", nil, 0, 1, 200, true},
		{"whole again: cached", "", nil, 1, 1, 200, true},
		{"bytes=0-: the whole file, cached", "bytes=0-", nil, 2, 1, 200, true},
		{"closed range of every byte: cached", fmt.Sprintf("bytes=0-%d", size-1), nil, 3, 1, 200, true},
		{"inner range: planned, not cached", fmt.Sprintf("bytes=%d-%d", mid.Start, mid.End), &mid, 3, 1, 200, true},
		{"range past EOF: 416, not cached", fmt.Sprintf("bytes=%d-", size), nil, 3, 1, 416, false},
	}
	for _, parallelAt := range []int{1 << 30, 2} {
		t.Run(fmt.Sprintf("parallelAt=%d", parallelAt), func(t *testing.T) {
			// Encoded answers off: whole-file answers would not consult the plans.
			fx := newReconFixture(t, rec, layouts, Options{ParallelAt: parallelAt, AnswerCacheBytes: -1})
			for _, st := range steps {
				code, body := fx.get(t, st.hdr)
				if code != st.status {
					t.Fatalf("%s: status %d, want %d: %.200s", st.name, code, st.status, body)
				}
				if st.compareToFresh {
					if want := fx.want(t, st.rng); !bytes.Equal(body, want) {
						t.Fatalf("%s: answer of %d bytes differs from a fresh plan's %d bytes", st.name, len(body), len(want))
					}
				}
				if h, m := fx.planCounts(t); h != st.hits || m != st.misses {
					t.Fatalf("%s: plan cache hits %v misses %v, want %v %v", st.name, h, m, st.hits, st.misses)
				}
			}
		})
	}
}

// wholePlan is rec's whole-file plan.
func wholePlan(tb testing.TB, rec *recon.FileRecord) *recon.Answer {
	tb.Helper()
	a, err := recon.Plan(rec, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// wholeTerms is the encoding of rec's whole-file terms.
func wholeTerms(tb testing.TB, rec *recon.FileRecord) *recon.Terms {
	tb.Helper()
	t, err := recon.EncodeTerms(wholePlan(tb, rec))
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func TestPlanCache(t *testing.T) {
	recA, _ := worstFile(t, 4, 32, 40)
	recB, _ := worstFile(t, 4, 32, 48)
	a, b := wholePlan(t, recA), wholePlan(t, recB)
	costA, costB := entryOverhead+planCost(a), entryOverhead+planCost(b)
	refetchedA := *recA // same file, another record (the metadata cache refetched it)

	tests := []struct {
		name   string
		max    int64
		put    []*recon.FileRecord
		lookup *recon.FileRecord
		want   *recon.Answer // nil: miss
	}{
		{"empty", 1 << 20, nil, recA, nil},
		{"stored", 1 << 20, []*recon.FileRecord{recA}, recA, a},
		{"other file", 1 << 20, []*recon.FileRecord{recA}, recB, nil},
		{"same hash, other record", 1 << 20, []*recon.FileRecord{recA}, &refetchedA, nil},
		{"both fit", costA + costB, []*recon.FileRecord{recA, recB}, recA, a},
		{"LRU evicted", costA + costB - 1, []*recon.FileRecord{recA, recB}, recA, nil},
		{"newest kept", costA + costB - 1, []*recon.FileRecord{recA, recB}, recB, b},
		{"larger than the budget", costA - 1, []*recon.FileRecord{recA}, recA, nil},
		{"disabled", -1, []*recon.FileRecord{recA}, recA, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newAnswerCache(tc.max, -1, newMetrics(nil))
			for _, r := range tc.put {
				c.putPlan(r, map[*recon.FileRecord]*recon.Answer{recA: a, recB: b}[r])
			}
			got, ok := c.plan(tc.lookup)
			if ok != (tc.want != nil) || got != tc.want {
				t.Fatalf("get: %p %v, want %p", got, ok, tc.want)
			}
			if c.used > max(tc.max, 0) {
				t.Fatalf("used %d > budget %d", c.used, tc.max)
			}
		})
	}
}

// BenchmarkReconWorst is the handler's cost for the 100,000-term worst-case file (1,000 xorbs
// of 1,024 chunks), writing to a discarding ResponseWriter: whole file with and without the
// plan cache, from the answer cache, and random ranges with and without cached terms.
func BenchmarkReconWorst(b *testing.B) {
	rec, layouts := worstFile(b, 1000, 1024, 100000)
	for _, bc := range []struct {
		name      string
		planMax   int64
		answerMax int64
		ranged    bool
		parallel  int
	}{
		{"whole/answer", 0, 0, false, 1 << 30},
		{"whole/cached", 0, -1, false, 1 << 30},
		{"whole/uncached", -1, -1, false, 1 << 30},
		{"whole/cached/parallel", 0, -1, false, 1},
		{"range/terms", 0, 0, true, 1 << 30},
		{"range", 0, -1, true, 1 << 30},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fx := newReconFixture(b, rec, layouts, Options{PlanCacheBytes: bc.planMax, AnswerCacheBytes: bc.answerMax,
				ParallelAt: bc.parallel})
			h := fx.srv.Handler()
			var hdrs []string
			for i := range 64 {
				a := rec.Size * uint64(i) / 64
				hdrs = append(hdrs, fmt.Sprintf("bytes=%d-%d", a, a+rec.Size/4))
			}
			w := &discardWriter{h: http.Header{}}
			// Warm caches: one request of each kind before timing.
			for _, hdr := range []string{"", hdrs[0]} {
				req := httptest.NewRequest(http.MethodGet, "/v2/reconstructions/"+rec.Hash.String(), nil)
				if hdr != "" {
					req.Header.Set("Range", hdr)
				}
				h.ServeHTTP(w, req)
			}
			b.ReportAllocs()
			i := 0
			start := testenv.CPUTime()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/v2/reconstructions/"+rec.Hash.String(), nil)
				if bc.ranged {
					req.Header.Set("Range", hdrs[i%len(hdrs)])
					i++
				}
				w.status, w.n = 0, 0
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK || w.n == 0 {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
			testenv.ReportCPU(b, start)
		})
	}
}
