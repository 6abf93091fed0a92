// Package readpath is the one read path of both tiers: the small interface a reconstruction
// needs (Source) and one set of HTTP handlers over it (Handlers): v1/v2 reconstruction with
// Range, HEAD file, batch reconstruction and the signed transfer route with multipart ranges
// (docs/protocol.md §2.3, §2.9, §2.10, §9). The origin supplies a Source from its index and
// object store; the edge supplies one as a stack of layers in front of the origin's internal
// API (docs/architecture.md, "The read path"). Tier-specific behaviour is added around the
// handlers (the edge's permits and fallback) or under them (the edge's answer cache, as the
// handlers' Answerer), never inside.
//
//	GET /v1|v2/reconstructions/{file} ─► Range? ─► Source.File(file, scope) ─► Answerer.Answer
//	HEAD /v1/files/{file} ─────────────────────► Source.File ─► Content-Length
//	GET|POST /v1/reconstructions (batch) ──────► Source.File per file ─► recon.Plan ─► one answer
//	GET /v1/transfer/xorbs/… (signed URL) ─────► Source.Visible ─► Source.Xorb ─► Xorb.Open per part
//
// readpathtest is the conformance suite every Source passes.
package readpath

import (
	"context"
	"errors"
	"io"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// ErrNotFound is what a Source's File and Visible errors wrap when the file is unknown or not
// visible in the scope (the two are one answer: a scope learns nothing about other scopes'
// files), and Layout and Xorb's when the xorb is unknown. Implementations wrap it beside their
// own sentinel, so each tier's error rules still see theirs.
var ErrNotFound = errors.New("readpath: not found")

// Source is what a reconstruction needs. Every method is safe for concurrent use; returned
// records and layouts may be shared with other callers: treat them as immutable.
type Source interface {
	// File returns the record of file h if it is visible in scope.
	File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error)
	// Visible returns nil if file h is visible in scope. It fetches no record where the
	// implementation can avoid it (the transfer route's check, once per signed URL used).
	Visible(ctx context.Context, h hash.Hash, scope string) error
	// Layout returns the layout of xorb h (a layout a visible record references must exist:
	// its absence is an inconsistency, reported as the implementation's own error).
	Layout(ctx context.Context, h hash.Hash) (*xorb.Layout, error)
	// Xorb opens xorb h's stored object for ranged reads.
	Xorb(ctx context.Context, h hash.Hash) (Xorb, error)
}

// Xorb is an open stored xorb object (chunk area, footer and its length, docs/protocol.md §6).
type Xorb interface {
	// Size is the stored object's size in bytes: what Content-Range totals name.
	Size() uint64
	// Open returns the stored bytes b (b.End < Size()). It returns only once the first byte can
	// be sent, so that a failure is still a clean status; the caller closes the Part.
	Open(ctx context.Context, b httprange.ByteRange) (Part, error)
}

// Part is one open byte range of a xorb.
type Part interface {
	// Send writes the range's bytes to w, through buf when buf is not nil (a copy buffer the
	// connection lends, see Options.Begin). It returns the bytes written; an error after
	// some were written leaves a short body, which the client detects and retries.
	Send(w io.Writer, buf []byte) (int64, error)
	// Close releases the range. It is idempotent.
	Close() error
}
