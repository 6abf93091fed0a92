// Package server is the origin's HTTP service: the Xet CAS routes stock clients use (xorb and
// shard uploads, reconstructions, global dedup, telemetry), the signed transfer route, the
// Hub-compatible token route, the internal API edges use, and the health and admin endpoints.
//
// Handlers are short: parse, call one service method (ingest, index, recon), encode. Errors
// are returned to one wrapper, which maps them to a status and JSON body with httpapi.Errors.
//
//	client ─┬─ /v1/xorbs, /v1|v2/shards ──────────► ingest.Service ─► objects, then index
//	        ├─ /v1|v2/reconstructions, /v1/files ─► readpath.Handlers ─► Source.File (index.File)
//	        │                                        ─► readpath.Fresh: recon.Plan ─► recon.Encoder
//	        ├─ /v1/reconstructions (batch) ───────► readpath.Handlers.Batch ─► Source.File per file
//	        ├─ /v1/chunks ────────────────────────► index.DedupXorbs ─► shard.DedupAnswer
//	        └─ /v1/transfer/xorbs (signed URL) ───► readpath.Handlers.Transfer ─► Source.Visible
//	                                                 (index.Visible) ─► objects.GetRange
//	edge ───── /internal/v1/... (edge token) ─────► index, objects, key set
package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/edgereg"
	"github.com/xetcdn/xetcdn/origin/internal/hub"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/origin/internal/keys"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/origin/internal/regions"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httpserver"
	"github.com/xetcdn/xetcdn/shared/internalapi"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Index is the part of the index the server uses.
type Index interface {
	ingest.Index
	index.Raw
	File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error)
	Visible(ctx context.Context, h hash.Hash, scope string) error
	DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error)
	Events(ctx context.Context, after int64, limit int) ([]index.Event, error)
	Ping(ctx context.Context) error
	index.Lifecycle // deletion and usage (lifecycle.go)
}

var _ Index = index.Index(nil)

// Objects is the part of the object store the server uses.
type Objects interface {
	ingest.Objects
	// GetRange returns n bytes of key from offset off. The caller closes the reader.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	Ping(ctx context.Context) error
}

// Options configure a Server. Config, Index, Objects and Keys are required.
type Options struct {
	Config  *config.Config
	Index   Index
	Objects Objects
	Keys    *keys.Keys
	Log     *slog.Logger
	// Registerer receives the origin's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Extra error rules, checked before the built-in ones (which map the index's, the object
	// store's and ingest's sentinels) and the shared ones.
	ErrorRules []httpapi.Rule
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// DependencyTimeout bounds a whole batch reconstruction's lookups (each call is bounded by
	// the index and object store decorators backend.Open puts around Index and Objects):
	// 0 = DefaultDependencyTimeout, < 0 = unbounded.
	DependencyTimeout time.Duration
	// Hub, when set, serves the Hub-compatible repositories API (origin/internal/hub,
	// docs/hub.md) on the main listener: /api/..., /{ns}/{name}/resolve/..., and the hf_ tokens
	// and public repositories of the token route. Its Registered hook is fed by ingest.
	Hub *hub.Service
	// TokenCacheTTL is how long a verified bearer token is trusted without checking its
	// signature again (auth.CachingVerifier): 0 = auth.DefaultCacheTTL, < 0 = never cached.
	TokenCacheTTL time.Duration
	// Edges is the edge registry (POST /internal/v1/edges, read tokens' casUrl); nil = no
	// registry: read tokens carry Config.EdgeURL. Regions places callers and is required
	// with Edges.
	Edges   *edgereg.Registry
	Regions *regions.Map
}

// Server serves the origin's routes. Build it with New; it is safe for concurrent use.
type Server struct {
	cfg      *config.Config
	idx      Index
	objs     Objects
	keys     *keys.Keys
	log      *slog.Logger
	now      func() time.Time
	errs     *httpapi.Errors
	verifier *auth.Verifier
	tokens   *auth.CachingVerifier // verifier behind a cache of verified tokens; requests use this
	jwks     []byte
	signer   *urlsign.Signer
	ingest   *ingest.Service
	ingestMu *semaphore.Weighted  // bytes of upload bodies held in memory
	scopes   *scopeSlots          // uploads in flight per scope
	conns    *httpapi.ConnLimiter // the main listener's connection cap (ConnLimits)
	permits  *permits             // extra goroutines for writing big reconstruction answers
	m        *metrics
	wrapper  *httpserver.Wrapper // wrap's error mapping, token checks and request metrics
	mux      *http.ServeMux
	read     *readpath.Handlers // the read routes (recon, HEAD file, batch, transfer)
	fresh    *readpath.Fresh    // read's Answerer
	deps     time.Duration      // Options.DependencyTimeout in effect (<= 0: unbounded)
	hub      *hub.Service       // nil: no Hub API
	noEntry  dedupMiss          // the dedup route's 404 (dedup.go)
	absent   index.DedupFilter  // nil: the index has no in-memory dedup filter

	edges   *edgereg.Registry // nil: no registry (edges.go)
	regions *regions.Map
	em      *edgeMetrics

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain: long polls answer at once
}

