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
	// Xorbs holds the fetch ranges, one element per distinct xorb of the emitted terms.
	Xorbs []XorbFetch

	terms      []Term  // the record's terms from the first to the last emitted one
	head, tail Term    // terms[0] and terms[len-1] after trimming
	fetch      []int32 // fetch[i] is the index in Xorbs of term i's xorb
}

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
func (a *Answer) FetchIndex(i int) int { return int(a.fetch[i]) }

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
// xet-protocol.md §9:
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
			return &Answer{}, nil
		}
		return nil, fmt.Errorf("file %s of 0 bytes, range %s: %w", f.Hash, rng, ErrRangeNotSatisfiable)
	}
	if rng == nil {
		a := &Answer{terms: f.Terms, head: f.Terms[0], tail: f.Terms[len(f.Terms)-1]}
		a.merge()
		return a, nil
	}
	br, err := rng.Resolve(f.Size)
	if err != nil {
		return nil, fmt.Errorf("file %s of %d bytes, range %s: %w: %w", f.Hash, f.Size, rng, ErrRangeNotSatisfiable, err)
	}
	start, end := br.Start, br.End+1 // half-open [start, end), start < end <= Size

	// Find the first term that holds byte start and the last that holds byte end-1.
	i, pos := 0, uint64(0)
	for ; pos+uint64(f.Terms[i].RawBytes) <= start; i++ {
		pos += uint64(f.Terms[i].RawBytes)
	}
	j, posJ := i, pos
	for posJ+uint64(f.Terms[j].RawBytes) < end {
		posJ += uint64(f.Terms[j].RawBytes)
		j++
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
	a := &Answer{Offset: start - pos, terms: f.Terms[i : j+1], head: head, tail: tail}
	a.merge()
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

// piece is one emitted term's fetch range, grouped by xorb while merging.
type piece struct {
	start, end         uint32
	byteStart, byteEnd uint32
}

// merge fills a.fetch and a.Xorbs from the emitted terms (§9 step 5).
func (a *Answer) merge() {
	n := a.Len()
	a.fetch = make([]int32, n)
	index := make(map[hash.Hash]int32, min(n, 4096))
	var hashes []hash.Hash
	var counts []int32
	for i := 0; i < n; i++ {
		h := &a.terms[i].Xorb
		if i > 0 && *h == a.terms[i-1].Xorb {
			a.fetch[i] = a.fetch[i-1]
			counts[a.fetch[i]]++
			continue
		}
		x, ok := index[*h]
		if !ok {
			x = int32(len(hashes))
			index[*h] = x
			hashes = append(hashes, *h)
			counts = append(counts, 0)
		}
		a.fetch[i] = x
		counts[x]++
	}
	// Counting sort of the pieces by xorb, stable in term order.
	offs := make([]int32, len(hashes)+1)
	for x, c := range counts {
		offs[x+1] = offs[x] + c
	}
	pieces := make([]piece, n)
	next := slices.Clone(offs[:len(hashes)])
	for i := 0; i < n; i++ {
		t := a.Term(i)
		x := a.fetch[i]
		pieces[next[x]] = piece{t.Start, t.End, t.ByteStart, t.ByteEnd}
		next[x]++
	}
	// Merge each xorb's pieces in place; the merged ranges go to shared backing arrays.
	chunks := make([]ChunkRange, 0, n)
	bytes := make([]ByteRange, 0, n)
	a.Xorbs = make([]XorbFetch, len(hashes))
	for x := range hashes {
		group := pieces[offs[x]:offs[x+1]]
		if !slices.IsSortedFunc(group, cmpPiece) {
			slices.SortFunc(group, cmpPiece)
		}
		first := len(chunks)
		cur := group[0]
		for _, p := range group[1:] {
			if p.start <= cur.end {
				if p.end > cur.end {
					cur.end, cur.byteEnd = p.end, p.byteEnd
				}
				continue
			}
			chunks = append(chunks, ChunkRange{cur.start, cur.end})
			bytes = append(bytes, ByteRange{Start: uint64(cur.byteStart), End: uint64(cur.byteEnd) - 1})
			cur = p
		}
		chunks = append(chunks, ChunkRange{cur.start, cur.end})
		bytes = append(bytes, ByteRange{Start: uint64(cur.byteStart), End: uint64(cur.byteEnd) - 1})
		a.Xorbs[x] = XorbFetch{Hash: hashes[x], Chunks: chunks[first:len(chunks):len(chunks)], Bytes: bytes[first:len(bytes):len(bytes)]}
	}
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
