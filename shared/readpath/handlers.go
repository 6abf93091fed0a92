package readpath

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/httpserver"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Query is one reconstruction request, its file already found visible: what an Answerer
// answers.
type Query struct {
	Rec   *recon.FileRecord
	Range *httprange.Range // nil: the whole file
	V2    bool
	Scope string // the token's scope, which the answer's URLs are bound to
}

// Answerer writes the answer to a reconstruction query: status, headers and body. Fresh plans
// and encodes every answer; the edge puts its answer cache in front of a Fresh.
type Answerer interface {
	Answer(w http.ResponseWriter, r *http.Request, q Query) error
}

// Unranged is what the transfer route serves for a request without a Range header.
type Unranged int

const (
	// WholeObject: the whole stored object, 200, if the URL's signed ranges cover it (403
	// otherwise), as a plain GET of the object means.
	WholeObject Unranged = iota
	// SignedRanges: the URL's signed ranges, 200 when they are one range (the edge's
	// behaviour; see docs/decisions.md, 2026-12-01 "One read path").
	SignedRanges
)

// Batcher lets a tier gather the writes of one transfer answer (the edge batches TLS records
// on HTTP/1.1+TLS). Begin is called once the first part is open; the returned end is called
// before the handler returns, whatever happened, and its error joined to the handler's.
type Batcher func(w http.ResponseWriter, r *http.Request) (buf []byte, end func() error)

// Options configure Handlers. Source and Signer are required.
type Options struct {
	Source Source
	// Signer signs the answers' transfer URLs and verifies them on the transfer route.
	Signer *urlsign.Signer
	// Answerer answers reconstructions; nil means a Fresh over Source and Signer with
	// nothing else set.
	Answerer Answerer
	// Unranged is the transfer route's answer to a request without Range.
	Unranged Unranged
	// Begin (nil: none) batches a transfer answer's writes.
	Begin Batcher
	// Recon observes the handling time of each answered reconstruction, by "version" (v1, v2,
	// batch); TransferBytes counts the xorb bytes the transfer route sent. Both may be nil.
	Recon         *prometheus.HistogramVec
	TransferBytes prometheus.Counter
	// Now is the clock transfer URLs are checked with; nil means time.Now.
	Now func() time.Time
}

// Handlers are the read routes over a Source, as httpserver.Handlers: they return errors for
// the tier's wrapper to map (the tier's rules see the Source's own sentinels; ErrNotFound
// alone is a 404 through the tier's rule for it). They read the token's scope from the
// request's context (httpserver.Claims): wrap them with auth.Read.
type Handlers struct {
	o     Options
	empty *recon.FileRecord // the empty file's record: one value, so that caches keep its answer
}