// New builds a Server.
func New(o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	ks, err := o.Keys.KeySet()
	if err != nil {
		return nil, err
	}
	jwks, err := ks.MarshalJSON()
	if err != nil {
		return nil, err
	}
	signer, err := urlsign.New(urlsign.Options{BaseURL: o.Config.PublicURL, Key: o.Keys.Transfer,
		TTL: o.Config.Auth.TransferURLTTL.D(), Now: o.Now})
	if err != nil {
		return nil, err
	}
	if o.Edges != nil && o.Regions == nil {
		if o.Regions, err = regions.Parse(regions.Config{}); err != nil {
			return nil, err
		}
	}
	rules := append(append([]httpapi.Rule(nil), o.ErrorRules...), baseRules()...)
	if o.DependencyTimeout == 0 {
		o.DependencyTimeout = DefaultDependencyTimeout
	}
	s := &Server{
		cfg:  o.Config,
		idx:  o.Index,
		objs: o.Objects,
		keys: o.Keys,
		log:  o.Log,
		now:  o.Now,
		errs: httpapi.NewErrors(httpapi.ErrorsOptions{Log: o.Log, Extra: rules}),
		verifier: auth.NewVerifier(ks, auth.VerifierOptions{Now: o.Now,
			Leeway: o.Config.Auth.Leeway.D()}),
		jwks:     jwks,
		signer:   signer,
		ingestMu: semaphore.NewWeighted(o.Config.Limits.IngestMemory),
		scopes:   newScopeSlots(o.Config.Limits.UploadsPerScope),
		permits:  newPermits(o.Config.Limits.ReconPermits),
		m:        newMetrics(o.Registerer),
		deps:     o.DependencyTimeout,
		hub:      o.Hub,
		edges:    o.Edges,
		regions:  o.Regions,
		em:       newEdgeMetrics(o.Registerer),
		draining: make(chan struct{}),
	}
	s.noEntry = newDedupMiss(s.errs)
	s.absent, _ = index.DedupFilterOf(o.Index)
	s.conns = httpapi.NewConnLimiter(o.Config.Limits.MaxConnections, o.Config.Limits.MaxConnectionsPerIP)
	s.conns.OnRefuse = s.m.connRefused.Inc
	if o.Registerer != nil {
		o.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xet_origin_connections_open",
			Help: "Connections holding a slot of limits.max_connections on the main listener."},
			func() float64 { return float64(s.conns.Open()) }))
	}
	s.tokens = auth.NewCachingVerifier(s.verifier, auth.CacheOptions{TTL: o.TokenCacheTTL, Now: o.Now})
	iopts := ingest.Options{Index: o.Index, Objects: o.Objects, Registerer: o.Registerer}
	if o.Hub != nil {
		iopts.Registered = o.Hub.Registered
		o.Hub.SetVerifyCAS(func(r *http.Request) (*auth.Claims, error) { return s.tokens.VerifyRequest(r) })
		o.Hub.SetMintCAS(func(scope string, ttl time.Duration) (string, error) {
			tok, _, err := o.Keys.Signing.Mint(scope, auth.Write, o.Now(), ttl)
			return tok, err
		})
	}
	s.ingest = ingest.New(iopts)
	s.wrapper = s.newWrapper()
	src := Source{Index: o.Index, Objects: o.Objects}
	s.fresh = &readpath.Fresh{Source: src, Signer: signer, ParallelAt: func() int { return s.cfg.Limits.ReconParallelAt },
		MaxWriters: maxParallelWriters, TakeWriters: s.permits.takeHalf, ReleaseWriters: s.permits.release,
		Parallel: s.m.reconParallel}
	if s.read, err = readpath.New(readpath.Options{Source: src, Signer: signer, Answerer: s.fresh,
		Unranged: readpath.WholeObject, Recon: s.m.recon, TransferBytes: s.m.transferBytes, Now: o.Now}); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// baseRules map the origin's own sentinels to HTTP answers.
