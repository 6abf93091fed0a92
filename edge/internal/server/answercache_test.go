package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/promtest"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func (fx *reconFixture) answerCount(tb testing.TB, part, result string) float64 {
	tb.Helper()
	return promtest.Counter(tb, fx.srv.m.answerCache.WithLabelValues(part, result))
}

// checkURLs decodes a v2 answer and checks that every entry's URL verifies (at the signer's
// clock) and covers every byte range the entry lists.
func (fx *reconFixture) checkURLs(tb testing.TB, body []byte) {
	tb.Helper()
	var ans wire.QueryReconstructionResponseV2
	if err := json.Unmarshal(body, &ans); err != nil {
		tb.Fatal(err)
	}
	for x, entries := range ans.Xorbs {
		for _, e := range entries {
			u, err := url.Parse(e.URL)
			if err != nil {
				tb.Fatal(err)
			}
			g, err := fx.signer.Verify(u.Path, u.RawQuery, *fx.now)
			if err != nil || g.Xorb != x || g.File != fx.rec.Hash || g.Scope != "s" {
				tb.Fatalf("xorb %s: URL %s: %v (grant %+v, want file %s in scope s)", x, e.URL, err, g, fx.rec.Hash)
			}
			signed := g.Ranges
			var want []httprange.Range
			for _, r := range e.Ranges {
				want = append(want, httprange.Range{Kind: httprange.Closed, Start: r.Bytes.Start, End: r.Bytes.End})
			}
			if !urlsign.Allowed(signed, want) {
				tb.Fatalf("xorb %s: URL signed for %v does not cover %v", x, signed, want)
			}
		}
	}
}

// TestReconAnswerCache follows whole-file and ranged answers through the answer cache: every
// answer is byte-identical to a fresh plan and encoding with the same (rounded) URL expiry, the
// cache serves whole answers within one expiry interval and re-signs in the next, a refetched
// record misses, and a file the metadata cache no longer returns is not served from the cache.
func TestReconAnswerCache(t *testing.T) {
	rec, layouts := worstFile(t, 20, 64, rangedTermsAt+100)
	fx := newReconFixture(t, rec, layouts, Options{})
	*fx.now = fx.now.Add(10 * time.Second) // off the minute: expiries are rounded up
	type counts struct{ answerHit, answerMiss, termsHit, termsMiss float64 }
	check := func(step string, version string, hdr string, rng *httprange.Range, want counts) []byte {
		t.Helper()
		w := fx.do(t, version, hdr)
		if w.Code != 200 {
			t.Fatalf("%s: status %d: %.200s", step, w.Code, w.Body.Bytes())
		}
		body := w.Body.Bytes()
		if exp := fx.wantVersion(t, rng, version == "v2"); !bytes.Equal(body, exp) {
			t.Fatalf("%s: answer of %d bytes differs from a fresh one of %d bytes", step, len(body), len(exp))
		}
		if cl := w.Header().Get("Content-Length"); rng == nil && cl != strconv.Itoa(len(body)) {
			t.Fatalf("%s: Content-Length %q for %d bytes", step, cl, len(body))
		}
		if version == "v2" {
			fx.checkURLs(t, body)
		}
		got := counts{fx.answerCount(t, "answer", "hit"), fx.answerCount(t, "answer", "miss"),
			fx.answerCount(t, "terms", "hit"), fx.answerCount(t, "terms", "miss")}
		if got != want {
			t.Fatalf("%s: counters %+v, want %+v", step, got, want)
		}
		return body
	}
	first := check("whole, first", "v2", "", nil, counts{0, 1, 0, 0})
	check("whole again", "v2", "", nil, counts{1, 1, 0, 0})
	check("every byte as a range", "v2", "bytes=0-", nil, counts{2, 1, 0, 0})
	check("v1: own rest, same terms", "v1", "", nil, counts{2, 2, 0, 0})
	check("v1 again", "v1", "", nil, counts{3, 2, 0, 0})
	r := rand.New(rand.NewPCG(1, 2))
	n := 0.0
	for i := range 20 {
		s := r.Uint64N(rec.Size)
		rng := &httprange.Range{Kind: httprange.Closed, Start: s, End: s + r.Uint64N(rec.Size/uint64(1+i%4))}
		version := []string{"v1", "v2"}[i%2]
		n++
		check(fmt.Sprintf("range %v %s", rng, version), version, "bytes="+strconv.FormatUint(rng.Start, 10)+"-"+strconv.FormatUint(rng.End, 10), rng,
			counts{3, 2, n, 0})
	}
	*fx.now = fx.now.Add(time.Minute)
	next := check("next minute: re-signed", "v2", "", nil, counts{3, 3, n, 0})
	if bytes.Equal(first, next) {
		t.Fatal("answers a minute apart are identical: expiry not advanced")
	}
	check("next minute again", "v2", "", nil, counts{4, 3, n, 0})

	refetched := *rec
	fx.meta.files[rec.Hash] = &refetched
	check("refetched record: terms and answer encoded again", "v2", "", nil, counts{4, 4, n, 0})
	fx.rec = &refetched
	check("range of the refetched record", "v2", "bytes=100-", &httprange.Range{Kind: httprange.Open, Start: 100}, counts{4, 4, n + 1, 0})

	delete(fx.meta.files, rec.Hash)
	if w := fx.do(t, "v2", ""); w.Code == 200 {
		t.Fatal("file no longer visible: answered 200 from the cache")
	}
}

