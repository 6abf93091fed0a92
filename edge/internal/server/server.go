// Package server is the edge's HTTP service: reconstructions answered from the metadata cache
// with URLs the edge signs for its own transfer route, that transfer route served from the
// verified xorb data cache, and every other CAS route proxied to the origin as a stream.
//
//	client ─┬─ /v1|v2/reconstructions ─► permit? ─┬─ yes ► readpath.Handlers ► source.File (metacache)
//	        │                                     │        ► answerLayer (answer cache) ► readpath.Fresh
//	        │                                     └─ no ─► proxy to origin (fallback)
//	        ├─ /v1/files (HEAD) ─────────────────► readpath.Handlers ► source.File (metacache)
//	        ├─ /v1/transfer/xorbs (edge-signed URL) ─► readpath.Handlers ► source.Visible, .Xorb
//	        │                                          (metacache) ► datacache (verified)
//	        └─ uploads, shards, dedup, telemetry, token route ───────────► proxy to origin
//
// Handlers return errors; one wrapper maps them to a status with httpapi.Errors. Nothing is
// ever answered 429/503 for saturation: without a free permit the origin answers instead.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/xetcdn/xetcdn/edge/internal/datacache"
	"github.com/xetcdn/xetcdn/edge/internal/metacache"
	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httpserver"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/readpath/filecache"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Metadata answers file and layout lookups (*metacache.Cache). Visible is the transfer
// route's check that a URL's file is still visible in its scope; like File it must answer from
// visibility the origin's revocation events invalidate, and fail with originapi.ErrNotFound
// when the file is not visible.
type Metadata interface {
	filecache.Backend // File, Visible
	Layout(ctx context.Context, h hash.Hash) (*xorb.Layout, error)
}

// XorbBytes serves verified serialized chunks of a xorb (*datacache.Cache) as a stream: the
// stored bytes [start, end), which must lie on chunk boundaries of l. It returns once every
// byte of the range is on hand and verified; the caller reads the Range (its WriteTo hands
// cached files to the ResponseWriter, i.e. sendfile on plain TCP) and closes it.
type XorbBytes interface {
	ReadRange(ctx context.Context, l *xorb.Layout, start, end int64) (*datacache.Range, error)
}

// Tokens verifies bearer tokens (*tokens.Verifier).
type Tokens interface {
	VerifyRequest(r *http.Request) (*auth.Claims, error)
}

// ErrCorrupt is what an XorbBytes error must wrap (alone or besides its own sentinel, see
// Options.CorruptErrs) when the origin sent bytes that failed verification: 502, counted.
var ErrCorrupt = errors.New("edge: origin sent corrupt xorb bytes")

// ErrBadRange is what an XorbBytes error may wrap for a range off chunk boundaries (416).
var ErrBadRange = errors.New("edge: range not on chunk boundaries")

// Options configure a Server. Every field without a default is required.
type Options struct {
	Meta   Metadata
	Bytes  XorbBytes
	Tokens Tokens
	Signer *urlsign.Signer // signs and verifies the edge's own transfer URLs
	// Origin is the origin's base URL and Transport the round tripper towards it (shared with
	// the internal API client); both serve the proxied routes and the fallback.
	Origin    *url.URL
	Transport http.RoundTripper
	// Permits is how many reconstructions are answered locally at once (0: all proxied).
	Permits int
	// ParallelAt is the term count from which an answer takes extra writer permits.
	ParallelAt int
	// TokenCacheTTL is how long a verified bearer token is trusted without checking its
	// signature again (never past its expiry); 0 means auth.DefaultCacheTTL, negative disables.
	TokenCacheTTL time.Duration
	// PlanCacheBytes and AnswerCacheBytes size the answer cache (answercache.go), which keeps
	// whole-file plans and encoded answers per file in one LRU: its budget is their sum. 0
	// means DefaultPlanCacheBytes and DefaultAnswerCacheBytes; a negative one keeps no plans
	// (PlanCacheBytes) or no encoded answers (AnswerCacheBytes) and adds nothing to the sum.
	PlanCacheBytes   int64
	AnswerCacheBytes int64
	// URLExpiryRound is what the expiry of every signed transfer URL is rounded up to, so that
	// a whole-file answer is the same for every request in one such interval and is served
	// from the answer cache; URLs then live between the signer's TTL and TTL + URLExpiryRound.
	// 0 means DefaultURLExpiryRound; negative signs exact expiries and caches no whole-file
	// answer (terms are still cached).
	URLExpiryRound time.Duration
	// Batch bounds the batch reconstructions the edge answers (files, terms, body bytes; 0:
	// readpath's defaults) and BatchTimeout all of one batch's lookups (0: 10 s).
	Batch        readpath.BatchOptions
	BatchTimeout time.Duration
	// ReadAhead starts the data cache's fills for the first fetch ranges of every answered
	// reconstruction (readahead.go); nil: no read-ahead. ReadAheadBytes bounds the stored
	// bytes read ahead per answer: 0 means DefaultReadAheadBytes, negative turns it off.
	ReadAhead      ReadAhead
	ReadAheadBytes int64
	// ReadAheadIdleBytes bounds the stored bytes per answer read ahead after those, while the
	// data cache has no fill a client waits for (readahead.go): 0 means
	// DefaultReadAheadIdleBytes, negative turns it off.
	ReadAheadIdleBytes int64
	// ReadAheadWait bounds how long a cold answer waits, before it goes out, for its xorbs'
	// layouts and the start of its first fill (readahead.go); 0 means DefaultReadAheadWait.
	ReadAheadWait time.Duration
	// Ready reports whether the edge can serve (/readyz); nil means always.
	Ready func(ctx context.Context) error
	// CorruptErrs are extra sentinels meaning "corrupt bytes from the origin" (the data
	// cache's own), and BadRangeErrs the extra ones meaning ErrBadRange.
	CorruptErrs, BadRangeErrs []error
	Log                       *slog.Logger
	Registerer                prometheus.Registerer
	Now                       func() time.Time
}

