package datacache

import (
	"fmt"
	"sort"

	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// span is a run of whole chunks of one xorb: chunks [a, b) and their stored bytes [start, end).
type span struct {
	a, b       uint32
	start, end int64
}

func (s span) len() int64 { return s.end - s.start }

// chunkStart is the stored offset where chunk i begins (i < NumChunks, or i == NumChunks for the
// end of the chunk area).
func chunkStart(l *xorb.Layout, i int) int64 {
	if i == 0 {
		return 0
	}
	return int64(l.StoredEnds[i-1])
}

// firstStartAtOrAfter is the first chunk index whose start offset is >= off, or NumChunks.
func firstStartAtOrAfter(l *xorb.Layout, off int64) int {
	return sort.Search(l.NumChunks(), func(i int) bool { return chunkStart(l, i) >= off })
}

// checkLayout rejects a layout whose slices disagree, so that no index below can go out of
// bounds. Callers promise l.Verify() passed; this is the cheap part of that promise.
func checkLayout(l *xorb.Layout) error {
	n := l.NumChunks()
	if n == 0 || len(l.StoredEnds) != n || len(l.RawEnds) != n {
		return fmt.Errorf("%w: inconsistent layout of xorb %s", ErrBadRange, l.Hash)
	}
	return nil
}

// requestSpan maps the stored byte range [start, end) to its chunks. Both ends must be chunk
// boundaries inside the chunk area; anything else wraps ErrBadRange.
func requestSpan(l *xorb.Layout, start, end int64) (span, error) {
	if err := checkLayout(l); err != nil {
		return span{}, err
	}
	n := l.NumChunks()
	if start < 0 || end <= start || end > int64(l.ChunkAreaLen()) {
		return span{}, fmt.Errorf("%w: [%d,%d) of xorb %s with %d chunk bytes", ErrBadRange, start, end, l.Hash, l.ChunkAreaLen())
	}
	a := firstStartAtOrAfter(l, start)
	// b-1 is the chunk whose end is end: the first chunk ending at or after end.
	last := sort.Search(n, func(i int) bool { return int64(l.StoredEnds[i]) >= end })
	if a >= n || chunkStart(l, a) != start || last >= n || int64(l.StoredEnds[last]) != end || last < a {
		return span{}, fmt.Errorf("%w: [%d,%d) is not on chunk boundaries of xorb %s", ErrBadRange, start, end, l.Hash)
	}
	return span{a: uint32(a), b: uint32(last) + 1, start: start, end: end}, nil
}

// segmentSpan is segment k of l for segment size size: the chunks whose first stored byte lies
// in [k*size, (k+1)*size). Segments depend only on the layout and size, so every request (and
// every edge process with the same size) agrees on them; a segment is never cut inside a chunk,
// so it can be verified on its own. It may be empty when one chunk is longer than size.
func segmentSpan(l *xorb.Layout, k, size int64) span {
	a := firstStartAtOrAfter(l, k*size)
	b := firstStartAtOrAfter(l, (k+1)*size)
	return span{a: uint32(a), b: uint32(b), start: chunkStart(l, a), end: chunkStart(l, b)}
}

// segments returns the non-empty segments holding the chunks of r, in order.
func segments(l *xorb.Layout, r span, size int64) []span {
	first := r.start / size
	last := chunkStart(l, int(r.b)-1) / size
	out := make([]span, 0, last-first+1)
	for k := first; k <= last; k++ {
		if s := segmentSpan(l, k, size); s.a < s.b {
			out = append(out, s)
		}
	}
	return out
}
