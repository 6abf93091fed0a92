package server

import (
	"context"

	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/readpath"
)

// batchOptions configure the batch reconstruction route (readpath.Handlers.Batch) from the
// configuration: limits.batch_files, batch_terms and batch_body, the body pace floor, the one
// xorb prefix, and one bound on all of a batch's lookups: each is bounded by the dependency
// timeout, and so is the whole batch, so that an index that answers slowly (not stalled)
// cannot hold a request for up to a thousand timeouts.
func (s *Server) batchOptions() readpath.BatchOptions {
	l := s.cfg.Limits
	return readpath.BatchOptions{Files: l.BatchFiles, Terms: l.BatchTerms, Body: l.BatchBody,
		Pace:   httpapi.PaceOptions{Floor: l.PaceFloor, Window: l.PaceWindow.D()},
		Prefix: ingest.Prefix, ErrBadPrefix: ingest.ErrBadPrefix,
		Bound: func(ctx context.Context, what string, call func(context.Context) error) error {
			_, err := bound(ctx, s.deps, what, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
			return err
		}}
}
