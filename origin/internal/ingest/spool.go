package ingest

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Memory reserves n more bytes of ingest memory for one upload (the server's limits.ingest_memory
// budget, waiting at most limits.ingest_wait), or reports why it cannot. The caller releases
// the reservation when the upload ends.
type Memory func(n int64) error

// spoolSegment is the unit a spool grows by, and reserves memory in (a flat body too).
const spoolSegment = 2 << 20

// spool gathers a validated xorb object (the chunk area xorb.ValidateStream writes, then the
// footer) in fixed segments, for an object store that needs the whole object and its length
// before it stores it (S3: one conditional PUT). Unlike a growing buffer it never copies what
// it holds, and it reserves memory one segment at a time as the object grows, never by what
// the client declared (docs/decisions.md, "Spooled xorb uploads on S3").
type spool struct {
	mem    Memory // nil: nothing to reserve (tests)
	max    int64  // the most the object may be
	segs   [][]byte
	mapped []bool // segs[i] was mapped by newSegment, not allocated on the heap
	n      int64

	mu    sync.RWMutex // readers hold it shared while they copy out of segs; free exclusively
	freed bool
}

// errSpoolFull is a write past the spool's max: never for a body within MaxXorbBody.
var errSpoolFull = errors.New("ingest: xorb object larger than the largest upload")

func (s *spool) Write(p []byte) (int, error) {
	if s.n+int64(len(p)) > s.max {
		return 0, fmt.Errorf("%w: %d bytes", errSpoolFull, s.n+int64(len(p)))
	}
	done := 0
	for done < len(p) {
		off := int(s.n % spoolSegment)
		if off == 0 && s.n/spoolSegment == int64(len(s.segs)) {
			if s.mem != nil {
				if err := s.mem(spoolSegment); err != nil {
					return done, err
				}
			}
			seg, mapped := newSegment()
			s.segs, s.mapped = append(s.segs, seg), append(s.mapped, mapped)
		}
		m := copy(s.segs[s.n/spoolSegment][off:], p[done:])
		done += m
		s.n += int64(m)
	}
	return done, nil
}

// Len is the number of bytes written.
func (s *spool) Len() int64 { return s.n }

// reader returns a reader of everything written so far; several may read at once.
func (s *spool) reader() *spoolReader { return &spoolReader{s: s} }

// free returns the segments' memory. A reader used after it fails (errSpoolFreed) and never
// sees the memory again, whoever still holds it.
func (s *spool) free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, seg := range s.segs {
		freeSegment(seg, s.mapped[i])
	}
	s.segs, s.mapped, s.n, s.freed = nil, nil, 0, true
}

var errSpoolFreed = errors.New("ingest: spooled xorb read after its upload ended")

// spoolReader reads a spool from its start.
type spoolReader struct {
	s   *spool
	off int64
}

func (r *spoolReader) Read(p []byte) (int, error) {
	r.s.mu.RLock()
	defer r.s.mu.RUnlock()
	if r.s.freed {
		return 0, errSpoolFreed
	}
	if r.off >= r.s.n {
		return 0, io.EOF
	}
	seg := r.s.segs[r.off/spoolSegment]
	off := int(r.off % spoolSegment)
	end := min(spoolSegment, r.s.n-(r.off-int64(off))) // the segment's bytes written
	n := copy(p, seg[off:end])
	r.off += int64(n)
	return n, nil
}

// WriteTo writes the rest of the spool to w segment by segment.
func (r *spoolReader) WriteTo(w io.Writer) (int64, error) {
	r.s.mu.RLock()
	defer r.s.mu.RUnlock()
	if r.s.freed {
		return 0, errSpoolFreed
	}
	var total int64
	for r.off < r.s.n {
		seg := r.s.segs[r.off/spoolSegment]
		off := int(r.off % spoolSegment)
		end := min(spoolSegment, r.s.n-(r.off-int64(off)))
		n, err := w.Write(seg[off:end])
		r.off += int64(n)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// spoolMax is the largest object a spool holds: a chunk area of at most MaxXorbBody bytes and
// the footer the origin appends to it.
var spoolMax = MaxXorbBody + int64(xorb.FooterLen(xorb.MaxChunks))

var _ io.WriterTo = (*spoolReader)(nil)
