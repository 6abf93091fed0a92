package hub

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/xetcdn/xetcdn/shared/httprange"
)

// Range requests on resolve (a resumed download: huggingface_hub sends "Range: bytes=N-" to
// finish an .incomplete file). One range is served, 206 with Content-Range; a header this
// package does not take (several ranges, another unit, malformed) is ignored and the whole file
// is sent, as RFC 9110 §14.2 allows; a range past the end is 416 with "Content-Range: bytes
// */SIZE". If-Range with an ETag other than the file's sends the whole file.

// errRangeNotSatisfiable is answered 416.
var errRangeNotSatisfiable = errors.New("range not satisfiable")

// window is the byte range [start, start+n) of a file to send.
type window struct {
	start, n int64
	partial  bool // a 206: the request's Range selected it
}

// rangeOf decides the window of a GET of a file of size bytes whose ETag is etag, and sets the
// Content-Length and, for a partial answer, Content-Range headers.
func rangeOf(w http.ResponseWriter, r *http.Request, etag string, size int64) (window, error) {
	full := window{n: size}
	hv := r.Header.Get("Range")
	if r.Method != http.MethodGet || hv == "" {
		return full, nil
	}
	if ir := r.Header.Get("If-Range"); ir != "" && ir != etag {
		return full, nil
	}
	rg, err := httprange.ParseOne(hv)
	if err != nil {
		return full, nil
	}
	br, err := rg.Resolve(uint64(size))
	if err != nil {
		w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
		w.Header().Del("Content-Length")
		return window{}, fmt.Errorf("%w: %s of a %d-byte file", errRangeNotSatisfiable, hv, size)
	}
	w.Header().Set("Content-Range", httprange.ContentRange(br, uint64(size)))
	w.Header().Set("Content-Length", strconv.FormatUint(br.Len(), 10))
	return window{start: int64(br.Start), n: int64(br.Len()), partial: true}, nil
}

func (win window) status() int {
	if win.partial {
		return http.StatusPartialContent
	}
	return http.StatusOK
}

// errWindowFull ends a stream whose window has been sent.
var errWindowFull = errors.New("window sent")

// windowWriter passes on the bytes of a stream that fall in a window: it drops the first skip
// bytes, then passes left bytes, then fails with errWindowFull.
type windowWriter struct {
	w          io.Writer
	skip, left int64
}

func (ww *windowWriter) Write(p []byte) (int, error) {
	n := len(p)
	if ww.skip > 0 {
		d := min(ww.skip, int64(len(p)))
		ww.skip -= d
		p = p[d:]
	}
	if len(p) > 0 && ww.left > 0 {
		k := min(ww.left, int64(len(p)))
		if _, err := ww.w.Write(p[:k]); err != nil {
			return 0, err
		}
		ww.left -= k
	}
	if ww.left == 0 {
		return n, errWindowFull
	}
	return n, nil
}
