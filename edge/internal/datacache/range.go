package datacache

import (
	"errors"
	"io"
	"os"
)

// Range streams verified bytes returned by Cache.ReadRange. It is not safe for concurrent use;
// the caller closes it.
type Range struct {
	parts []part
	i     int   // current part
	left  int64 // bytes not yet read
}

// part is one segment's share of a Range: a section of an open cache file, or bytes of a
// segment just filled (kept in memory because the file may already be evicted).
type part struct {
	f    *os.File
	data []byte
	off  int64 // next file offset to read (file parts)
	n    int64 // bytes left in this part
}

var errRangeClosed = errors.New("datacache: read from a closed Range")

// Len is the number of bytes not yet read.
func (r *Range) Len() int64 { return r.left }

// Read implements io.Reader.
func (r *Range) Read(p []byte) (int, error) {
	for r.i < len(r.parts) && r.parts[r.i].n == 0 {
		r.i++
	}
	if r.i == len(r.parts) {
		if r.parts == nil {
			return 0, errRangeClosed
		}
		return 0, io.EOF
	}
	pt := &r.parts[r.i]
	if int64(len(p)) > pt.n {
		p = p[:pt.n]
	}
	var n int
	var err error
	if pt.f != nil {
		n, err = pt.f.ReadAt(p, pt.off)
		if err == io.EOF && n == len(p) {
			err = nil
		} else if err == io.EOF {
			err = io.ErrUnexpectedEOF // the file shrank behind our back
		}
		pt.off += int64(n)
	} else {
		n = copy(p, pt.data)
		pt.data = pt.data[n:]
	}
	pt.n -= int64(n)
	r.left -= int64(n)
	return n, err
}

// Discard skips the next n bytes without reading them (a ranged request that starts inside a
// chunk). It returns the number skipped: fewer than n only when the Range has fewer left, with
// io.ErrUnexpectedEOF.
func (r *Range) Discard(n int64) (int64, error) {
	if r.parts == nil {
		return 0, errRangeClosed
	}
	var done int64
	for done < n && r.i < len(r.parts) {
		pt := &r.parts[r.i]
		k := min(pt.n, n-done)
		if pt.f != nil {
			pt.off += k
		} else {
			pt.data = pt.data[k:]
		}
		pt.n -= k
		r.left -= k
		done += k
		if pt.n == 0 {
			r.i++
		}
	}
	if done < n {
		return done, io.ErrUnexpectedEOF
	}
	return done, nil
}

// WriteTo implements io.WriterTo. File parts are copied with the file as an
// *io.LimitedReader over *os.File, which lets a plain TCP ResponseWriter use sendfile.
func (r *Range) WriteTo(w io.Writer) (int64, error) {
	if r.parts == nil {
		return 0, errRangeClosed
	}
	var total int64
	for ; r.i < len(r.parts); r.i++ {
		pt := &r.parts[r.i]
		if pt.n == 0 {
			continue
		}
		var n int64
		var err error
		if pt.f != nil {
			if _, err = pt.f.Seek(pt.off, io.SeekStart); err == nil {
				n, err = io.Copy(w, &io.LimitedReader{R: pt.f, N: pt.n})
				if err == nil && n < pt.n {
					err = io.ErrUnexpectedEOF
				}
			}
			pt.off += n
		} else {
			var m int
			m, err = w.Write(pt.data)
			n = int64(m)
			pt.data = pt.data[m:]
		}
		pt.n -= n
		r.left -= n
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Close releases the cache files. It is idempotent.
func (r *Range) Close() error {
	for _, pt := range r.parts {
		if pt.f != nil {
			pt.f.Close()
		}
	}
	r.parts = nil
	r.i = 0
	return nil
}
