package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// source is the edge's readpath.Source, the layers under the shared read handlers:
//
//	records, visibility, layouts: Options.Meta (metacache: record/visibility cache ─►
//	                               singleflight ─► the origin's internal API client)
//	xorb bytes:                   Options.Bytes (datacache: verified chunk ranges, filled from
//	                               the origin)
//
// The answer cache is above it, as the handlers' Answerer (answerLayer), and the permits and
// the fallback to the origin around the handlers (permitted).
type source Server

var _ readpath.Source = (*source)(nil)

// Source returns the edge's readpath.Source: the layers under the shared read handlers (for
// the conformance suite, readpathtest).
func (s *Server) Source() readpath.Source { return (*source)(s) }

// notVisible adds readpath.ErrNotFound to an originapi.ErrNotFound error, keeping it.
func notVisible(err error) error {
	if errors.Is(err, originapi.ErrNotFound) {
		return fmt.Errorf("%w (%w)", err, readpath.ErrNotFound)
	}
	return err
}

// File implements readpath.Source with Meta.File.
func (src *source) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	rec, err := src.o.Meta.File(ctx, h, scope)
	if err != nil {
		return nil, notVisible(err)
	}
	return rec, nil
}

// Visible implements readpath.Source with Meta.Visible (no record fetched).
func (src *source) Visible(ctx context.Context, h hash.Hash, scope string) error {
	return notVisible(src.o.Meta.Visible(ctx, h, scope))
}

// Layout implements readpath.Source with Meta.Layout (metacache.ErrMissingLayout: 502).
func (src *source) Layout(ctx context.Context, h hash.Hash) (*xorb.Layout, error) {
	return src.o.Meta.Layout(ctx, h)
}

// Xorb implements readpath.Source: the layout gives the stored object's size and the chunk
// boundaries the data cache reads and verifies on.
func (src *source) Xorb(ctx context.Context, h hash.Hash) (readpath.Xorb, error) {
	l, err := src.o.Meta.Layout(ctx, h)
	if err != nil {
		return nil, err
	}
	return xorbObject{s: (*Server)(src), l: l}, nil
}