func baseRules() []httpapi.Rule {
	return []httpapi.Rule{
		{Err: index.ErrNotFound, Status: http.StatusNotFound, Code: "not_found"},
		{Err: ErrHubRepository, Status: http.StatusConflict, Code: "hub_repository"},
		{Err: index.ErrUnavailable, Status: http.StatusServiceUnavailable, Code: "index_unavailable"},
		{Err: ErrScopeBusy, Status: http.StatusTooManyRequests, Code: "too_many_uploads"},
		{Err: ErrIngestBusy, Status: http.StatusServiceUnavailable, Code: "ingest_busy"},
		{Err: ErrBodyDeadline, Status: http.StatusRequestTimeout, Code: "body_deadline"},
		{Err: ingest.ErrBadPrefix, Status: http.StatusBadRequest, Code: "bad_prefix"},
		{Err: ingest.ErrMissingXorb, Status: http.StatusBadRequest, Code: "missing_xorb"},
		{Err: ingest.ErrRejected, Status: http.StatusBadRequest, Code: "shard_rejected"},
		{Err: recon.ErrTermMismatch, Status: http.StatusInternalServerError, Code: "internal"},
		{Err: objstore.ErrUnavailable, Status: http.StatusServiceUnavailable, Code: "store_unavailable"},
		{Err: objstore.ErrNotFound, Status: http.StatusNotFound, Code: "not_found"},
		{Err: objstore.ErrRange, Status: http.StatusRequestedRangeNotSatisfiable, Code: "range_not_satisfiable"},
	}
}

// Drain makes waiting long polls answer now, so a graceful shutdown does not wait for them.
// It is idempotent; pass it to Serve as the shutdown hook.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// Handler is the main listener's handler.
func (s *Server) Handler() http.Handler { return httpapi.WithRequestID(s.mux) }

func (s *Server) routes() {
	m := http.NewServeMux()
	h := func(pattern string, need auth.Access, fn handlerFunc) {
		m.Handle(pattern, s.wrap(pattern, need, fn))
	}
	open := auth.Access("") // no token needed
	h("POST /v1/xorbs/{prefix}/{hash}", auth.Write, s.postXorb)
	h("HEAD /v1/xorbs/{prefix}/{hash}", auth.Read, s.headXorb)
	h("POST /v1/shards", auth.Write, s.postShardV1)
	h("POST /v2/shards", auth.Write, s.postShardV2)
	h("GET /v1/reconstructions/{file}", auth.Read, s.read.ReconV1)
	h("GET /v2/reconstructions/{file}", auth.Read, s.read.ReconV2)
	h("HEAD /v1/files/{file}", auth.Read, s.read.HeadFile)
	h("GET /v1/reconstructions", auth.Read, s.read.Batch(s.batchOptions()))
	h("POST /v1/reconstructions", auth.Read, s.read.Batch(s.batchOptions()))
	h("GET /v1/chunks/{prefix}/{hash}", auth.Read, s.dedup)
	h("POST /v1/telemetry", auth.Read, s.telemetry)
	h("GET "+urlsign.PathPrefix+"{hash}", open, s.read.Transfer)
	h("GET /api/{type}/{namespace}/{name}/{op}/{rev...}", open, s.hubToken)
	h("GET "+internalapi.FilesPattern, auth.Edge, s.internalFile)
	h("GET "+internalapi.LayoutsPath, auth.Edge, s.internalLayouts)
	h("GET "+internalapi.XorbsPattern, auth.Edge, s.internalXorb)
	h("GET "+internalapi.JWKSPath, auth.Edge, s.internalJWKS)
	h("GET "+internalapi.EventsPath, auth.Edge, s.internalEvents)
	s.lifecycleRoutes(h)
	h("POST "+internalapi.EdgesPath, auth.Edge, s.edgeReport)
	h("GET /healthz", open, s.healthz)
	h("GET /readyz", open, s.readyz)
	h("/api/", open, s.hubAPI)
	h("/", open, func(w http.ResponseWriter, r *http.Request) error {
		if s.hub != nil && s.hub.ServeResolve(w, r) {
			return nil
		}
		return httpapi.ErrNotFound
	})
	s.mux = m
}
