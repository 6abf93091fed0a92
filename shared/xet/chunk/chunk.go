// Package chunk splits byte streams into Xet chunks at the same boundaries as the upstream
// client (docs/protocol.md §4) and hashes them (§5).
//
// Boundaries are content defined: a 64-bit gear rolling hash runs over the bytes of a chunk and a
// chunk ends after the first byte at which the chunk is at least MinSize long and the hash has
// its 16 high bits clear, or when the chunk reaches MaxSize. The hash at any position depends only
// on the 64 bytes before it, so boundaries do not depend on how the input is split into reads.
//
// The package does no I/O of its own: Reader and Hasher read from the io.Reader they are given.
// It keeps no mutable package state.
package chunk

// Chunk size limits (docs/protocol.md §0).
const (
	// MinSize is the smallest chunk the chunker cuts; only the last chunk of a stream may be shorter.
	MinSize = TargetSize / 8
	// TargetSize is the mean spacing of content-defined boundaries above MinSize.
	TargetSize = 64 << 10
	// MaxSize is the hard limit: a chunk that reaches it ends there.
	MaxSize = TargetSize * 2
)

const (
	// boundaryMask selects the 16 high bits of the gear hash: (TargetSize-1) shifted fully left.
	boundaryMask = 0xFFFF_0000_0000_0000
	// window is the number of bytes that influence the gear hash (it shifts left once per byte).
	window = 64
	// skip is how many bytes at the start of a chunk are never hashed. Hashing starts 65 bytes
	// before the first position that may end a chunk, as upstream does, so the hash there is
	// already a function of the preceding 64 bytes alone.
	skip = MinSize - window - 1
)

// Cut returns the length of the first chunk of a stream whose unread bytes start with data.
//
// When found is true the chunk ends after n bytes whatever follows data. When found is false,
// n == len(data) < MaxSize: the chunk ends at the end of data only if the stream ends there, and
// otherwise the caller must call Cut again with more bytes (from the same chunk start). Cut never
// examines more than MaxSize bytes. Cut(nil) is (0, false).
func Cut(data []byte) (n int, found bool) { return cut(data, false) }

// LegacyCut is Cut under the boundary rule of xet-core before v1.1.10 (September 2025), which
// huggingface.js still applies (@huggingface/xetchunk-wasm 0.2.0, used by @huggingface/hub
// 2.17.5): a gear match is accepted from the first hashed byte on, so a chunk that is not the
// last may be as short as MinSize-window = 8128 bytes. Current hf_xet and Cut never cut a chunk
// below MinSize. Both kinds of chunking produce valid uploads; they differ only in some
// boundaries, and so in file hashes. LegacyCut exists to reproduce and cross-check such uploads.
func LegacyCut(data []byte) (n int, found bool) { return cut(data, true) }

func cut(data []byte, early bool) (int, bool) {
	if len(data) >= MaxSize {
		data = data[:MaxSize]
	}
	if len(data) <= skip {
		return len(data), false
	}
	if !early && len(data) < MinSize {
		return len(data), false
	}
	if n := scan(data, early); n > 0 {
		return n, true
	}
	return len(data), len(data) == MaxSize
}

// scan runs the gear hash over data (skip < len(data) <= MaxSize; MinSize <= len(data) unless
// early) from offset skip and returns the end of the first content-defined boundary, or 0 if
// there is none. With early, matches during the warm-up count too (LegacyCut).
//
// The loop is written for speed. The gear step h = h<<1 + T[b] is a serial dependency, so the
// loop advances h two bytes at a time, h = h<<2 + (T[b0]<<1 + T[b1]), whose right-hand term
// does not depend on h; the hash after the first byte of each pair is computed beside it only
// for the boundary test. That halves the critical path (one LEA per two bytes on amd64). Eight
// bytes are read per iteration with one bounds check.
func scan(data []byte, early bool) int {
	tbl := &gearTable
	var h uint64
	// Warm up: under the current rule bytes skip .. MinSize-2 can never end a chunk (it would be
	// too short).
	warm := min(len(data), MinSize-1)
	for i := skip; i < warm; i++ {
		if h = h<<1 + tbl[data[i]]; early && h&boundaryMask == 0 {
			return i + 1
		}
	}
	i := warm
	for ; i+8 <= len(data); i += 8 {
		p := data[i : i+8 : i+8]
		t := tbl[p[0]]
		if (h<<1+t)&boundaryMask == 0 {
			return i + 1
		}
		if h = h<<2 + (t<<1 + tbl[p[1]]); h&boundaryMask == 0 {
			return i + 2
		}
		t = tbl[p[2]]
		if (h<<1+t)&boundaryMask == 0 {
			return i + 3
		}
		if h = h<<2 + (t<<1 + tbl[p[3]]); h&boundaryMask == 0 {
			return i + 4
		}
		t = tbl[p[4]]
		if (h<<1+t)&boundaryMask == 0 {
			return i + 5
		}
		if h = h<<2 + (t<<1 + tbl[p[5]]); h&boundaryMask == 0 {
			return i + 6
		}
		t = tbl[p[6]]
		if (h<<1+t)&boundaryMask == 0 {
			return i + 7
		}
		if h = h<<2 + (t<<1 + tbl[p[7]]); h&boundaryMask == 0 {
			return i + 8
		}
	}
	for ; i < len(data); i++ {
		if h = h<<1 + tbl[data[i]]; h&boundaryMask == 0 {
			return i + 1
		}
	}
	return 0
}

// Boundaries returns the cumulative end offsets of the chunks of data, as if data were a whole
// stream: the last element is len(data). Empty input has no chunks and returns nil.
func Boundaries(data []byte) []int { return boundaries(data, Cut) }

// LegacyBoundaries is Boundaries under the rule of LegacyCut (huggingface.js chunking).
func LegacyBoundaries(data []byte) []int { return boundaries(data, LegacyCut) }

func boundaries(data []byte, cut func([]byte) (int, bool)) []int {
	var ends []int
	for off := 0; off < len(data); {
		n, _ := cut(data[off:])
		off += n
		ends = append(ends, off)
	}
	return ends
}
