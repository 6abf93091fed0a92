package httpserver

import (
	"io"
	"net/http"
	"sync"
)

// copyBufLen is the size of the pooled copy buffers.
const copyBufLen = 32 << 10

// copyBufs holds *[copyBufLen]byte for copying bodies to ResponseWriters that cannot read from
// a file themselves (HTTP/2, HTTP/3): no per-request buffer.
var copyBufs = sync.Pool{New: func() any { return new([copyBufLen]byte) }}

// Recorder remembers the status written and counts body bytes. Unwrap lets
// http.ResponseController reach the connection (read deadlines, flushes of NDJSON streams).
// ReadFrom keeps the underlying writer's own ReadFrom reachable (net/http's HTTP/1.1 writer:
// sendfile on plain TCP, a pooled buffer on TLS) and copies through a pooled buffer for the
// others.
type Recorder struct {
	http.ResponseWriter
	status int
	n      int64
	buf    *[copyBufLen]byte
}

// NewRecorder records what is written to w. Call Release once the handler is done.
func NewRecorder(w http.ResponseWriter) *Recorder { return &Recorder{ResponseWriter: w} }

// Status is the status written, 200 once a body was written without one, 0 before anything
// was written.
func (w *Recorder) Status() int { return w.status }

// Bytes is the number of body bytes written.
func (w *Recorder) Bytes() int64 { return w.n }

func (w *Recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *Recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// ReadFrom implements io.ReaderFrom without a per-call buffer: one pooled buffer serves all
// the calls of a request (a multi-segment range makes one call per cached file).
func (w *Recorder) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		if w.buf == nil {
			w.buf = copyBufs.Get().(*[copyBufLen]byte)
		}
		// Hide src's WriteTo (an *os.File's would allocate its own buffer) and the writer's
		// other methods, so that CopyBuffer really uses buf.
		n, err = io.CopyBuffer(struct{ io.Writer }{w.ResponseWriter}, struct{ io.Reader }{src}, w.buf[:])
	}
	w.n += n
	return n, err
}

// Release returns the copy buffer to the pool; the Recorder must not be written to afterwards.
func (w *Recorder) Release() {
	if w.buf != nil {
		copyBufs.Put(w.buf)
		w.buf = nil
	}
}

func (w *Recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
