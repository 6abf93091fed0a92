package hdr

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	// Every value falls in a bucket whose bounds contain it and are within 0.1 % of each other.
	for _, v := range []int64{0, 1, 2047, 2048, 2049, 4095, 4096, 1 << 20, 123456789, maxMicros} {
		i := index(v)
		lo, hi := lowest(i), highest(i)
		if v < lo || v > hi || i >= nBuckets {
			t.Fatalf("value %d in bucket %d [%d, %d]", v, i, lo, hi)
		}
		if float64(hi-lo) > 0.001*float64(lo)+1 {
			t.Fatalf("bucket %d [%d, %d] is wider than 0.1 %%", i, lo, hi)
		}
	}
	for i := 1; i < nBuckets; i++ {
		if lowest(i) != highest(i-1)+1 {
			t.Fatalf("gap between buckets %d and %d", i-1, i)
		}
	}
}

func TestQuantilesMatchSorting(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := New()
	var vs []int64
	for range 100000 {
		v := int64(r.ExpFloat64() * 20000) // µs, long tail
		vs = append(vs, v)
		h.Record(time.Duration(v) * time.Microsecond)
	}
	slices.Sort(vs)
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
		rank := max(1, int(float64(len(vs))*q+0.999999))
		exact := vs[rank-1]
		got := h.Quantile(q).Microseconds()
		if got < exact || float64(got-exact) > 0.001*float64(exact)+1 {
			t.Errorf("p%v = %d µs, exact %d", q*100, got, exact)
		}
	}
	if h.Count() != 100000 || h.Max().Microseconds() != vs[len(vs)-1] || h.Min().Microseconds() != vs[0] {
		t.Errorf("count %d min %v max %v", h.Count(), h.Min(), h.Max())
	}
	cdf := h.CDF()
	if cdf[len(cdf)-1].Fraction != 1 || !slices.IsSortedFunc(cdf, func(a, b Point) int { return int(a.Value - b.Value) }) {
		t.Error("CDF does not end at 1 or is not sorted")
	}
	o := New()
	o.Record(time.Hour * 24 * 365 * 100)
	o.Record(-time.Second)
	h.Merge(o)
	if h.Count() != 100002 || h.Overflow() != 1 || h.Min() != 0 {
		t.Errorf("after merge: count %d overflow %d min %v", h.Count(), h.Overflow(), h.Min())
	}
	if New().Quantile(0.5) != 0 || New().Mean() != 0 {
		t.Error("empty histogram")
	}
}
