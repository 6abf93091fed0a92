package server

import (
	"context"
	"errors"
	"time"

	"github.com/xetcdn/xetcdn/shared/readpath"
)

// ErrBadPrefix: a batch body names a xorb prefix other than "default" (400 bad_prefix, as at
// the origin).
var ErrBadPrefix = errors.New("edge: unknown prefix")

// batchOptions configure the shared batch handler on the edge (docs/edge.md, "Batch
// reconstructions"): Options.Batch's limits (readpath's defaults for zeros; a zero Pace is
// httpapi's default pace floor, so a slow body cannot hold a permit), the one xorb prefix, and
// one bound (Options.BatchTimeout) on all the batch's lookups through the metadata
// cache, so that a batch of misses cannot hold its permit for a timeout per file.
func (s *Server) batchOptions() readpath.BatchOptions {
	o := s.o.Batch
	if o.Files <= 0 {
		o.Files = readpath.DefaultBatchFiles
	}
	if o.Terms <= 0 {
		o.Terms = readpath.DefaultBatchTerms
	}
	if o.Body <= 0 {
		o.Body = readpath.DefaultBatchBody
	}
	o.Prefix, o.ErrBadPrefix = "default", ErrBadPrefix
	timeout := s.o.BatchTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	o.Bound = func(ctx context.Context, what string, call func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return call(ctx)
	}
	return o
}
