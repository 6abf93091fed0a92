package xorb

import (
	"encoding/binary"
	"fmt"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Footer idents and versions (docs/protocol.md §7.2).
const (
	hashesIdent       = "XBLBHSH"
	boundariesIdent   = "XBLBBND"
	footerV0          = 0 // legacy: no unpacked offsets, hashes after boundaries
	footerV1          = 1
	hashesVersion     = 0
	boundariesVersion = 1

	footerV1Fixed = 92 // FooterLen(0)
	footerV0Fixed = 60 // legacy footer of 0 chunks
	reservedLen   = 16 // trailing buffer; its first 4 bytes are the nonce
	infoLenSize   = 4  // the u32 info_length after the footer
)

// FooterLen is the length of a v1 footer for n chunks: 92 + 40n bytes. A stored object ends
// with the footer and then the u32 info_length (which holds FooterLen(n)), so its metadata
// takes FooterLen(n)+4 bytes after the chunk area.
func FooterLen(n int) int { return footerV1Fixed + 40*n }

// maxTrailer is the longest footer plus info_length any valid object carries.
const maxTrailer = footerV1Fixed + 40*MaxChunks + infoLenSize

// AppendFooter appends the v1 footer describing l, followed by the u32 info_length, to dst.
// nonce goes into the first 4 reserved bytes (0 for none); it does not affect the xorb hash.
// l must be consistent (as Validate or Verify guarantee): its slices have equal lengths.
func AppendFooter(dst []byte, l *Layout, nonce uint32) []byte {
	n := uint32(l.NumChunks())
	le := binary.LittleEndian
	dst = append(dst, footerIdent...)
	dst = append(dst, footerV1)
	dst = append(dst, l.Hash[:]...)
	dst = append(dst, hashesIdent...)
	dst = append(dst, hashesVersion)
	dst = le.AppendUint32(dst, n)
	for i := range l.ChunkHashes {
		dst = append(dst, l.ChunkHashes[i][:]...)
	}
	dst = append(dst, boundariesIdent...)
	dst = append(dst, boundariesVersion)
	dst = le.AppendUint32(dst, n)
	for _, e := range l.StoredEnds {
		dst = le.AppendUint32(dst, e)
	}
	for _, e := range l.RawEnds {
		dst = le.AppendUint32(dst, e)
	}
	dst = le.AppendUint32(dst, n)
	dst = le.AppendUint32(dst, 52+40*n) // hashes_section_offset_from_end
	dst = le.AppendUint32(dst, 40+8*n)  // boundary_section_offset_from_end
	dst = le.AppendUint32(dst, nonce)
	dst = append(dst, make([]byte, reservedLen-4)...)
	return le.AppendUint32(dst, uint32(FooterLen(int(n))))
}

// TrailerLen reads the u32 info_length from the last 4 bytes of tail and returns how many bytes
// at the end of the object hold footer and info_length, so that a reader can fetch exactly those
// bytes for ParseFooter. Errors wrap ErrCorrupt.
func TrailerLen(tail []byte) (int, error) {
	if len(tail) < infoLenSize {
		return 0, fmt.Errorf("%w: object of %d bytes has no footer length", ErrCorrupt, len(tail))
	}
	info := binary.LittleEndian.Uint32(tail[len(tail)-infoLenSize:])
	if info < footerV0Fixed || uint64(info)+infoLenSize > maxTrailer {
		return 0, fmt.Errorf("%w: impossible footer length %d", ErrCorrupt, info)
	}
	return int(info) + infoLenSize, nil
}

// ParseFooter reads the footer at the end of a stored object. tail is any suffix of the object
// that contains the whole footer and info_length (see TrailerLen); the function returns the
// layout and the number of bytes at the end of tail that footer and info_length take, so the
// chunk area of an object of size s is [0, s-n).
//
// It checks idents, versions, the copies of the chunk count, both section offsets, info_length,
// that the end offsets grow as chunks must, and (v1) that the chunk hashes and sizes hash to the
// footer's xorb hash. A legacy v0 footer has no raw offsets: the returned layout then has
// RawEnds == nil and no hash check has been done; ParseObject fills both in from the chunk
// headers. Errors wrap ErrCorrupt, or ErrEmpty for a footer of zero chunks.
func ParseFooter(tail []byte) (*Layout, int, error) {
	n, err := TrailerLen(tail)
	if err != nil {
		return nil, 0, err
	}
	if n > len(tail) {
		return nil, 0, fmt.Errorf("%w: footer of %d bytes but only %d bytes given", ErrCorrupt, n, len(tail))
	}
	l, err := decodeFooter(tail[len(tail)-n : len(tail)-infoLenSize])
	if err != nil {
		return nil, 0, err
	}
	if l.RawEnds != nil {
		if err := l.Verify(); err != nil {
			return nil, 0, err
		}
	}
	return l, n, nil
}

// ParseObject reads a stored object: its footer (v1, or legacy v0 upgraded) and every chunk
// header, checking that the headers tile the chunk area exactly as the footer says and that the
// footer's hash matches its chunk hashes and sizes. It does not decompress or hash chunk
// contents (Validate on the chunk area does that). Errors wrap ErrCorrupt or ErrEmpty.
func ParseObject(obj []byte) (*Layout, error) {
	l, n, err := ParseFooter(obj)
	if err != nil {
		return nil, err
	}
	area := len(obj) - n
	if int(l.ChunkAreaLen()) != area {
		return nil, fmt.Errorf("%w: footer says chunks end at %d, footer starts at %d", ErrCorrupt, l.ChunkAreaLen(), area)
	}
	legacy := l.RawEnds == nil
	if legacy {
		l.RawEnds = make([]uint32, l.NumChunks())
	}
	start, raw := 0, uint32(0)
	for i, end := range l.StoredEnds {
		h, err := ParseChunkHeader(obj[start:area])
		if err != nil {
			return nil, fmt.Errorf("chunk %d at offset %d: %w", i, start, err)
		}
		if start+h.Size() != int(end) {
			return nil, fmt.Errorf("%w: chunk %d at offset %d is %d bytes, footer says %d",
				ErrCorrupt, i, start, h.Size(), int(end)-start)
		}
		raw += h.RawLen
		if legacy {
			l.RawEnds[i] = raw
		} else if l.RawEnds[i] != raw {
			return nil, fmt.Errorf("%w: chunk %d raw end %d, footer says %d", ErrCorrupt, i, raw, l.RawEnds[i])
		}
		start = int(end)
	}
	if legacy {
		if err := l.Verify(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// parseFooterForward reads a footer that starts at tail[0] and returns the layout it describes
// and how many bytes footer and info_length take.
func parseFooterForward(tail []byte) (*Layout, int, error) {
	if len(tail) < 8 || !IsFooter(tail) {
		return nil, 0, fmt.Errorf("%w: truncated footer", ErrCorrupt)
	}
	var count, fixed, per uint64
	switch tail[7] {
	case footerV1:
		if len(tail) < 52 {
			return nil, 0, fmt.Errorf("%w: truncated footer", ErrCorrupt)
		}
		count, fixed, per = uint64(binary.LittleEndian.Uint32(tail[48:])), footerV1Fixed, 40
	case footerV0:
		if len(tail) < 44 {
			return nil, 0, fmt.Errorf("%w: truncated footer", ErrCorrupt)
		}
		count, fixed, per = uint64(binary.LittleEndian.Uint32(tail[40:])), footerV0Fixed, 36
	default:
		return nil, 0, fmt.Errorf("%w: footer version %d", ErrCorrupt, tail[7])
	}
	size := fixed + per*count
	if size+infoLenSize > uint64(len(tail)) {
		return nil, 0, fmt.Errorf("%w: footer of %d chunks does not fit in %d bytes", ErrCorrupt, count, len(tail))
	}
	if info := binary.LittleEndian.Uint32(tail[size:]); uint64(info) != size {
		return nil, 0, fmt.Errorf("%w: info_length %d, footer is %d bytes", ErrCorrupt, info, size)
	}
	l, err := decodeFooter(tail[:size])
	if err != nil {
		return nil, 0, err
	}
	return l, int(size) + infoLenSize, nil
}

// decodeFooter decodes a footer that is exactly f (info_length excluded).
func decodeFooter(f []byte) (*Layout, error) {
	le := binary.LittleEndian
	if len(f) < footerV0Fixed || !IsFooter(f) {
		return nil, fmt.Errorf("%w: bad footer ident", ErrCorrupt)
	}
	l := &Layout{}
	copy(l.Hash[:], f[8:40])
	var n int
	switch f[7] {
	case footerV0:
		count := uint64(le.Uint32(f[40:]))
		if uint64(len(f)) != footerV0Fixed+36*count {
			return nil, fmt.Errorf("%w: legacy footer of %d bytes cannot hold %d chunks", ErrCorrupt, len(f), count)
		}
		n = int(count)
		if err := checkCount(n); err != nil {
			return nil, err
		}
		l.StoredEnds = readU32s(f[44:], n)
		l.ChunkHashes = readHashes(f[44+4*n:], n)
	case footerV1:
		if len(f) < footerV1Fixed {
			return nil, fmt.Errorf("%w: footer of %d bytes", ErrCorrupt, len(f))
		}
		if string(f[40:47]) != hashesIdent || f[47] != hashesVersion {
			return nil, fmt.Errorf("%w: bad hash section ident or version", ErrCorrupt)
		}
		count := uint64(le.Uint32(f[48:]))
		if uint64(len(f)) != footerV1Fixed+40*count {
			return nil, fmt.Errorf("%w: footer of %d bytes cannot hold %d chunks", ErrCorrupt, len(f), count)
		}
		n = int(count)
		b := f[52+32*n:] // boundary section
		switch {
		case string(b[:7]) != boundariesIdent || b[7] != boundariesVersion:
			return nil, fmt.Errorf("%w: bad boundary section ident or version", ErrCorrupt)
		case le.Uint32(b[8:]) != uint32(n) || le.Uint32(b[12+8*n:]) != uint32(n):
			return nil, fmt.Errorf("%w: footer chunk counts disagree", ErrCorrupt)
		case le.Uint32(b[16+8*n:]) != uint32(52+40*n):
			return nil, fmt.Errorf("%w: bad hashes_section_offset_from_end %d", ErrCorrupt, le.Uint32(b[16+8*n:]))
		case le.Uint32(b[20+8*n:]) != uint32(40+8*n):
			return nil, fmt.Errorf("%w: bad boundary_section_offset_from_end %d", ErrCorrupt, le.Uint32(b[20+8*n:]))
		}
		if err := checkCount(n); err != nil {
			return nil, err
		}
		l.ChunkHashes = readHashes(f[52:], n)
		l.StoredEnds = readU32s(b[12:], n)
		l.RawEnds = readU32s(b[12+4*n:], n)
	default:
		return nil, fmt.Errorf("%w: footer version %d", ErrCorrupt, f[7])
	}
	if err := checkEnds(l); err != nil {
		return nil, err
	}
	return l, nil
}

func checkCount(n int) error {
	switch {
	case n == 0:
		return fmt.Errorf("%w: footer lists no chunks", ErrEmpty)
	case n > MaxChunks:
		return fmt.Errorf("%w: footer lists %d chunks, limit %d", ErrCorrupt, n, MaxChunks)
	}
	return nil
}

func readU32s(b []byte, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

func readHashes(b []byte, n int) []hash.Hash {
	out := make([]hash.Hash, n)
	for i := range out {
		copy(out[i][:], b[32*i:])
	}
	return out
}
