package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Streams reports whether PutXorbStream can be used: the object store takes objects written
// piece by piece (objstore.Stager: the local disk). On a store that needs the whole object and
// its length first (S3: one conditional PUT), uploads go through PutXorb.
func (s *Service) Streams() bool { return s.stager != nil }

// PutXorbStream is PutXorb for a body read from r: the body is validated chunk by chunk as it
// arrives (xorb.ValidateStream) and each validated chunk is written to a staged object at once,
// so an upload holds xorb.StreamMemory of memory instead of its whole body. The staged object
// becomes visible under XorbKey(h) only after the whole body validated and its footer was
// written and made durable; on any error its temporary file is removed and nothing stays. A
// xorb the index already has is validated and not written. Results, errors, the race rules
// with concurrent uploads of the same xorb in other encodings, and the possession record are
// PutXorb's; in addition a failed read of r is a *xorb.ReadError, for the caller to classify.
func (s *Service) PutXorbStream(ctx context.Context, scope, prefix string, h hash.Hash, r io.Reader) (inserted bool, err error) {
	defer func() { s.count(s.xorbs, inserted, err) }()
	defer func() {
		if err == nil {
			err = s.recordPossession(ctx, scope, h)
		}
	}()
	if s.stager == nil {
		return false, errors.New("ingest: the object store does not take streamed objects")
	}
	if prefix != Prefix {
		return false, fmt.Errorf("%w: %q", ErrBadPrefix, prefix)
	}
	body := &countingReader{r: r} // xet_origin_ingest_bytes_total counts the body, as PutXorb's
	r = body
	indexed, err := s.indexed(ctx, h)
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
	st, err := s.stager.Stage(ctx, XorbKey(h))
	if err != nil {
		return false, fmt.Errorf("store xorb %s: %w", h, err)
	}
	defer st.Close() // the temporary name; a committed object stays
	l, area, err := xorb.ValidateStream(r, st, &h)
	s.validation.WithLabelValues("xorb").Observe(time.Since(start).Seconds())
	var we *xorb.WriteError
	if errors.As(err, &we) {
		return false, fmt.Errorf("store xorb %s: %w", h, we.Err)
	}
	if err != nil {
		return false, fmt.Errorf("xorb %s: %w", h, err)
	}
	footer := xorb.AppendFooter(nil, l, 0)
	if _, err := st.Write(footer); err != nil {
		return false, fmt.Errorf("store xorb %s: %w", h, err)
	}
	size := uint64(area) + uint64(len(footer))
	ins, err := s.indexStored(ctx, h, l, size, st.Commit(ctx), func() error {
		if err := st.Commit(ctx); err != nil && !errors.Is(err, objstore.ErrExists) {
			return err
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	s.bytesIn.WithLabelValues("xorb").Add(float64(body.n))
	return ins, nil
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
