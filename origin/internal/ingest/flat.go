package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// flatLen is the length of a flat body's mapping: room for the largest chunk area and the
// footer the origin appends, in whole segments. Only what is read into it is touched (and
// reserved).
var flatLen = (spoolMax + spoolSegment - 1) / spoolSegment * spoolSegment

// flat is a xorb object read, validated and kept in one mapping of its own (Linux: newFlat):
// the socket's bytes land where they stay, xorb.ValidateStreamInPlace validates them there, and
// the PUT reads them from there, so the body is copied by nobody but the kernel. Memory is
// reserved one segment at a time before reads may touch it (flatReader), as for a spool.
type flat struct {
	b        []byte // the mapping
	mem      Memory // nil: nothing to reserve (tests)
	reserved int64  // bytes of b reserved from mem
	n        int64  // bytes read into b
	size     int64  // the object's length once complete
	memErr   error  // a reservation that failed while the body was read

	mu    sync.RWMutex // readers hold it shared while they copy out of b; free exclusively
	freed bool
}

// reserveTo reserves b up to at least n bytes, in whole segments.
func (f *flat) reserveTo(n int64) error {
	for f.reserved < n {
		if f.reserved+spoolSegment > int64(len(f.b)) {
			return fmt.Errorf("%w: %d bytes", errSpoolFull, n)
		}
		if f.mem != nil {
			if err := f.mem(spoolSegment); err != nil {
				return err
			}
		}
		f.reserved += spoolSegment
	}
	return nil
}

// flatReader reads the body for xorb.ValidateStreamInPlace: a read into b at the next byte is
// limited to what is reserved (reserving the next segment when none is left); any other read
// (the upload's own footer, read into the validator's memory) passes through.
type flatReader struct {
	f *flat
	r io.Reader
}

func (fr flatReader) Read(p []byte) (int, error) {
	f := fr.f
	if len(p) == 0 || f.n >= int64(len(f.b)) || &p[0] != &f.b[f.n] {
		return fr.r.Read(p)
	}
	if f.n == f.reserved {
		if err := f.reserveTo(f.n + 1); err != nil {
			f.memErr = err
			return 0, err
		}
	}
	p = p[:min(int64(len(p)), f.reserved-f.n)]
	n, err := fr.r.Read(p)
	f.n += int64(n)
	return n, err
}

// appendFooter writes footer after the chunk area and fixes the object's length.
func (f *flat) appendFooter(area int64, footer []byte) error {
	end := area + int64(len(footer))
	if err := f.reserveTo(end); err != nil {
		return err
	}
	copy(f.b[area:end], footer)
	f.size = end
	return nil
}

// reader returns a reader of the object; several may read at once.
func (f *flat) reader() io.Reader { return &flatObject{f: f} }

type flatObject struct {
	f   *flat
	off int64
}

func (o *flatObject) Read(p []byte) (int, error) {
	o.f.mu.RLock()
	defer o.f.mu.RUnlock()
	if o.f.freed {
		return 0, errSpoolFreed
	}
	if o.off >= o.f.size {
		return 0, io.EOF
	}
	n := copy(p, o.f.b[o.off:o.f.size])
	o.off += int64(n)
	return n, nil
}

// free unmaps b. A reader used after it fails (errSpoolFreed) and never sees the memory.
func (f *flat) free() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.freed {
		unmapFlat(f.b)
		f.b, f.freed = nil, true
	}
}

// flatBodies switches the flat path (tests run both).
var flatBodies = true

var errNoFlat = errors.New("ingest: no mapping for a flat body")

// putFlat is putSpooled with the body read into one mapping and validated there. ok is false
// when no mapping could be made and nothing was read (the caller spools instead).
func (s *Service) putFlat(ctx context.Context, h hash.Hash, r io.Reader, mem Memory, start time.Time) (ins, ok bool, err error) {
	b, err := newFlat(flatLen)
	if err != nil {
		return false, false, nil
	}
	f := &flat{b: b, mem: mem}
	defer f.free()
	l, area, err := xorb.ValidateStreamInPlace(flatReader{f, r}, f.b, &h)
	s.validation.WithLabelValues("xorb").Observe(time.Since(start).Seconds())
	if f.memErr != nil { // the reservation failed, not the body
		return false, true, fmt.Errorf("store xorb %s: %w", h, f.memErr)
	}
	if err != nil {
		return false, true, fmt.Errorf("xorb %s: %w", h, err)
	}
	if err := f.appendFooter(area, xorb.AppendFooter(nil, l, 0)); err != nil {
		return false, true, fmt.Errorf("store xorb %s: %w", h, err)
	}
	size := uint64(f.size)
	err = s.objs.Create(ctx, XorbKey(h), f.reader(), int64(size))
	ins, err = s.indexStored(ctx, h, l, size, err, func() error {
		return s.objs.Put(ctx, XorbKey(h), f.reader(), int64(size))
	})
	return ins, true, err
}