func TestReconRangedTermsOfLargeFile(t *testing.T) {
	rec, layouts := worstFile(t, 20, 64, rangedTermsAt)
	fx := newReconFixture(t, rec, layouts, Options{})
	rng := &httprange.Range{Kind: httprange.Closed, Start: 1000, End: rec.Size / 2}
	hdr := fmt.Sprintf("bytes=%d-%d", rng.Start, rng.End)
	for i, want := range [][2]float64{{0, 1}, {1, 1}} {
		w := fx.do(t, "v2", hdr)
		if !bytes.Equal(w.Body.Bytes(), fx.want(t, rng)) {
			t.Fatalf("request %d: answer differs from a fresh one", i)
		}
		if h, m := fx.answerCount(t, "terms", "hit"), fx.answerCount(t, "terms", "miss"); h != want[0] || m != want[1] {
			t.Fatalf("request %d: terms hits %v misses %v, want %v", i, h, m, want)
		}
	}
	small, slayouts := worstFile(t, 20, 64, rangedTermsAt-1)
	fx = newReconFixture(t, small, slayouts, Options{})
	fx.do(t, "v2", hdr)
	if h, m := fx.answerCount(t, "terms", "hit"), fx.answerCount(t, "terms", "miss"); h+m != 0 || fx.srv.answers.used != 0 {
		t.Fatalf("small file, ranged: terms hits %v misses %v, %d bytes cached; want nothing", h, m, fx.srv.answers.used)
	}
}

