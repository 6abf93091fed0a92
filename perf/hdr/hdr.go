// Package hdr is a high-dynamic-range histogram of durations for the replay tool: log-linear
// buckets with 1,024 sub-buckets per power of two, so every recorded value is kept to within
// 0.1 % (three significant digits) from 1 µs to 2^40 µs (12 days), in fixed memory (about 250 KiB
// per histogram) and O(1) per record. Values are microseconds.
package hdr

import (
	"math"
	"math/bits"
	"time"
)

const (
	subBits   = 10
	sub       = 1 << subBits // sub-buckets per power of two
	maxShift  = 40 - subBits
	nBuckets  = 2*sub + maxShift*sub
	maxMicros = 1<<40 - 1
)

// Histogram counts durations. The zero value is not ready: use New. Not safe for concurrent use.
type Histogram struct {
	counts   []uint64
	n        uint64
	sum      float64 // µs
	min, max int64   // µs
	overflow uint64  // values above the range, recorded as the maximum
}

// New returns an empty histogram.
func New() *Histogram { return &Histogram{counts: make([]uint64, nBuckets), min: math.MaxInt64} }

// index returns the bucket of v (0 <= v <= maxMicros).
func index(v int64) int {
	if v < 2*sub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1 // v>>shift is in [sub, 2*sub)
	return 2*sub + (shift-1)*sub + int(v>>shift) - sub
}

// lowest returns the smallest value of bucket i; highest the largest.
func lowest(i int) int64 {
	if i < 2*sub {
		return int64(i)
	}
	shift := (i-2*sub)/sub + 1
	return int64((i-2*sub)%sub+sub) << shift
}

func highest(i int) int64 {
	if i+1 >= nBuckets {
		return maxMicros
	}
	return lowest(i+1) - 1
}

// Record adds one duration (negative durations count as 0).
func (h *Histogram) Record(d time.Duration) {
	v := d.Microseconds()
	if v < 0 {
		v = 0
	}
	if v > maxMicros {
		v = maxMicros
		h.overflow++
	}
	h.counts[index(v)]++
	h.n++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

// Merge adds the counts of o into h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.overflow += o.overflow
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Overflow counts values above 2^40 µs (recorded as that).
func (h *Histogram) Overflow() uint64 { return h.overflow }

// Min, Max and Mean of the recorded values; 0 when empty.
func (h *Histogram) Min() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.min) * time.Microsecond
}

func (h *Histogram) Max() time.Duration { return time.Duration(h.max) * time.Microsecond }

func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum/float64(h.n)) * time.Microsecond
}

// Quantile returns the value at quantile q in [0, 1]: the highest value of the bucket holding
// the ceil(q·n)-th smallest value (never below the true value, at most 0.1 % above), clamped
// to the exact maximum. 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(highest(i), h.max)) * time.Microsecond
		}
	}
	return h.Max()
}

// Point is one step of a cumulative distribution: the fraction of values at or below Value.
type Point struct {
	Value    time.Duration
	Fraction float64
}

// CDF returns the cumulative distribution at the upper edge of every non-empty bucket.
func (h *Histogram) CDF() []Point {
	var out []Point
	var seen uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		out = append(out, Point{time.Duration(min(highest(i), h.max)) * time.Microsecond, float64(seen) / float64(h.n)})
	}
	return out
}
