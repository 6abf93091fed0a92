package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Streams reports whether the object store takes objects written piece by piece
// (objstore.Stager: the local disk), so that PutXorbStream writes each validated chunk to it at
// once. On a store that needs the whole object and its length first (S3: one conditional PUT),
// PutXorbStream gathers the validated object in memory reserved from its Memory instead.
func (s *Service) Streams() bool { return s.stager != nil }

// PutXorbStream is PutXorb for a body read from r: the body is validated chunk by chunk as it
// arrives (xorb.ValidateStream), in one pass over bytes that are still in the cache.
//
// On a Stager (the local disk) each validated chunk is written to a staged object at once, so
// an upload holds xorb.StreamMemory of memory instead of its whole body; the staged object
// becomes visible under XorbKey(h) only after the whole body validated and its footer was
// written and made durable, and on any error its temporary file is removed. On any other store
// the body is kept in memory reserved from mem 2 MiB at a time as it arrives — read into one
// mapping and validated there (flat.go, Linux), or its validated chunks copied into segments
// (spool.go) — and the object is created from it once the whole body validated; a failed
// reservation ends the upload with mem's error and nothing stored. mem may be nil where
// nothing is reserved.
//
// A xorb the index already has is validated and not written. Results, errors, the race rules
// with concurrent uploads of the same xorb in other encodings, and the possession record are
// PutXorb's; in addition a failed read of r is a *xorb.ReadError, for the caller to classify.
func (s *Service) PutXorbStream(ctx context.Context, scope, prefix string, h hash.Hash, r io.Reader, mem Memory) (inserted bool, err error) {
	defer func() { s.count(s.xorbs, inserted, err) }()
	defer func() {
		if err == nil {
			err = s.recordPossession(ctx, scope, h)
		}
	}()
	if prefix != Prefix {
		return false, fmt.Errorf("%w: %q", ErrBadPrefix, prefix)
	}
	body := &countingReader{r: r} // xet_origin_ingest_bytes_total counts the body, as PutXorb's
	r = body
	indexed, err := s.storedIndexed(ctx, h)
	if err != nil {
		return false, err
	}
	start := time.Now()
	if indexed {
		// Nothing to store; the body must still be a valid xorb h, as PutXorb requires.
		_, _, err := xorb.ValidateStream(r, io.Discard, &h)
		s.validation.WithLabelValues("xorb").Observe(time.Since(start).Seconds())
		if err != nil {
			return false, fmt.Errorf("xorb %s: %w", h, err)
		}
		s.bytesIn.WithLabelValues("xorb").Add(float64(body.n))
		return false, nil
	}
	if s.stager == nil {
		ins, ok, err := s.putFlat(ctx, h, r, mem, start)
		if !ok {
			ins, err = s.putSpooled(ctx, h, r, mem, start)
		}
		if err != nil {
			return false, err
		}
		s.bytesIn.WithLabelValues("xorb").Add(float64(body.n))
		return ins, nil
	}
	st, err := s.stager.Stage(ctx, XorbKey(h))
	if err != nil {
		return false, fmt.Errorf("store xorb %s: %w", h, err)
	}
	defer st.Close() // the temporary name; a committed object stays
	l, area, err := xorb.ValidateStream(r, st, &h)
	s.validation.WithLabelValues("xorb").Observe(time.Since(start).Seconds())
	if err != nil {
		return false, streamErr(h, err)
	}
	footer := xorb.AppendFooter(nil, l, 0)
	if _, err := st.Write(footer); err != nil {
		return false, fmt.Errorf("store xorb %s: %w", h, err)
	}
	size := uint64(area) + uint64(len(footer))
	ins, err := s.indexStored(ctx, h, l, size, st.Commit(ctx), func() error { return st.Replace(ctx) })
	if err != nil {
		return false, err
	}
	s.bytesIn.WithLabelValues("xorb").Add(float64(body.n))
	return ins, nil
}

// putSpooled is PutXorbStream on a store that takes whole objects: the validated chunk area and
// the footer are gathered in a spool, then created under XorbKey(h) in one call with their
// length (objstore.S3: one conditional PUT), and indexed as PutXorb indexes its object.
func (s *Service) putSpooled(ctx context.Context, h hash.Hash, r io.Reader, mem Memory, start time.Time) (bool, error) {
	sp := &spool{mem: mem, max: spoolMax}
	defer sp.free()
	l, area, err := xorb.ValidateStream(r, sp, &h)
	s.validation.WithLabelValues("xorb").Observe(time.Since(start).Seconds())
	if err != nil {
		return false, streamErr(h, err)
	}
	if _, err := sp.Write(xorb.AppendFooter(nil, l, 0)); err != nil {
		return false, fmt.Errorf("store xorb %s: %w", h, err)
	}
	if area <= 0 || area >= sp.Len() {
		return false, fmt.Errorf("store xorb %s: spooled %d bytes for a chunk area of %d", h, sp.Len(), area)
	}
	size := uint64(sp.Len())
	err = s.objs.Create(ctx, XorbKey(h), sp.reader(), int64(size))
	return s.indexStored(ctx, h, l, size, err, func() error {
		return s.objs.Put(ctx, XorbKey(h), sp.reader(), int64(size))
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// streamErr names what failed in a streamed upload: the store (a *xorb.WriteError: the
// server's fault, retryable) or the body (the client's).
func streamErr(h hash.Hash, err error) error {
	var we *xorb.WriteError
	if errors.As(err, &we) {
		return fmt.Errorf("store xorb %s: %w", h, we.Err)
	}
	return fmt.Errorf("xorb %s: %w", h, err)
}