func TestAnswerCache(t *testing.T) {
	recA, _ := worstFile(t, 4, 32, 40)
	recB, _ := worstFile(t, 4, 32, 48)
	tA, tB := wholeTerms(t, recA), wholeTerms(t, recB)
	costA, costB := entryOverhead+tA.Size(), entryOverhead+tB.Size()
	restA := make([]byte, 100)
	refetchedA := *recA

	type op struct {
		rec   *recon.FileRecord
		rest  bool   // putRest of restA after the terms
		scope string // its scope
		exp   int64  // its expiry
	}
	tests := []struct {
		name     string
		max      int64
		ops      []op
		lookup   *recon.FileRecord
		scope    string
		exp      int64
		terms    *recon.Terms // want
		restHits bool
	}{
		{"empty", 1 << 20, nil, recA, "a", 1, nil, false},
		{"terms only", 1 << 20, []op{{recA, false, "", 0}}, recA, "a", 1, tA, false},
		{"terms and rest", 1 << 20, []op{{recA, true, "a", 1}}, recA, "a", 1, tA, true},
		{"rest of another expiry", 1 << 20, []op{{recA, true, "a", 1}}, recA, "a", 2, tA, false},
		{"rest of another scope", 1 << 20, []op{{recA, true, "a", 1}}, recA, "b", 1, tA, false},
		{"older rest does not replace a newer", 1 << 20, []op{{recA, true, "a", 2}, {recA, true, "a", 1}}, recA, "a", 2, tA, true},
		{"another scope's rest replaces", 1 << 20, []op{{recA, true, "a", 2}, {recA, true, "b", 1}}, recA, "b", 1, tA, true},
		{"other file", 1 << 20, []op{{recA, true, "a", 1}}, recB, "a", 1, nil, false},
		{"same hash, other record", 1 << 20, []op{{recA, true, "a", 1}}, &refetchedA, "a", 1, nil, false},
		{"both fit", costA + costB, []op{{recA, false, "", 0}, {recB, false, "", 0}}, recA, "a", 1, tA, false},
		{"LRU evicted", costA + costB - 1, []op{{recA, false, "", 0}, {recB, false, "", 0}}, recA, "a", 1, nil, false},
		{"newest kept", costA + costB - 1, []op{{recA, false, "", 0}, {recB, false, "", 0}}, recB, "a", 1, tB, false},
		{"rest over budget not stored", costA + 50, []op{{recA, true, "a", 1}}, recA, "a", 1, tA, false},
		{"larger than the budget", costA - 1, []op{{recA, false, "", 0}}, recA, "a", 1, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newAnswerCache(-1, tc.max, newMetrics(nil))
			for _, o := range tc.ops {
				c.putTerms(o.rec, map[*recon.FileRecord]*recon.Terms{recA: tA, recB: tB}[o.rec])
				if o.rest {
					c.putRest(o.rec, true, o.scope, o.exp, restA)
				}
			}
			got, rest := c.lookup(tc.lookup, true, tc.scope, tc.exp)
			if got != tc.terms || (rest != nil) != tc.restHits {
				t.Fatalf("lookup: terms %p rest %v, want %p %v", got, rest != nil, tc.terms, tc.restHits)
			}
			if _, v1 := c.lookup(tc.lookup, false, tc.scope, tc.exp); v1 != nil {
				t.Fatal("v1 lookup found the v2 rest")
			}
			if c.used > max(tc.max, 0) {
				t.Fatalf("used %d > budget %d", c.used, tc.max)
			}
		})
	}
}

// TestReconAnswerCacheSkipsHugeFiles: a file whose terms would take more than half the
// budget is answered without the cache, correctly.
func TestReconAnswerCacheSkipsHugeFiles(t *testing.T) {
	rec, layouts := worstFile(t, 20, 64, rangedTermsAt+100)
	budget := int64(len(rec.Terms)) * termBytes * 2 // plans off: the whole budget
	fx := newReconFixture(t, rec, layouts, Options{PlanCacheBytes: -1, AnswerCacheBytes: budget})
	fx2 := newReconFixture(t, rec, layouts, Options{PlanCacheBytes: -1, AnswerCacheBytes: budget - 1})
	for _, tc := range []struct {
		fx     *reconFixture
		cached bool
	}{{fx, true}, {fx2, false}} {
		for range 2 {
			if code, body := tc.fx.get(t, ""); code != 200 || !bytes.Equal(body, tc.fx.want(t, nil)) {
				t.Fatalf("budget %d: status %d or answer differs", tc.fx.srv.answers.max, code)
			}
		}
		if got := tc.fx.answerCount(t, "answer", "hit") == 1 && tc.fx.srv.answers.used > 0; got != tc.cached {
			t.Fatalf("budget %d: cached %v, want %v", tc.fx.srv.answers.max, got, tc.cached)
		}
	}
}

