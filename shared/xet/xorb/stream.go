package xorb

import (
	"fmt"
	"io"
	"sync"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// streamBuffer is the read buffer of ValidateStream: room for the largest chunk (header and
// payload) and then some, so that most reads and writes move many chunks at once.
const streamBuffer = 512 << 10

// StreamMemory bounds the memory ValidateStream holds for one body, whatever the body: its read
// buffer, the decompression buffers of one chunk, a footer sent with the upload, and the layout
// and merkle leaves of MaxChunks chunks, three times over (a slice that grows by appending may
// have twice its length in capacity, and holds its old array while it copies). Callers reserve
// it up front (the origin's ingest memory, docs/decisions.md).
const StreamMemory = streamBuffer + 2*MaxChunkRaw + maxTrailer + 3*MaxChunks*(hash.Size+4+4+hash.Size+8)

// streamBufs keeps read buffers between uploads, so a busy origin does not fault in fresh pages
// for each one.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, streamBuffer); return &b }}

// maxEmptyReads is how many reads in a row may return no bytes and no error before
// ValidateStream gives up with io.ErrNoProgress.
const maxEmptyReads = 100

// ReadError is a failure of the body's reader (not of its content) seen by ValidateStream.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "read upload body: " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// WriteError is a failure of the writer ValidateStream copies the chunk area to.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return "write chunk area: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// ValidateStream is Validate for a body read from r: it checks the same things and accepts
// exactly the bodies Validate accepts, chunk by chunk as the bytes arrive, and copies the chunk
// area (every validated chunk, never a byte past the last one validated) to w. It returns the
// layout and the length of the chunk area. The body is read to its end; its memory is bounded by
// StreamMemory, not by the body's length.
//
// On an error w may have received part of the chunk area: the caller discards it. Errors are
// Validate's, a *ReadError when r fails (io.EOF is the end of the body) or a *WriteError when w
// does. It runs on the calling goroutine.
func ValidateStream(r io.Reader, w io.Writer, expect *hash.Hash) (*Layout, int64, error) {
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	return validateStream(&stream{r: r, w: w, buf: *bp}, expect)
}

// ValidateStreamInPlace is ValidateStream for a body read into buf, which must be longer than
// the chunk area of any body the caller accepts: each read of r is into buf right after the
// bytes before it (r is given the rest of buf and may fill less of it, to pace the memory it
// touches), every chunk is validated where it lies, and the validated chunk area is left at
// buf[:area] instead of being copied anywhere. A chunk area that fills buf is ErrTooLarge; a
// footer sent with the upload may be read past buf (at most maxTrailer bytes, on the heap).
func ValidateStreamInPlace(r io.Reader, buf []byte, expect *hash.Hash) (*Layout, int64, error) {
	return validateStream(&stream{r: r, buf: buf, inPlace: true}, expect)
}

func validateStream(s *stream, expect *hash.Hash) (*Layout, int64, error) {
	l := &Layout{}
	var leaves []hash.Leaf
	var dec Decoder
	var scratch []byte
	pos, raw := int64(0), uint64(0)
	for {
		avail, err := s.fill(HeaderSize)
		if err != nil {
			return nil, 0, err
		}
		if avail == 0 {
			break
		}
		b := s.buf[s.valid:s.end]
		if IsFooter(b) {
			tail, err := s.rest()
			if err != nil {
				return nil, 0, err
			}
			if len(leaves) == 0 {
				return nil, 0, fmt.Errorf("%w: upload of %d bytes", ErrEmpty, pos+int64(len(tail)))
			}
			l.Hash = hash.Merkle(leaves)
			if err := checkUploadFooter(tail, l); err != nil {
				return nil, 0, err
			}
			break
		}
		h, err := ParseChunkHeader(b)
		if err != nil {
			return nil, 0, fmt.Errorf("chunk %d at offset %d: %w", len(leaves), pos, err)
		}
		if err := withinLimits(h, len(leaves), raw); err != nil {
			return nil, 0, err
		}
		if avail, err = s.fill(h.Size()); err != nil {
			return nil, 0, err
		}
		if avail < h.Size() {
			return nil, 0, fmt.Errorf("%w: chunk %d at offset %d: payload of %d bytes truncated to %d",
				ErrCorrupt, len(leaves), pos, h.CompressedLen, avail-HeaderSize)
		}
		out, aliased, err := dec.chunkData(scratch[:0], h, s.buf[s.valid+HeaderSize:s.valid+h.Size()])
		if err != nil {
			return nil, 0, fmt.Errorf("chunk %d at offset %d: %w", len(leaves), pos, err)
		}
		if !aliased {
			scratch = out
		}
		s.valid += h.Size()
		pos += int64(h.Size())
		raw += uint64(h.RawLen)
		leaves = l.accept(leaves, hash.Chunk(out), h, pos, raw)
	}
	if len(leaves) == 0 {
		return nil, 0, fmt.Errorf("%w: upload of %d bytes", ErrEmpty, pos)
	}
	if err := s.flush(); err != nil {
		return nil, 0, err
	}
	l.Hash = hash.Merkle(leaves)
	if expect != nil && *expect != l.Hash {
		return nil, 0, fmt.Errorf("%w: body hashes to %s, expected %s", ErrHashMismatch, l.Hash, *expect)
	}
	return l, pos, nil
}

// stream is ValidateStream's window on the body: buf[start:valid] is validated and not yet
// written to w, buf[valid:end] read and not yet validated.
type stream struct {
	r                 io.Reader
	w                 io.Writer
	buf               []byte
	start, valid, end int
	eof               bool
	inPlace           bool // ValidateStreamInPlace: buf holds the whole body; nothing is written
}

// fill makes at least n unvalidated bytes available in buf[valid:end] unless the body ends
// first, and returns how many there are. n is at most len(buf).
func (s *stream) fill(n int) (int, error) {
	empty := 0
	for s.end-s.valid < n && !s.eof {
		if s.inPlace && s.end == len(s.buf) {
			return 0, fmt.Errorf("%w: body longer than its %d-byte buffer", ErrTooLarge, len(s.buf))
		}
		if !s.inPlace && len(s.buf)-s.valid < n {
			if err := s.flush(); err != nil {
				return 0, err
			}
			s.end = copy(s.buf, s.buf[s.valid:s.end])
			s.start, s.valid = 0, 0
		}
		m, err := s.r.Read(s.buf[s.end:])
		s.end += m
		switch {
		case err == io.EOF:
			s.eof = true
		case err != nil:
			return 0, &ReadError{err}
		case m == 0:
			if empty++; empty == maxEmptyReads {
				return 0, &ReadError{io.ErrNoProgress}
			}
		default:
			empty = 0
		}
	}
	return s.end - s.valid, nil
}

// flush writes the validated bytes not yet written.
func (s *stream) flush() error {
	if s.valid > s.start && !s.inPlace {
		if _, err := s.w.Write(s.buf[s.start:s.valid]); err != nil {
			return &WriteError{err}
		}
		s.start = s.valid
	}
	return nil
}

// rest returns the unvalidated bytes and the rest of the body (a footer sent with the upload,
// at most maxTrailer bytes: a longer rest is corrupt, and is not read further).
func (s *stream) rest() ([]byte, error) {
	tail := append([]byte(nil), s.buf[s.valid:s.end]...)
	if s.eof || len(tail) > maxTrailer {
		return tail, nil
	}
	more, err := io.ReadAll(io.LimitReader(s.r, int64(maxTrailer+1-len(tail))))
	if err != nil {
		return nil, &ReadError{err}
	}
	tail = append(tail, more...)
	if len(tail) > maxTrailer {
		return nil, fmt.Errorf("%w: more than %d bytes after the chunks", ErrCorrupt, maxTrailer)
	}
	return tail, nil
}
