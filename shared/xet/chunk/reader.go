package chunk

import (
	"errors"
	"io"
)

// bufSize is the Reader's buffer. It holds at least two maximal chunks so that keeping the
// unread tail (< MaxSize) and refilling costs a copy of at most MaxSize per bufSize-MaxSize
// bytes read, and large reads keep system calls rare.
const bufSize = 2 << 20

// maxEmptyReads bounds how many (0, nil) reads in a row are tolerated before giving up with
// io.ErrNoProgress, as bufio does.
const maxEmptyReads = 100

// Reader splits a stream into chunks. It reads the underlying reader in large blocks with a
// fixed buffer of a few MiB, so its memory does not grow with the stream. The boundaries are the
// same however the underlying reader splits its data.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	r          io.Reader
	buf        []byte
	start, end int   // unread bytes are buf[start:end]
	err        error // sticky error from r; io.EOF once r is exhausted

	// tap, when set, sees every byte read from r, in order, and may process the bytes on
	// another goroutine while the Reader goes on. The Reader then alternates between buf and
	// spare: the unread tail moves to the other buffer instead of to the front of the same
	// one, so the bytes of the last buffer switch stay untouched while tap is still busy.
	tap   tap
	spare []byte
}

// tap observes the raw stream (Hasher uses it for the SHA-256 of the whole input).
type tap interface {
	// observe hands over the next bytes of the stream. p stays unmodified until retire has
	// been called twice after this call.
	observe(p []byte)
	// retire tells the tap that the Reader switched buffers. It returns once every byte
	// observed before the previous call of retire has been processed.
	retire()
}

// NewReader returns a Reader that reads from r.
func NewReader(r io.Reader) *Reader { return newReaderSize(r, bufSize) }

// newReaderSize returns a Reader with a buffer of size bytes (at least 2*MaxSize).
func newReaderSize(r io.Reader, size int) *Reader {
	return &Reader{r: r, buf: make([]byte, max(size, 2*MaxSize))}
}

// Next returns the bytes of the next chunk. The slice is valid until the next call of Next.
// After the last chunk Next returns io.EOF; an error from the underlying reader is returned
// as soon as it is seen (no further chunks are returned after it), wrapped in *ReadError.
func (r *Reader) Next() ([]byte, error) {
	if r.failed() {
		return nil, r.err
	}
	if data, ok := r.take(); ok {
		return data, nil
	}
	if r.err == nil {
		r.fill()
	}
	if r.failed() {
		return nil, r.err
	}
	if data, ok := r.take(); ok {
		return data, nil
	}
	return nil, io.EOF
}

// failed reports whether reading the input failed (other than by ending).
func (r *Reader) failed() bool { return r.err != nil && !errors.Is(r.err, io.EOF) }

// take returns the next chunk if the buffered bytes determine it: at least MaxSize bytes are
// buffered, or the input has ended (or failed). The slice stays valid until the next fill.
func (r *Reader) take() ([]byte, bool) {
	avail := r.buf[r.start:r.end]
	if len(avail) == 0 || (len(avail) < MaxSize && r.err == nil) {
		return nil, false
	}
	n, _ := Cut(avail)
	r.start += n
	return avail[:n:n], true
}

// fill reads until at least MaxSize bytes are buffered or the underlying reader fails or ends.
func (r *Reader) fill() {
	if len(r.buf)-r.end < MaxSize {
		dst := r.buf
		if r.tap != nil {
			if r.spare == nil {
				r.spare = make([]byte, len(r.buf))
			}
			r.tap.retire() // the spare buffer's bytes have been processed
			dst, r.spare = r.spare, r.buf
		}
		r.end = copy(dst, r.buf[r.start:r.end])
		r.start = 0
		r.buf = dst
	}
	from := r.end
	for empty := 0; r.end-r.start < MaxSize; {
		n, err := r.r.Read(r.buf[r.end:])
		if n < 0 || n > len(r.buf)-r.end {
			r.err = &ReadError{Err: errBadCount}
			break
		}
		r.end += n
		if err != nil {
			if errors.Is(err, io.EOF) {
				r.err = io.EOF
			} else {
				r.err = &ReadError{Err: err}
			}
			break
		}
		if n > 0 {
			empty = 0
		} else if empty++; empty >= maxEmptyReads {
			r.err = &ReadError{Err: io.ErrNoProgress}
			break
		}
	}
	if r.tap != nil && r.end > from {
		r.tap.observe(r.buf[from:r.end])
	}
}

// errBadCount reports an io.Reader that broke its contract.
var errBadCount = errors.New("reader returned an invalid count")

// ReadError reports a failure of the underlying reader.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "chunk: read input: " + e.Err.Error() }

// Unwrap returns the underlying reader's error.
func (e *ReadError) Unwrap() error { return e.Err }
