package xorb

import "fmt"

// Scheme is the compression scheme of one chunk (docs/protocol.md §6).
type Scheme uint8

// Compression schemes as they appear on the wire. Upstream also knows 99 ("auto"), a writer
// setting that must never appear in a header; it is rejected like any other unknown id.
const (
	None             Scheme = 0
	LZ4              Scheme = 1
	ByteGrouping4LZ4 Scheme = 2
	BG4                     = ByteGrouping4LZ4
)

// Valid reports whether s is a scheme a chunk header may carry.
func (s Scheme) Valid() bool { return s <= ByteGrouping4LZ4 }

// String returns the upstream name of the scheme ("none", "lz4", "bg4-lz4").
func (s Scheme) String() string {
	switch s {
	case None:
		return "none"
	case LZ4:
		return "lz4"
	case ByteGrouping4LZ4:
		return "bg4-lz4"
	}
	return fmt.Sprintf("scheme(%d)", uint8(s))
}

// footerIdent starts every xorb footer. A chunk header never starts with it (its first byte is
// the version 0), which is how readers find the end of the chunk area.
const footerIdent = "XETBLOB"

// ChunkHeader is the 8-byte header in front of every serialized chunk:
// version u8, compressed length u24 LE, scheme u8, uncompressed length u24 LE.
type ChunkHeader struct {
	Version       uint8
	CompressedLen uint32 // payload bytes that follow the header
	RawLen        uint32 // bytes after decompression
	Scheme        Scheme
}

// Size is the serialized length of the chunk: header plus payload.
func (h ChunkHeader) Size() int { return HeaderSize + int(h.CompressedLen) }

// Check validates the header against §6: version 0, known scheme, RawLen <= MaxChunkRaw,
// CompressedLen <= MaxChunkBytes, and for scheme None equal lengths. Errors wrap ErrCorrupt.
func (h ChunkHeader) Check() error {
	switch {
	case h.Version != 0:
		return fmt.Errorf("%w: chunk header version %d", ErrCorrupt, h.Version)
	case !h.Scheme.Valid():
		return fmt.Errorf("%w: unknown compression scheme %d", ErrCorrupt, uint8(h.Scheme))
	case h.RawLen > MaxChunkRaw:
		return fmt.Errorf("%w: chunk raw length %d exceeds %d", ErrCorrupt, h.RawLen, MaxChunkRaw)
	case h.CompressedLen > MaxChunkBytes:
		return fmt.Errorf("%w: chunk compressed length %d exceeds %d", ErrCorrupt, h.CompressedLen, MaxChunkBytes)
	case h.Scheme == None && h.CompressedLen != h.RawLen:
		return fmt.Errorf("%w: uncompressed chunk with payload %d but raw length %d", ErrCorrupt, h.CompressedLen, h.RawLen)
	}
	return nil
}

// ParseChunkHeader decodes and validates (see Check) the header at the start of b.
// It returns an error wrapping ErrCorrupt if b is shorter than HeaderSize, starts with the
// footer ident (use IsFooter to tell that case apart) or fails validation.
func ParseChunkHeader(b []byte) (ChunkHeader, error) {
	if len(b) < HeaderSize {
		return ChunkHeader{}, fmt.Errorf("%w: truncated chunk header (%d bytes)", ErrCorrupt, len(b))
	}
	if IsFooter(b) {
		return ChunkHeader{}, fmt.Errorf("%w: footer where a chunk header was expected", ErrCorrupt)
	}
	h := ChunkHeader{
		Version:       b[0],
		CompressedLen: uint32(b[1]) | uint32(b[2])<<8 | uint32(b[3])<<16,
		Scheme:        Scheme(b[4]),
		RawLen:        uint32(b[5]) | uint32(b[6])<<8 | uint32(b[7])<<16,
	}
	if err := h.Check(); err != nil {
		return ChunkHeader{}, err
	}
	return h, nil
}

// IsFooter reports whether b starts with the footer ident "XETBLOB".
func IsFooter(b []byte) bool {
	return len(b) >= len(footerIdent) && string(b[:len(footerIdent)]) == footerIdent
}

// Append appends the 8-byte serialized header to dst. Lengths are truncated to 24 bits; callers
// serialize only headers that pass Check.
func (h ChunkHeader) Append(dst []byte) []byte {
	c, r := h.CompressedLen, h.RawLen
	return append(dst, h.Version, byte(c), byte(c>>8), byte(c>>16), byte(h.Scheme), byte(r), byte(r>>8), byte(r>>16))
}
