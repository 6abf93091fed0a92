package xorb

import (
	"encoding/binary"
	"fmt"
)

// layoutVersion is the first byte of the binary Layout encoding.
const layoutVersion = 1

// layoutFixed is the encoded length of a Layout without chunks: version, count, xorb hash.
const layoutFixed = 1 + 4 + 32

// MarshalBinary encodes l compactly for the index and the internal API:
//
//	u8 version (1) | u32 n | xorb hash | n chunk hashes | n u32 stored ends | n u32 raw ends
//
// (integers little-endian, hashes raw; 37+40n bytes). It fails if the slices of l differ in length.
func (l *Layout) MarshalBinary() ([]byte, error) {
	n := len(l.ChunkHashes)
	if len(l.StoredEnds) != n || len(l.RawEnds) != n {
		return nil, fmt.Errorf("%w: layout of %s has %d hashes, %d stored ends, %d raw ends",
			ErrCorrupt, l.Hash, n, len(l.StoredEnds), len(l.RawEnds))
	}
	le := binary.LittleEndian
	b := make([]byte, 0, layoutFixed+40*n)
	b = append(b, layoutVersion)
	b = le.AppendUint32(b, uint32(n))
	b = append(b, l.Hash[:]...)
	for i := range l.ChunkHashes {
		b = append(b, l.ChunkHashes[i][:]...)
	}
	for _, e := range l.StoredEnds {
		b = le.AppendUint32(b, e)
	}
	for _, e := range l.RawEnds {
		b = le.AppendUint32(b, e)
	}
	return b, nil
}

// UnmarshalLayout decodes what MarshalBinary wrote and verifies it (see Layout.Verify): the
// result describes exactly the xorb named by its hash. Errors wrap ErrCorrupt.
func UnmarshalLayout(b []byte) (*Layout, error) {
	l, err := decodeLayout(b)
	if err != nil {
		return nil, err
	}
	if err := l.Verify(); err != nil {
		return nil, err
	}
	return l, nil
}

// UnmarshalLayoutTrusted decodes what MarshalBinary wrote with every check of UnmarshalLayout
// except the recomputation of the merkle hash (about 15 ms of CPU for 8,192 chunks): the
// encoding, the chunk count and every end offset are still checked, so the result is safe to
// index with, but nothing proves that its chunk hashes and sizes are those of the xorb it names.
//
// Contract: use it only for bytes that this process's trust domain wrote after verifying them
// (the origin reading layouts back from its own index, which records a layout only once its
// xorb passed validation). Bytes that crossed a trust boundary — anything an edge receives from
// the origin, anything a client sent — go through UnmarshalLayout. Errors wrap ErrCorrupt.
func UnmarshalLayoutTrusted(b []byte) (*Layout, error) {
	l, err := decodeLayout(b)
	if err != nil {
		return nil, err
	}
	if _, err := l.checkShape(false); err != nil {
		return nil, err
	}
	return l, nil
}

// decodeLayout parses the encoding and checks its header, length and end offsets (checkEnds).
func decodeLayout(b []byte) (*Layout, error) {
	if len(b) < layoutFixed || b[0] != layoutVersion {
		return nil, fmt.Errorf("%w: bad layout encoding header", ErrCorrupt)
	}
	count := uint64(binary.LittleEndian.Uint32(b[1:]))
	if count == 0 || count > MaxChunks || uint64(len(b)) != layoutFixed+40*count {
		return nil, fmt.Errorf("%w: layout encoding of %d bytes with %d chunks", ErrCorrupt, len(b), count)
	}
	n := int(count)
	l := &Layout{}
	copy(l.Hash[:], b[5:])
	l.ChunkHashes = readHashes(b[layoutFixed:], n)
	l.StoredEnds = readU32s(b[layoutFixed+32*n:], n)
	l.RawEnds = readU32s(b[layoutFixed+36*n:], n)
	if err := checkEnds(l); err != nil {
		return nil, err
	}
	return l, nil
}

// checkEnds checks that the end offsets of l are those of real chunks: every serialized chunk
// is a header plus at most MaxChunkBytes, every raw chunk at most MaxChunkRaw bytes, and the
// raw total at most MaxRawBytes. RawEnds may be nil (legacy footer). Errors wrap ErrCorrupt.
func checkEnds(l *Layout) error {
	var prevS, prevR uint32
	for i, e := range l.StoredEnds {
		if e < prevS || e-prevS < HeaderSize || e-prevS > HeaderSize+MaxChunkBytes {
			return fmt.Errorf("%w: stored end %d of chunk %d after %d", ErrCorrupt, e, i, prevS)
		}
		prevS = e
	}
	for i, e := range l.RawEnds {
		if e < prevR || e-prevR > MaxChunkRaw || e > MaxRawBytes {
			return fmt.Errorf("%w: raw end %d of chunk %d after %d", ErrCorrupt, e, i, prevR)
		}
		prevR = e
	}
	return nil
}
