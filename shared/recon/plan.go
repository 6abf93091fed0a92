package recon

import (
	"fmt"
	"slices"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// ChunkRange is a half-open chunk index range [Start, End) inside one xorb.
type ChunkRange struct {
	Start, End uint32
}

// XorbFetch lists the merged fetch ranges of one xorb: Chunks[i] is stored at bytes Bytes[i]
// (closed, headers included). Ranges are sorted by chunk start, disjoint and non-adjacent.
type XorbFetch struct {
	Hash   hash.Hash
	Chunks []ChunkRange
	Bytes  []ByteRange
}

// Answer is a planned reconstruction: what the v1/v2 JSON says, before URLs are signed.
//
// Terms are read with Len and Term; Xorbs is in first-appearance order of the xorbs in the
// emitted terms, so the same (record, range) always gives the same Answer. An Answer aliases the
// record it was planned from and is immutable; it is safe for concurrent reads.
type Answer struct {
	// Offset is offset_into_first_range: bytes to drop from the first term's output.
	Offset uint64
	// Xorbs holds the fetch ranges, one element per distinct xorb of the emitted terms, in the
	// order of each xorb's first term.
	Xorbs []XorbFetch

	terms      []Term  // the record's terms from the first to the last emitted one
	first      int     // the record's index of terms[0]
	whole      bool    // planned without a range: every term untrimmed, offset 0
	head, tail Term    // terms[0] and terms[len-1] after trimming
	xorb       []int32 // xorb[i] is the record's xorb number of term i (aliases the record index)
	remap      []int32 // remap[x] is the index in Xorbs of the record's xorb number x, or -1
}

// term returns emitted term i like Term, without copying it.
func (a *Answer) term(i int) *Term {
	switch i {
	case 0:
		return &a.head
	case len(a.terms) - 1:
		return &a.tail
	}
	return &a.terms[i]
}

// fetchIndex is FetchIndex as an int32.
func (a *Answer) fetchIndex(i int) int32 { return a.remap[a.xorb[i]] }

// Len is the number of emitted terms.
func (a *Answer) Len() int { return len(a.terms) }

// Term returns emitted term i (0 <= i < Len()): the record's term, narrowed to the chunks the
// range needs, with RawBytes and the byte range of exactly those chunks.
func (a *Answer) Term(i int) Term {
	switch i {
	case 0:
		return a.head
	case len(a.terms) - 1:
		return a.tail
	}
	return a.terms[i]
}

// FetchIndex returns the index in Xorbs of emitted term i's xorb.
func (a *Answer) FetchIndex(i int) int { return int(a.fetchIndex(i)) }

// NumRanges is the total number of merged fetch ranges over all xorbs.
func (a *Answer) NumRanges() int {
	n := 0
	for i := range a.Xorbs {
		n += len(a.Xorbs[i].Chunks)
	}
	return n
}

// LayoutFunc returns the layout of a xorb. Plan calls it only to trim the first and last emitted
// terms, at most twice per call (once when both are in the same xorb).
type LayoutFunc func(hash.Hash) (*xorb.Layout, error)

// Plan computes the answer for the bytes rng selects of f (nil: the whole file), following
// docs/protocol.md §9:
//
//   - A range that starts at or past the end of a non-empty file fails with an error wrapping
//     ErrRangeNotSatisfiable (416); an end past EOF is clamped. On an empty file a range starting
//     at 0 (and any suffix range) gives the empty answer, others are not satisfiable.
//   - Whole terms outside the range are skipped; the first and last emitted terms lose the chunks
//     that hold no requested byte, which needs their xorbs' layouts (layout is not called when no
//     trimming is needed, e.g. for whole-file answers).
//   - Fetch ranges are merged per xorb when they overlap or touch.
//
// Errors from layout are returned wrapped; a layout that disagrees with the record gives an
// error wrapping ErrTermMismatch. f must satisfy the record invariants (records from
// UnmarshalFileRecord or NewFileRecord do).
func Plan(f *FileRecord, rng *httprange.Range, layout LayoutFunc) (*Answer, error) {
	if len(f.Terms) == 0 || f.Size == 0 {
		if rng == nil || emptyOK(rng) {
			return &Answer{whole: rng == nil}, nil
		}
		return nil, fmt.Errorf("file %s of 0 bytes, range %s: %w", f.Hash, rng, ErrRangeNotSatisfiable)
	}
	ix := f.index()
	if rng == nil {
		a := &Answer{terms: f.Terms, head: f.Terms[0], tail: f.Terms[len(f.Terms)-1], xorb: ix.xorb, whole: true}
		a.merge(ix.xorbs)
		return a, nil
	}
	br, err := rng.Resolve(f.Size)
	if err != nil {
		return nil, fmt.Errorf("file %s of %d bytes, range %s: %w: %w", f.Hash, f.Size, rng, ErrRangeNotSatisfiable, err)
	}
	start, end := br.Start, br.End+1 // half-open [start, end), start < end <= Size

	// The first term that holds byte start and the last that holds byte end-1.
	i, pos, okI := ix.find(f.Terms, start, true)
	j, posJ, okJ := ix.find(f.Terms, end, false)
	if !okI || !okJ {
		return nil, fmt.Errorf("%w: file %s: terms hold fewer than its %d bytes", ErrCorrupt, f.Hash, f.Size)
	}

	var l layouts
	head := f.Terms[i]
	if start > pos {
		lay, err := l.get(layout, &f.Terms[i])
		if err != nil {
			return nil, err
		}
		c := head.Start
		// c stays inside the term even for a layout whose inner ends are inconsistent.
		for ; c+1 < head.End && pos+uint64(chunkLen(lay, c)) <= start; c++ {
			pos += uint64(chunkLen(lay, c))
		}
		head = narrow(lay, head, c, head.End)
	}
	if i == j {
		posJ = pos
	}
	tail := f.Terms[j]
	if i == j {
		tail = head
	}
	if termEnd := posJ + uint64(tail.RawBytes); termEnd > end {
		lay, err := l.get(layout, &f.Terms[j])
		if err != nil {
			return nil, err
		}
		c := tail.End
		for c-1 > tail.Start && termEnd-uint64(chunkLen(lay, c-1)) >= end {
			termEnd -= uint64(chunkLen(lay, c-1))
			c--
		}
		tail = narrow(lay, tail, tail.Start, c)
	}
	if i == j {
		head = tail
	}
	a := &Answer{Offset: start - pos, terms: f.Terms[i : j+1], first: i, head: head, tail: tail, xorb: ix.xorb[i : j+1]}
	a.merge(ix.xorbs)
	return a, nil
}

// emptyOK reports whether rng asks for an empty file in a way §2.3 answers with 200.
func emptyOK(rng *httprange.Range) bool {
	return rng.Kind == httprange.Suffix || rng.Start == 0
}

// layouts fetches at most two layouts, reusing the first when both terms share a xorb.
type layouts struct {
	first *xorb.Layout
}

func (l *layouts) get(fn LayoutFunc, t *Term) (*xorb.Layout, error) {
	if l.first != nil && l.first.Hash == t.Xorb {
		return l.first, checkLayout(t, l.first)
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: no layout source for xorb %s", ErrTermMismatch, t.Xorb)
	}
	lay, err := fn(t.Xorb)
	if err != nil {
		return nil, fmt.Errorf("layout of xorb %s: %w", t.Xorb, err)
	}
	if err := checkLayout(t, lay); err != nil {
		return nil, err
	}
	if l.first == nil {
		l.first = lay
	}
	return lay, nil
}

// chunkLen is the uncompressed length of chunk c of a verified layout.
func chunkLen(l *xorb.Layout, c uint32) uint32 {
	if c == 0 {
		return l.RawEnds[0]
	}
	return l.RawEnds[c] - l.RawEnds[c-1]
}

// narrow returns t restricted to chunks [a, b) with sizes and bytes from l.
func narrow(l *xorb.Layout, t Term, a, b uint32) Term {
	t.Start, t.End = a, b
	t.RawBytes = l.RawRange(a, b)
	t.ByteStart, t.ByteEnd = l.ByteRange(a, b)
	return t
}

// piece is one fetch range while an unsorted xorb's ranges are merged.
type piece struct {
	start, end         uint32
	byteStart, byteEnd uint32
}

// xorbState follows one xorb of the answer through the terms in file order. As long as no term
// starts before the start of the xorb's last merged range ("sorted"), the merged ranges can be
// built in one streaming pass: a term either extends the last range (overlap or adjacency) or
// opens the next one. Only xorbs that break this get their pieces sorted.
type xorbState struct {
	start, end uint32 // last merged range (pass 1)
	ranges     int32  // merged ranges so far (pass 1)
	terms      int32  // emitted terms in this xorb
	unsorted   bool
	rec        int32 // the record's xorb number
	off, w     int32 // slot range start and write cursor in the shared arrays (pass 2)
}

// merge fills a.remap and a.Xorbs from the emitted terms (§9 step 5); xorbs is the record's
// distinct xorb table that a.xorb indexes.
func (a *Answer) merge(xorbs []hash.Hash) {
	n := a.Len()
	a.remap = make([]int32, len(xorbs))
	for k := range a.remap {
		a.remap[k] = -1
	}
	// Pass 1: number the xorbs in first-appearance order, count terms and merged ranges.
	var st []xorbState
	for i := 0; i < n; i++ {
		t := a.term(i)
		rx := a.xorb[i]
		x := a.remap[rx]
		if x < 0 {
			a.remap[rx] = int32(len(st))
			st = append(st, xorbState{start: t.Start, end: t.End, ranges: 1, terms: 1, rec: rx})
			continue
		}
		s := &st[x]
		s.terms++
		switch {
		case t.Start < s.start:
			s.unsorted = true
		case t.Start <= s.end:
			s.end = max(s.end, t.End)
		default:
			s.ranges++
			s.start, s.end = t.Start, t.End
		}
	}
	// Slots: exact for sorted xorbs, one per term for the others (merged after sorting).
	total, maxUnsorted := int32(0), int32(0)
	for x := range st {
		s := &st[x]
		s.off, s.w = total, total
		if s.unsorted {
			total += s.terms
			maxUnsorted = max(maxUnsorted, s.terms)
		} else {
			total += s.ranges
		}
	}
	chunks := make([]ChunkRange, total)
	bytes := make([]ByteRange, total)
	// Pass 2: write the ranges.
	for i := 0; i < n; i++ {
		t := a.term(i)
		s := &st[a.remap[a.xorb[i]]]
		if !s.unsorted && s.w > s.off {
			if last := &chunks[s.w-1]; t.Start <= last.End {
				if t.End > last.End {
					last.End = t.End
					bytes[s.w-1].End = uint64(t.ByteEnd) - 1
				}
				continue
			}
		}
		chunks[s.w] = ChunkRange{t.Start, t.End}
		bytes[s.w] = ByteRange{Start: uint64(t.ByteStart), End: uint64(t.ByteEnd) - 1}
		s.w++
	}
	var pieces []piece
	if maxUnsorted > 0 {
		pieces = make([]piece, 0, maxUnsorted)
	}
	a.Xorbs = make([]XorbFetch, len(st))
	for x := range st {
		s := &st[x]
		if s.unsorted {
			s.w = s.off + mergeSorted(pieces[:0], chunks[s.off:s.w], bytes[s.off:s.w])
		}
		a.Xorbs[x] = XorbFetch{Hash: xorbs[s.rec], Chunks: chunks[s.off:s.w:s.w], Bytes: bytes[s.off:s.w:s.w]}
	}
}

// mergeSorted sorts the ranges in chunks and bytes (parallel, one per term) by chunk start,
// merges overlapping or adjacent ones in place and returns how many remain. scratch is reused.
func mergeSorted(scratch []piece, chunks []ChunkRange, bytes []ByteRange) int32 {
	for k := range chunks {
		scratch = append(scratch, piece{chunks[k].Start, chunks[k].End, uint32(bytes[k].Start), uint32(bytes[k].End + 1)})
	}
	slices.SortFunc(scratch, cmpPiece)
	w := 0
	cur := scratch[0]
	for _, p := range scratch[1:] {
		if p.start <= cur.end {
			if p.end > cur.end {
				cur.end, cur.byteEnd = p.end, p.byteEnd
			}
			continue
		}
		chunks[w], bytes[w] = ChunkRange{cur.start, cur.end}, ByteRange{Start: uint64(cur.byteStart), End: uint64(cur.byteEnd) - 1}
		w++
		cur = p
	}
	chunks[w], bytes[w] = ChunkRange{cur.start, cur.end}, ByteRange{Start: uint64(cur.byteStart), End: uint64(cur.byteEnd) - 1}
	return int32(w + 1)
}

func cmpPiece(p, q piece) int {
	switch {
	case p.start < q.start:
		return -1
	case p.start > q.start:
		return 1
	case p.end < q.end:
		return -1
	case p.end > q.end:
		return 1
	}
	return 0
}
