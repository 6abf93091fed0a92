package xorb

import (
	"errors"
	"fmt"
	"io"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ChunkReader decodes serialized chunks from a stream (a downloaded byte range, an object read
// from the store). It is not safe for concurrent use.
type ChunkReader struct {
	r       io.Reader
	dec     Decoder
	hdr     [HeaderSize]byte
	payload []byte
	raw     []byte
	off     int64
	done    bool
}

// NewChunkReader returns a reader of the chunks in r. It reads only what it decodes; it does not
// close r.
func NewChunkReader(r io.Reader) *ChunkReader { return &ChunkReader{r: r} }

// Next decodes the next chunk and returns its uncompressed bytes and header. The returned slice
// is valid until the next call. At a clean end of the stream, or at a footer (whose bytes are
// left unread after its first 8), Next returns io.EOF. A stream that ends inside a chunk is an
// error wrapping ErrCorrupt and io.ErrUnexpectedEOF; other read errors are returned wrapped.
func (c *ChunkReader) Next() ([]byte, ChunkHeader, error) {
	if c.done {
		return nil, ChunkHeader{}, io.EOF
	}
	n, err := io.ReadFull(c.r, c.hdr[:])
	switch {
	case n == 0 && err == io.EOF:
		c.done = true
		return nil, ChunkHeader{}, io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		if IsFooter(c.hdr[:n]) {
			c.done = true
			return nil, ChunkHeader{}, io.EOF
		}
		return nil, ChunkHeader{}, fmt.Errorf("%w: chunk header at offset %d: %w", ErrCorrupt, c.off, io.ErrUnexpectedEOF)
	case err != nil:
		return nil, ChunkHeader{}, fmt.Errorf("read chunk header at offset %d: %w", c.off, err)
	}
	if IsFooter(c.hdr[:]) {
		c.done = true
		return nil, ChunkHeader{}, io.EOF
	}
	h, err := ParseChunkHeader(c.hdr[:])
	if err != nil {
		return nil, h, fmt.Errorf("chunk at offset %d: %w", c.off, err)
	}
	if cap(c.payload) < int(h.CompressedLen) {
		c.payload = make([]byte, h.CompressedLen) // bounded by MaxChunkBytes
	}
	c.payload = c.payload[:h.CompressedLen]
	if _, err := io.ReadFull(c.r, c.payload); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, h, fmt.Errorf("%w: chunk payload at offset %d: %w", ErrCorrupt, c.off, io.ErrUnexpectedEOF)
		}
		return nil, h, fmt.Errorf("read chunk payload at offset %d: %w", c.off, err)
	}
	c.raw, err = c.dec.DecodeChunk(c.raw[:0], h, c.payload)
	if err != nil {
		return nil, h, fmt.Errorf("chunk at offset %d: %w", c.off, err)
	}
	c.off += int64(h.Size())
	return c.raw, h, nil
}

// Offset is the number of bytes of chunks decoded so far.
func (c *ChunkReader) Offset() int64 { return c.off }

// VerifyRange checks that data is exactly the serialized chunks [a, b) of the xorb described by
// l: its length equals the layout's byte range, every chunk's serialized and raw lengths match
// the layout, and every decoded chunk hashes to l.ChunkHashes[i]. l must be trusted (built by
// Validate, or checked by ParseObject or UnmarshalLayout). Errors wrap ErrCorrupt, or
// ErrHashMismatch when a chunk decodes cleanly to the wrong content.
func VerifyRange(data []byte, l *Layout, a, b uint32) error {
	var v Verifier
	return v.VerifyRange(data, l, a, b)
}

// Verifier is VerifyRange with its keyed hasher and decode buffer kept between calls: a caller
// that verifies a stream piece by piece (the edge's fills, one call per read of the origin's
// answer) otherwise builds a BLAKE3 hasher (~10 KB) and a decode buffer per call. The zero value
// is ready to use; a Verifier is not safe for concurrent use.
type Verifier struct {
	hasher *hash.Chunker
	dec    Decoder
	raw    []byte
}

// VerifyRange is the package's VerifyRange (same contract and errors).
func (v *Verifier) VerifyRange(data []byte, l *Layout, a, b uint32) error {
	if len(l.StoredEnds) != l.NumChunks() || len(l.RawEnds) != l.NumChunks() {
		return fmt.Errorf("%w: inconsistent layout of %s", ErrCorrupt, l.Hash)
	}
	if err := l.CheckRange(a, b); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	start, end := l.ByteRange(a, b)
	if uint64(len(data)) != uint64(end-start) {
		return fmt.Errorf("%w: range [%d,%d) of %s is %d bytes, got %d", ErrCorrupt, a, b, l.Hash, end-start, len(data))
	}
	if v.hasher == nil {
		v.hasher = hash.NewChunker()
	}
	pos := 0
	for i := a; i < b; i++ {
		s, r := l.ByteRange(i, i+1)
		h, err := ParseChunkHeader(data[pos:])
		if err != nil {
			return fmt.Errorf("chunk %d of %s: %w", i, l.Hash, err)
		}
		if h.Size() != int(r-s) || h.RawLen != l.RawRange(i, i+1) {
			return fmt.Errorf("%w: chunk %d of %s has sizes %d/%d, layout says %d/%d",
				ErrCorrupt, i, l.Hash, h.Size(), h.RawLen, r-s, l.RawRange(i, i+1))
		}
		// Stored as is: hash the payload in place instead of copying it (Check, in
		// ParseChunkHeader, made its length the raw length). v.raw stays the decode buffer.
		chunk := data[pos+HeaderSize : pos+h.Size()]
		if h.Scheme != None {
			if v.raw, err = v.dec.DecodeChunk(v.raw[:0], h, chunk); err != nil {
				return fmt.Errorf("chunk %d of %s: %w", i, l.Hash, err)
			}
			chunk = v.raw
		}
		if v.hasher.Sum(chunk) != l.ChunkHashes[i] {
			return fmt.Errorf("%w: chunk %d of %s", ErrHashMismatch, i, l.Hash)
		}
		pos += h.Size()
	}
	return nil
}
