package datacache

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
)

// Range streams verified bytes returned by Cache.ReadRange. It is not safe for concurrent use;
// the caller closes it. Parts that were cached are read from their files; missed parts are
// read from their fills as their chunks are verified (Read waits for them, bounded by the
// ReadRange context and the fill's timeout), so a Range may fail part-way with the fill's error.
type Range struct {
	ctx    context.Context
	cancel context.CancelFunc // stops launching fills (Close)
	parts  []part
	i      int   // current part
	left   int64 // bytes not yet read
	// launched is closed when the launcher has given every missed part its flight (or gave up).
	launched chan struct{}
	copyBuf  *[]byte // WriteTo's buffer for flight parts, from copyBufs
}

// part is one segment's share of a Range: a section of an open cache file, or of a fill.
type part struct {
	f   *os.File
	fl  *flight       // fill parts: set by the launcher before ready is closed
	rdy chan struct{} // fill parts: closed when fl (or err) is set
	err error         // fill parts: the launch failed
	off int64         // next offset to read, in the file (file parts) or the segment (fill parts)
	n   int64         // bytes left in this part
	// own is this part's own descriptor of the fill's file (ownOf), with its own offset, so
	// that WriteTo can hand it to sendfile; nil: none (yet, or reopening is not possible).
	// borrowed: own is the fill's own descriptor, lent by the flight (not ours to close).
	own, ownOf *os.File
	borrowed   bool
}

var errRangeClosed = errors.New("datacache: read from a closed Range")

// Len is the number of bytes not yet read.
func (r *Range) Len() int64 { return r.left }

// next returns the current part with bytes left, or nil at the end.
func (r *Range) next() *part {
	for r.i < len(r.parts) && r.parts[r.i].n == 0 {
		r.i++
	}
	if r.i == len(r.parts) {
		return nil
	}
	return &r.parts[r.i]
}

// source waits until pt has verified bytes at its offset and returns the file holding them,
// the file offset and how many may be read there.
func (r *Range) source(pt *part) (*os.File, int64, int64, error) {
	if pt.f != nil {
		return pt.f, pt.off, pt.n, nil
	}
	select {
	case <-pt.rdy:
	case <-r.ctx.Done():
		return nil, 0, 0, context.Cause(r.ctx)
	}
	if pt.err != nil {
		return nil, 0, 0, pt.err
	}
	f, avail, err := pt.fl.wait(r.ctx, pt.off)
	if err != nil {
		return nil, 0, 0, err
	}
	return f, pt.off, min(avail, pt.n), nil
}

// Ready reports whether Read would return without waiting for a fill: the Range is at its end
// or closed, the current part is a cached file, or its fill has verified bytes (or an error) at
// the part's offset. A batching writer flushes what it gathered before a Read that would wait,
// so a client is not kept from verified bytes while the rest of a fill arrives.
func (r *Range) Ready() bool {
	if r.parts == nil {
		return true
	}
	pt := r.next()
	if pt == nil || pt.f != nil {
		return true
	}
	select {
	case <-pt.rdy:
	default:
		return false
	}
	if pt.err != nil {
		return true
	}
	fl := pt.fl
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.ready > pt.off || fl.err != nil
}

// Read implements io.Reader.
func (r *Range) Read(p []byte) (int, error) {
	if r.parts == nil {
		return 0, errRangeClosed
	}
	pt := r.next()
	if pt == nil {
		return 0, io.EOF
	}
	f, off, avail, err := r.source(pt)
	if err != nil {
		return 0, err
	}
	if int64(len(p)) > avail {
		p = p[:avail]
	}
	n, err := f.ReadAt(p, off)
	if err == io.EOF && n == len(p) {
		err = nil
	} else if err == io.EOF {
		err = io.ErrUnexpectedEOF // the file shrank behind our back
	}
	pt.off += int64(n)
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
		pt.off += k
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

// WriteTo implements io.WriterTo. Cached parts are copied with the file as an
// *io.LimitedReader over *os.File, which lets a plain TCP ResponseWriter use sendfile; parts
// being filled are copied as their chunks are verified.
func (r *Range) WriteTo(w io.Writer) (int64, error) {
	if r.parts == nil {
		return 0, errRangeClosed
	}
	var total int64
	for pt := r.next(); pt != nil; pt = r.next() {
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
			pt.n -= n
			r.left -= n
		} else {
			n, err = r.writeFilling(w, pt)
		}
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// writeFilling writes the verified bytes of fill part pt that are on hand (waiting for the
// first of them). Through a descriptor of its own on the fill's file the bytes go to w's
// ReadFrom as an *io.LimitedReader over *os.File — sendfile on plain TCP — else they are
// copied through a pooled buffer.
func (r *Range) writeFilling(w io.Writer, pt *part) (int64, error) {
	f, off, avail, err := r.source(pt)
	if err != nil {
		return 0, err
	}
	if pt.ownOf != f {
		pt.dropOwn()
		if pt.fl.lendOffset(f) {
			pt.own, pt.borrowed = f, true
		} else {
			pt.own = reopen(f)
		}
		pt.ownOf = f
	}
	if pt.own == nil {
		if r.copyBuf == nil {
			r.copyBuf = copyBufs.Get().(*[]byte)
		}
		m, err := r.Read((*r.copyBuf)[:min(int64(copyBytes), avail)])
		if m == 0 {
			return 0, err
		}
		wn, err := w.Write((*r.copyBuf)[:m])
		return int64(wn), err
	}
	if _, err := pt.own.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	n, err := io.Copy(w, &io.LimitedReader{R: pt.own, N: avail})
	if err == nil && n < avail {
		err = io.ErrUnexpectedEOF
	}
	pt.off += n
	pt.n -= n
	r.left -= n
	if pt.n == 0 {
		pt.dropOwn() // done with this part: let another reader of the fill have the offset
	}
	return n, err
}

// dropOwn gives up the part's own descriptor: closes a reopened one, returns a lent one.
func (pt *part) dropOwn() {
	switch {
	case pt.own == nil:
	case pt.borrowed:
		pt.fl.returnOffset(pt.own)
	default:
		pt.own.Close()
	}
	pt.own, pt.ownOf, pt.borrowed = nil, nil, false
}

// reopen opens f's file again, as a new open file (its own offset), through /proc/self/fd:
// that works after the file was renamed or unlinked. Nil where it does not work.
func reopen(f *os.File) *os.File {
	if f == nil {
		return nil
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var g *os.File
	_ = sc.Control(func(fd uintptr) {
		g, _ = openRead("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
	})
	return g
}

// copyBytes is WriteTo's copy size for parts being filled; the buffers are shared through
// copyBufs (the runtime drops idle ones), not allocated per Range.
const copyBytes = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBytes); return &b }}

// Close releases the cache files and the Range's hold on running fills (which go on for the
// other readers and the cache). It is idempotent.
func (r *Range) Close() error {
	if r.parts == nil {
		return nil
	}
	if r.cancel != nil {
		r.cancel()
		<-r.launched
	}
	for i := range r.parts {
		pt := &r.parts[i]
		if pt.f != nil {
			pt.f.Close()
		}
		pt.dropOwn() // before release: a lent descriptor goes back while the flight holds it
		if pt.fl != nil {
			pt.fl.release()
		}
	}
	if r.copyBuf != nil {
		copyBufs.Put(r.copyBuf)
		r.copyBuf = nil
	}
	r.parts = nil
	r.i = 0
	return nil
}
