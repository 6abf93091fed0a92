// Package xorb reads and writes xorb objects: chunk headers, chunk compression (None, LZ4 frame,
// ByteGrouping4+LZ4), the one-pass validation of upload bodies and the v1 footer
// (docs/protocol.md §6–§7). It does no I/O beyond the io.Reader/io.Writer it is handed.
package xorb

import (
	"fmt"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Limits of one xorb (docs/protocol.md §0).
const (
	MaxRawBytes   = 64 << 20 // uncompressed bytes of all chunks
	MaxChunks     = 8192
	MaxChunkRaw   = 128 << 10 // uncompressed bytes of one chunk
	MaxChunkBytes = 256 << 10 // compressed payload bytes of one chunk
	HeaderSize    = 8         // serialized chunk header
)

// Layout describes a stored xorb: the hash of every chunk and where each chunk ends, both in the
// serialized object (headers included, from byte 0) and in the uncompressed stream.
// Ends are cumulative: StoredEnds[i] is the end offset of serialized chunk i, RawEnds[i] the
// uncompressed end of chunk i. A Layout is immutable once built; share it freely.
type Layout struct {
	Hash        hash.Hash
	ChunkHashes []hash.Hash
	StoredEnds  []uint32
	RawEnds     []uint32
}

// NumChunks is the number of chunks in the xorb.
func (l *Layout) NumChunks() int { return len(l.ChunkHashes) }

// ChunkAreaLen is the length of the serialized chunks, i.e. the offset where the footer starts.
func (l *Layout) ChunkAreaLen() uint32 {
	if len(l.StoredEnds) == 0 {
		return 0
	}
	return l.StoredEnds[len(l.StoredEnds)-1]
}

// RawLen is the uncompressed length of the whole xorb.
func (l *Layout) RawLen() uint32 {
	if len(l.RawEnds) == 0 {
		return 0
	}
	return l.RawEnds[len(l.RawEnds)-1]
}

// ByteRange returns the half-open byte range [start, end) of the serialized chunks [a, b).
// It requires a < b <= NumChunks().
func (l *Layout) ByteRange(a, b uint32) (start, end uint32) {
	if a > 0 {
		start = l.StoredEnds[a-1]
	}
	return start, l.StoredEnds[b-1]
}

// RawRange returns the uncompressed length of chunks [a, b). It requires a < b <= NumChunks().
func (l *Layout) RawRange(a, b uint32) uint32 {
	var start uint32
	if a > 0 {
		start = l.RawEnds[a-1]
	}
	return l.RawEnds[b-1] - start
}

// CheckRange reports whether [a, b) is a non-empty chunk range inside the xorb.
func (l *Layout) CheckRange(a, b uint32) error {
	if a >= b || int(b) > l.NumChunks() {
		return fmt.Errorf("chunk range [%d,%d) outside xorb %s of %d chunks", a, b, l.Hash, l.NumChunks())
	}
	return nil
}

// Verify recomputes the xorb hash from the chunk hashes and sizes and checks the ends are
// consistent. A Layout that passes describes exactly the xorb named by its hash.
func (l *Layout) Verify() error {
	leaves, err := l.checkShape(true)
	if err != nil {
		return err
	}
	if got := hash.Merkle(leaves); got != l.Hash {
		return fmt.Errorf("%w: layout names xorb %s but its chunks hash to %s", ErrCorrupt, l.Hash, got)
	}
	return nil
}

// checkShape checks everything Verify checks except the merkle hash: equal slice lengths, a
// chunk count in [1, MaxChunks], stored ends growing by at least a chunk header, raw ends not
// decreasing and no raw chunk over MaxChunkRaw. With leaves it also returns the merkle leaves.
func (l *Layout) checkShape(leaves bool) ([]hash.Leaf, error) {
	n := len(l.ChunkHashes)
	if len(l.StoredEnds) != n || len(l.RawEnds) != n {
		return nil, fmt.Errorf("%w: layout of %s has %d hashes, %d stored ends, %d raw ends",
			ErrCorrupt, l.Hash, n, len(l.StoredEnds), len(l.RawEnds))
	}
	if n == 0 || n > MaxChunks {
		return nil, fmt.Errorf("%w: layout of %s has %d chunks", ErrCorrupt, l.Hash, n)
	}
	var out []hash.Leaf
	if leaves {
		out = make([]hash.Leaf, n)
	}
	var prevStored, prevRaw uint32
	for i := 0; i < n; i++ {
		if l.StoredEnds[i] <= prevStored+HeaderSize-1 || l.RawEnds[i] < prevRaw ||
			l.RawEnds[i]-prevRaw > MaxChunkRaw {
			return nil, fmt.Errorf("%w: layout of %s: chunk %d ends are not increasing", ErrCorrupt, l.Hash, i)
		}
		if leaves {
			out[i] = hash.Leaf{Hash: l.ChunkHashes[i], Size: uint64(l.RawEnds[i] - prevRaw)}
		}
		prevStored, prevRaw = l.StoredEnds[i], l.RawEnds[i]
	}
	return out, nil
}