// Server serves the edge's routes. It is safe for concurrent use.
type Server struct {
	o       Options
	log     *slog.Logger
	errs    *httpapi.Errors
	permits *permits
	proxy   *httputil.ReverseProxy
	m       *metrics
	mux     *http.ServeMux
	wrapper *httpserver.Wrapper // wrap's token checks, error mapping and request metrics
	// answers caches whole-file plans and encoded answers; maxWriters caps the goroutines of
	// one answer.
	answers    *answerCache
	encodes    singleflight.Group // collapses concurrent encodings of one whole-file answer
	maxWriters int
	// read are the shared read handlers over the edge's source, answering through fresh
	// behind the answer cache (answerLayer).
	read   *readpath.Handlers
	fresh  *readpath.Fresh
	tokens *auth.CachingVerifier
	ra     readAheader
}

// New builds a Server.
func New(o Options) (*Server, error) {
	if o.Meta == nil || o.Bytes == nil || o.Tokens == nil || o.Signer == nil || o.Origin == nil {
		return nil, errors.New("server: Meta, Bytes, Tokens, Signer and Origin are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ParallelAt <= 0 {
		o.ParallelAt = 20000
	}
	if o.PlanCacheBytes == 0 {
		o.PlanCacheBytes = DefaultPlanCacheBytes
	}
	if o.AnswerCacheBytes == 0 {
		o.AnswerCacheBytes = DefaultAnswerCacheBytes
	}
	if o.URLExpiryRound == 0 {
		o.URLExpiryRound = DefaultURLExpiryRound
	}
	if o.ReadAheadWait <= 0 {
		o.ReadAheadWait = DefaultReadAheadWait
	}
	if o.ReadAheadBytes == 0 {
		o.ReadAheadBytes = DefaultReadAheadBytes
	}
	if o.ReadAheadIdleBytes == 0 {
		o.ReadAheadIdleBytes = DefaultReadAheadIdleBytes
	}
	if o.Transport == nil {
		o.Transport = originapi.NewTransport()
	}
	s := &Server{o: o, log: o.Log, m: newMetrics(o.Registerer), ra: readAheader{runs: semaphore.NewWeighted(readAheadRuns), idle: semaphore.NewWeighted(idleRuns)}}
	s.answers = newAnswerCache(o.PlanCacheBytes, o.AnswerCacheBytes, s.m)
	s.tokens = auth.NewCachingVerifier(o.Tokens, auth.CacheOptions{TTL: o.TokenCacheTTL, Now: o.Now})
	s.maxWriters = min(maxWriters, runtime.GOMAXPROCS(0))
	s.permits = newPermits(o.Permits, s.m.permitsInUse)
	s.errs = httpapi.NewErrors(httpapi.ErrorsOptions{Log: o.Log, Extra: s.rules()})
	s.proxy = s.newProxy()
	s.wrapper = s.newWrapper()
	src := (*source)(s)
	s.fresh = &readpath.Fresh{Source: src, Signer: o.Signer, ExpiryRound: o.URLExpiryRound, ParallelAt: func() int { return o.ParallelAt },
		MaxWriters: s.maxWriters, TakeWriters: s.permits.takeHalf, ReleaseWriters: s.permits.release, Parallel: s.m.parallel}
	var err error
	if s.read, err = readpath.New(readpath.Options{Source: src, Signer: o.Signer, Answerer: (*answerLayer)(s),
		Unranged: readpath.SignedRanges, Begin: transferBatch, Recon: s.m.recon, TransferBytes: s.m.transferBytes,
		Now: o.Now}); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// rules map the edge's sentinels; they are checked before the shared ones. Nothing here is a
// 503: an unusable origin is a 502 (or 504 when it did not answer in time).
func (s *Server) rules() []httpapi.Rule {
	r := []httpapi.Rule{
		{Err: originapi.ErrNotFound, Status: http.StatusNotFound, Code: "not_found"},
		{Err: originapi.ErrTimeout, Status: http.StatusGatewayTimeout, Code: "origin_timeout"},
		{Err: originapi.ErrUnavailable, Status: http.StatusBadGateway, Code: "origin_unavailable"},
		{Err: metacache.ErrMissingLayout, Status: http.StatusBadGateway, Code: "origin_inconsistent"},
		{Err: recon.ErrTermMismatch, Status: http.StatusBadGateway, Code: "origin_inconsistent"},
		{Err: ErrCorrupt, Status: http.StatusBadGateway, Code: "origin_corrupt"},
		{Err: ErrBadRange, Status: http.StatusRequestedRangeNotSatisfiable, Code: "bad_range"},
		{Err: ErrBadPrefix, Status: http.StatusBadRequest, Code: "bad_prefix"},
		{Err: context.DeadlineExceeded, Status: http.StatusGatewayTimeout, Code: "origin_timeout"},
	}
	for _, e := range s.o.CorruptErrs {
		r = append(r, httpapi.Rule{Err: e, Status: http.StatusBadGateway, Code: "origin_corrupt"})
	}
	for _, e := range s.o.BadRangeErrs {
		r = append(r, httpapi.Rule{Err: e, Status: http.StatusRequestedRangeNotSatisfiable, Code: "bad_range"})
	}
	return r
}

// isCorrupt reports whether err means the origin sent bytes that failed verification.
func (s *Server) isCorrupt(err error) bool {
	if errors.Is(err, ErrCorrupt) {
		return true
	}
	for _, e := range s.o.CorruptErrs {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Handler is the handler of every client listener (TLS TCP, HTTP/3, plain HTTP).
func (s *Server) Handler() http.Handler { return httpapi.WithRequestID(s.mux) }

func (s *Server) routes() {
	m := http.NewServeMux()
	local := func(pattern string, need auth.Access, fn handlerFunc) {
		m.Handle(pattern, s.wrap(pattern, need, fn))
	}
	proxied := func(pattern string) {
		m.Handle(pattern, s.wrap(pattern, "", s.forward))
	}
	open := auth.Access("")
	local("GET /v1/reconstructions/{file}", auth.Read, s.permitted(s.read.ReconV1))
	local("GET /v2/reconstructions/{file}", auth.Read, s.permitted(s.read.ReconV2))
	local("HEAD /v1/files/{file}", auth.Read, s.read.HeadFile)
	local("GET "+urlsign.PathPrefix+"{hash}", open, s.read.Transfer)
	local("GET /healthz", open, s.healthz)
	local("GET /readyz", open, s.readyz)
	proxied("POST /v1/xorbs/{prefix}/{hash}")
	proxied("HEAD /v1/xorbs/{prefix}/{hash}")
	proxied("POST /v1/shards")
	proxied("POST /v2/shards")
	proxied("POST /v1/telemetry")
	proxied("GET /v1/chunks/{prefix}/{hash}")
	local("GET /v1/reconstructions", auth.Read, s.permitted(s.read.Batch(s.batchOptions())))
	local("POST /v1/reconstructions", auth.Read, s.permitted(s.read.Batch(s.batchOptions())))
	proxied("GET /api/{type}/{namespace}/{name}/{op}/{rev...}")
	proxied("DELETE /v1/files/{file}") // deletion (docs/protocol.md §17); edges learn it from the events
	proxied("DELETE /v1/scope")
	local("/", open, func(http.ResponseWriter, *http.Request) error { return httpapi.ErrNotFound })
	s.mux = m
}