// TestReconEmptyFile: the empty file (all-zero hash) is answered in every scope, from the
// answer cache after the first request; a range past its end is 416.
func TestReconEmptyFile(t *testing.T) {
	rec, layouts := worstFile(t, 2, 32, 4)
	fx := newReconFixture(t, rec, layouts, Options{})
	empty, err := recon.Plan(&recon.FileRecord{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := recon.WriteV2(&want, empty, fx.signer.Bind("s", hash.Zero, fx.signer.Expiry(0))); err != nil {
		t.Fatal(err)
	}
	fx.rec = &recon.FileRecord{} // fx.do asks for fx.rec.Hash: the zero hash
	for i, tc := range []struct {
		hdr    string
		status int
	}{{"", 200}, {"", 200}, {"bytes=0-", 200}, {"bytes=5-", 416}} {
		w := fx.do(t, "v2", tc.hdr)
		if w.Code != tc.status {
			t.Fatalf("request %d (%q): status %d, want %d", i, tc.hdr, w.Code, tc.status)
		}
		if tc.status == 200 && !bytes.Equal(w.Body.Bytes(), want.Bytes()) {
			t.Fatalf("request %d: %s, want %s", i, w.Body.Bytes(), want.Bytes())
		}
	}
	if h := fx.answerCount(t, "answer", "hit"); h != 1 {
		t.Fatalf("answer cache hits %v, want 1 (the second whole-file request)", h)
	}
}

// TestReconAnswerEncodedOnce: concurrent whole-file requests that all miss the answer cache (a
// new file, or the first requests of a new URL expiry interval) encode the answer once, and
// every one of them gets the same bytes as a fresh encoding.
func TestReconAnswerEncodedOnce(t *testing.T) {
	const clients = 16
	fx, barrier := missTogether(t, clients)
	for round := range 3 {
		want := fx.want(t, nil)
		before := promtest.Counter(t, fx.srv.m.answerEncodes)
		codes, bodies := fx.together(t, barrier, make([]string, clients))
		for i := range clients {
			if codes[i] != 200 || !bytes.Equal(bodies[i], want) {
				t.Fatalf("round %d, client %d: status %d, answer differs from a fresh encoding: %t", round, i, codes[i], !bytes.Equal(bodies[i], want))
			}
		}
		if got := promtest.Counter(t, fx.srv.m.answerEncodes) - before; got != 1 {
			t.Fatalf("round %d: %d concurrent misses encoded the answer %v times, want once", round, clients, got)
		}
		*fx.now = fx.now.Add(time.Minute) // the next round starts a new expiry interval
	}
}

// TestReconTermsEncodedOnce: concurrent requests that all miss a large file's cached terms —
// ranged ones with different ranges, and a whole-file one — encode the terms once, and every
// answer is the same as a fresh encoding of its range.
func TestReconTermsEncodedOnce(t *testing.T) {
	const clients = 12
	fx, barrier := missTogether(t, clients)
	before := promtest.Counter(t, fx.srv.m.termsEncodes)
	ranges := make([]*httprange.Range, clients) // nil: the whole file
	hdrs := make([]string, clients)
	for i := 1; i < clients; i++ {
		start := uint64(i) * fx.rec.Size / (2 * clients)
		ranges[i] = &httprange.Range{Kind: httprange.Closed, Start: start, End: start + fx.rec.Size/3}
		hdrs[i] = fmt.Sprintf("bytes=%d-%d", ranges[i].Start, ranges[i].End)
	}
	codes, bodies := fx.together(t, barrier, hdrs)
	for i := range clients {
		if codes[i] != 200 || !bytes.Equal(bodies[i], fx.want(t, ranges[i])) {
			t.Fatalf("client %d (range %v): status %d, answer differs from a fresh encoding", i, ranges[i], codes[i])
		}
	}
	if got := promtest.Counter(t, fx.srv.m.termsEncodes) - before; got != 1 {
		t.Fatalf("%d concurrent misses encoded the file's terms %v times, want once", clients, got)
	}
}

// missTogether is a fixture of a large worst-shape file, with enough permits for clients
// concurrent requests, whose metadata lookups go on only once clients callers (see together)
// have arrived: their requests miss the answer cache together.
func missTogether(t *testing.T, clients int) (*reconFixture, *barrierMeta) {
	rec, layouts := worstFile(t, 20, 64, rangedTermsAt+100)
	fx := newReconFixture(t, rec, layouts, Options{Permits: clients})
	barrier := &barrierMeta{Metadata: fx.meta}
	fx.srv.o.Meta = barrier
	return fx, barrier
}

// together sends one v2 request per Range header of hdrs ("": the whole file) at once, released
// together by b, and returns their statuses and bodies.
func (fx *reconFixture) together(t *testing.T, b *barrierMeta, hdrs []string) ([]int, [][]byte) {
	b.arrive.Add(len(hdrs))
	var wg sync.WaitGroup
	codes := make([]int, len(hdrs))
	bodies := make([][]byte, len(hdrs))
	for i, hdr := range hdrs {
		wg.Go(func() {
			w := fx.do(t, "v2", hdr)
			codes[i], bodies[i] = w.Code, w.Body.Bytes()
		})
	}
	wg.Wait()
	return codes, bodies
}

// barrierMeta holds every File call until arrive reaches zero, so that the callers go on
// together.
type barrierMeta struct {
	Metadata
	arrive sync.WaitGroup
}

func (b *barrierMeta) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	b.arrive.Done()
	b.arrive.Wait()
	return b.Metadata.File(ctx, h, scope)
}

// TestAnswerCacheOneEntryPerRecord: a record's plan, terms and rests live in one entry under
// one budget (the sum of both), are evicted and replaced together, and a negative budget keeps
// nothing of its kind.
func TestAnswerCacheOneEntryPerRecord(t *testing.T) {
	recA, _ := worstFile(t, 4, 32, 40)
	recB, _ := worstFile(t, 4, 32, 48)
	refetchedA := *recA
	pA, pB := wholePlan(t, recA), wholePlan(t, recB)
	tA := wholeTerms(t, recA)
	rest := make([]byte, 100)
	fullA := entryOverhead + planCost(pA) + tA.Size() + int64(cap(rest))

	type op struct {
		rec         *recon.FileRecord
		terms, rest bool // putPlan, then putTerms when terms, then putRest when rest
	}
	tests := []struct {
		name                string
		planMax, answerMax  int64
		ops                 []op
		lookup              *recon.FileRecord
		wantPlan, wantTerms bool
		wantUsed            int64
	}{
		{"plan, terms and rest in one entry", fullA - 100, 100, []op{{recA, true, true}}, recA, true, true, fullA},
		{"budget is the sum", fullA - 101, 100, []op{{recA, true, true}}, recA, true, true, fullA - 100},
		{"evicted together", fullA, 0, []op{{recA, true, true}, {recB, false, false}}, recA, false, false,
			entryOverhead + planCost(pB)},
		{"refetched record replaces both", 1 << 20, 0, []op{{recA, true, true}, {&refetchedA, false, false}}, &refetchedA, true, false,
			entryOverhead + planCost(pA)},
		{"plans off", -1, 1 << 20, []op{{recA, true, true}}, recA, false, true, fullA - planCost(pA)},
		{"answers off", 1 << 20, -1, []op{{recA, true, true}}, recA, true, false, entryOverhead + planCost(pA)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics(nil)
			c := newAnswerCache(tc.planMax, tc.answerMax, m)
			for _, o := range tc.ops {
				p := map[*recon.FileRecord]*recon.Answer{recA: pA, &refetchedA: pA, recB: pB}[o.rec]
				c.putPlan(o.rec, p)
				if o.terms {
					c.putTerms(o.rec, tA)
				}
				if o.rest {
					c.putRest(o.rec, true, "s", 1, rest)
				}
			}
			_, gotPlan := c.plan(tc.lookup)
			terms, _ := c.lookup(tc.lookup, true, "s", 1)
			if gotPlan != tc.wantPlan || (terms != nil) != tc.wantTerms {
				t.Fatalf("plan %v terms %v, want %v %v", gotPlan, terms != nil, tc.wantPlan, tc.wantTerms)
			}
			if c.used != tc.wantUsed || c.used > c.max {
				t.Fatalf("used %d, want %d (budget %d)", c.used, tc.wantUsed, c.max)
			}
			var g dto.Metric
			if err := m.answerBytes.Write(&g); err != nil {
				t.Fatal(err)
			}
			if got, want := int64(g.GetGauge().GetValue()), c.used-c.planBytes; got != want || c.planBytes < 0 {
				t.Fatalf("answer bytes gauge %d, want %d (plans %d)", got, want, c.planBytes)
			}
		})
	}
}