// New returns the handlers.
func New(o Options) (*Handlers, error) {
	if o.Source == nil || o.Signer == nil {
		return nil, errors.New("readpath: Source and Signer are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Answerer == nil {
		o.Answerer = &Fresh{Source: o.Source, Signer: o.Signer}
	}
	return &Handlers{o: o, empty: &recon.FileRecord{}}, nil
}

// ReconV1 serves GET /v1/reconstructions/{file}.
func (h *Handlers) ReconV1(w http.ResponseWriter, r *http.Request) error {
	return h.reconstruct(w, r, false)
}

// ReconV2 serves GET /v2/reconstructions/{file}.
func (h *Handlers) ReconV2(w http.ResponseWriter, r *http.Request) error {
	return h.reconstruct(w, r, true)
}

// PathHash parses the hash path parameter name (400 when malformed).
func PathHash(r *http.Request, name string) (hash.Hash, error) {
	return hash.Parse(r.PathValue(name))
}

// file returns the record of the file in the request path if the token's scope sees it. The
// empty file (all-zero id) exists in every scope: it has no content to protect.
func (h *Handlers) file(ctx context.Context, r *http.Request) (*recon.FileRecord, error) {
	id, err := PathHash(r, "file")
	if err != nil {
		return nil, err
	}
	if id.IsZero() {
		return h.empty, nil
	}
	return h.o.Source.File(ctx, id, httpserver.Claims(ctx).Scope)
}

// reconstruct: GET /v1|v2/reconstructions/{file} with an optional single Range
// (docs/protocol.md §2.3, §9). The Range header is checked first (400/416 without a lookup),
// then the file's visibility in the token's scope (404 for other scopes' files); a range past
// EOF is 416 (recon.Plan).
func (h *Handlers) reconstruct(w http.ResponseWriter, r *http.Request, v2 bool) error {
	start := time.Now()
	ctx := r.Context()
	var rng *httprange.Range
	if hdr := r.Header.Get("Range"); hdr != "" {
		one, err := httprange.ParseOne(hdr)
		if err != nil {
			return err
		}
		rng = &one
	}
	rec, err := h.file(ctx, r)
	if err != nil {
		return err
	}
	err = h.o.Answerer.Answer(w, r, Query{Rec: rec, Range: rng, V2: v2, Scope: httpserver.Claims(ctx).Scope})
	if h.o.Recon != nil {
		version := "v1"
		if v2 {
			version = "v2"
		}
		h.o.Recon.WithLabelValues(version).Observe(time.Since(start).Seconds())
	}
	return err
}

// HeadFile serves HEAD /v1/files/{file}: Content-Length = file size; 404 when not visible.
func (h *Handlers) HeadFile(w http.ResponseWriter, r *http.Request) error {
	rec, err := h.file(r.Context(), r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Length", strconv.FormatUint(rec.Size, 10))
	w.WriteHeader(http.StatusOK)
	return nil
}

// Fresh is the Answerer that plans every answer (recon.Plan, layouts from Source) and encodes
// it (recon.Encoder), taking extra writer goroutines for big answers when TakeWriters grants
// them. Its fields are read-only once in use.
type Fresh struct {
	Source Source
	Signer *urlsign.Signer
	// ExpiryRound is what URL expiries are rounded up to (urlsign.Signer.Expiry).
	ExpiryRound time.Duration
	// ParallelAt returns the term count from which an answer asks TakeWriters for extra
	// writers (nil or <= 0: never; a func, so a tier may read it from its live configuration);
	// TakeWriters(limit) grants up to limit and ReleaseWriters returns them.
	ParallelAt     func() int
	MaxWriters     int
	TakeWriters    func(limit int) int
	ReleaseWriters func(n int)
	// Parallel counts answers written with extra writers (nil: not counted).
	Parallel prometheus.Counter
}

// Answer implements Answerer.
func (f *Fresh) Answer(w http.ResponseWriter, r *http.Request, q Query) error {
	ctx := r.Context()
	a, err := recon.Plan(q.Rec, q.Range, f.LayoutFunc(ctx))
	if err != nil {
		return err
	}
	// The URLs are bound to this file and the token's scope: hiding the file revokes them.
	return f.Write(w, a, q.V2, f.Signer.Bind(q.Scope, q.Rec.Hash, f.Signer.Expiry(f.ExpiryRound)), nil)
}

// LayoutFunc loads layouts from Source for recon.Plan (at most two per plan).
func (f *Fresh) LayoutFunc(ctx context.Context) recon.LayoutFunc {
	return func(h hash.Hash) (*xorb.Layout, error) { return f.Source.Layout(ctx, h) }
}

// Write writes the planned answer a as a 200 JSON answer signed with sign. terms (nil: none)
// are the encoded whole-file terms of a's record, copied from instead of encoding afresh
// (recon.Encoder.WriteV2Terms); an answer written from them is written serially.
func (f *Fresh) Write(w http.ResponseWriter, a *recon.Answer, v2 bool, sign urlsign.Bound, terms *recon.Terms) error {
	enc := recon.Encoder{}
	if terms == nil && f.TakeWriters != nil && f.MaxWriters > 1 && f.parallel(a.Len()) {
		if extra := f.TakeWriters(f.MaxWriters - 1); extra > 0 {
			defer f.ReleaseWriters(extra)
			enc.Workers = 1 + extra
			if f.Parallel != nil {
				f.Parallel.Inc()
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if v2 {
		return enc.WriteV2Terms(w, a, sign, terms)
	}
	return enc.WriteV1Terms(w, a, sign, terms)
}

// parallel reports whether an answer of n terms asks for extra writers.
func (f *Fresh) parallel(n int) bool {
	if f.ParallelAt == nil {
		return false
	}
	at := f.ParallelAt()
	return at > 0 && n >= at
}

// errRevoked is the transfer route's answer for a URL whose file is no longer visible.
func errRevoked(file hash.Hash) error {
	return fmt.Errorf("%w: file %s is not visible in the scope the URL was issued for", urlsign.ErrRevoked, file)
}
