// Package edge assembles the xetcdn edge for cmd/xet-edge: configuration, the origin client,
// token verification, the metadata cache with its visibility event loop, the xorb byte source,
// the HTTP server and its listeners (TLS h1/h2 + HTTP/3 on one port, plain HTTP, admin).
package edge

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/edge/internal/certs"
	"github.com/xetcdn/xetcdn/edge/internal/config"
	"github.com/xetcdn/xetcdn/edge/internal/metacache"
	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/edge/internal/server"
	"github.com/xetcdn/xetcdn/edge/internal/tokens"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/memtune"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// The edge's metadata cache fetches a cold answer's layouts in one request (server.readAhead
// asks Options.Meta for it by type assertion).
var _ server.LayoutWarmer = (*metacache.Cache)(nil)

// transferKeyFile holds the HMAC key of the edge's transfer URLs (32 bytes, mode 0600). Edges
// behind one load balancer must share it (cache.key_dir on shared storage, or a copied file).
const transferKeyFile = "transfer.key"

// Edge is a started edge. Wait for it to stop after cancelling the context given to Start.
type Edge struct {
	lns  *server.Listeners
	src  readpath.Source
	done chan struct{}
	err  error
}

// ErrConfig wraps every configuration problem Run reports (one per line of the error's text).
var ErrConfig = config.ErrInvalid

// PrintFlags writes the server's flags, with their descriptions and defaults, to w.
func PrintFlags(w io.Writer) { config.PrintFlags(w) }

// Run starts the edge from args and getenv and serves until ctx is cancelled, then drains.
func Run(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger, reg *prometheus.Registry) error {
	e, err := Start(ctx, args, getenv, log, reg)
	if err != nil {
		return err
	}
	return e.Wait()
}

// Start loads the configuration, binds the listeners and starts serving in the background.
// It returns once the listeners are bound (so /healthz answers). Metrics go to reg, which the
// admin listener serves with pprof.
func Start(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger, reg *prometheus.Registry) (*Edge, error) {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return nil, err
	}
	memtune.Apply(log, cfg.MemoryLimit(), cfg.GCPercent()) // docs/edge.md "Memory"
	atLeastTwoProcs(log, getenv)
	origins, err := originapi.ParseOrigins(cfg.Origin) // checked by config.Validate
	if err != nil {
		return nil, err
	}
	var rt http.RoundTripper // nil: originapi's own transport
	if len(origins) > 1 {
		// Several origin replicas: every call to the first URL goes to the one in use, the
		// next when it does not answer (originapi.Failover; docs/edge.md "Several origins").
		rt = originapi.NewFailover(originapi.NewTransport(), origins)
	}
	client, err := originapi.New(originapi.Options{BaseURL: origins[0].String(), Token: cfg.OriginToken,
		Timeout: cfg.Limits.OriginTimeout.D(), Transport: rt, Registerer: reg})
	if err != nil {
		return nil, err
	}
	verifier, err := tokens.New(ctx, tokens.Options{Source: client, Leeway: cfg.Auth.Leeway.D(),
		Refresh: cfg.Auth.JWKSRefresh.D(), FetchTimeout: cfg.Limits.OriginTimeout.D(), Log: log, Registerer: reg})
	if err != nil {
		log.Warn("token keys not fetched from the origin yet; retrying", "err", err)
	}
	key, err := loadOrCreateKey(filepath.Join(cfg.Auth.KeyDir, transferKeyFile))
	if err != nil {
		return nil, err
	}
	cert, err := loadCert(cfg)
	if err != nil {
		return nil, err
	}
	lns, err := server.Listen(cfg.Listen, cfg.HTTPListen, cfg.AdminListen)
	if err != nil {
		return nil, err
	}
	if cfg.PublicURL == "" {
		cfg.PublicURL = config.DefaultPublicURL(lns.TLS.Addr().String())
	}
	signer, err := urlsign.New(urlsign.Options{BaseURL: cfg.PublicURL, Key: key, TTL: cfg.Auth.TransferURLTTL.D()})
	if err != nil {
		lns.Close()
		return nil, err
	}
	meta, err := metacache.New(metacache.Options{Origin: client, MaxBytes: cfg.Cache.MetaBytes,
		ExpectedEntries: cfg.Cache.MetaEntries, VisibilityTTL: cfg.Cache.VisibilityTTL.D(),
		RefreshAhead: cfg.RefreshAhead(),
		FillTimeout:  cfg.Limits.FillTimeout.D(), Registerer: reg})
	if err != nil {
		lns.Close()
		return nil, err
	}
	data, err := openData(ctx, cfg, client, log, reg)
	if err != nil {
		meta.Close()
		lns.Close()
		return nil, err
	}
	ready := func(ctx context.Context) error {
		perr := client.Ping(ctx)
		if perr == nil || (verifier.Ready() && meta.Usable()) {
			return nil
		}
		return fmt.Errorf("origin unreachable and nothing cached: %w", perr)
	}
	srv, err := server.New(server.Options{
		Meta: meta, Bytes: data.bytes, Tokens: verifier, Signer: signer,
		ReadAhead: data.readAhead, ReadAheadBytes: cfg.Cache.ReadAheadBytes,
		ReadAheadIdleBytes: cfg.Cache.ReadAheadIdleBytes,
		Origin:             client.Base(), Transport: client.Transport(),
		Permits: cfg.Permits, ParallelAt: cfg.Limits.ReconParallelAt,
		PlanCacheBytes: cfg.Cache.PlanBytes, AnswerCacheBytes: cfg.Cache.AnswerBytes,
		CorruptErrs: data.corrupt, BadRangeErrs: data.badRange,
		Batch:        readpath.BatchOptions{Files: cfg.Limits.BatchFiles, Terms: cfg.Limits.BatchTerms, Body: cfg.Limits.BatchBody},
		BatchTimeout: cfg.Limits.OriginTimeout.D(),
		Ready:        ready, Log: log, Registerer: reg,
	})
	if err != nil {
		meta.Close()
		data.close()
		lns.Close()
		return nil, err
	}
	e := &Edge{lns: lns, src: srv.Source(), done: make(chan struct{})}
	bg, stopBG := context.WithCancel(ctx)
	go verifier.Run(bg)
	go followEvents(bg, client, meta, data.evict, cfg.Limits.EventsWait.D(), log)
	if every := cfg.Limits.IdleRelease.D(); every > 0 {
		go runIdleRelease(bg, every, reg) // docs/edge.md "Memory"
	}
	registered := make(chan struct{}) // closed once the last registry report is sent
	if cfg.Register {
		rep := &reporter{cfg: cfg, ready: ready}
		if reg != nil {
			rep.g = reg
		}
		go func() { defer close(registered); register(bg, client, rep, log) }()
	} else {
		close(registered)
	}
	log.Info("xet-edge serving", "listen", lns.TLS.Addr().String(), "http_listen", addr(lns.HTTP),
		"admin_listen", addr(lns.Admin), "origin", cfg.Origin, "public_url", cfg.PublicURL, "permits", cfg.Permits,
		"region", cfg.Region, "register", cfg.Register)
	go func() {
		defer close(e.done)
		e.err = server.Serve(ctx, log, lns, cert, srv.Handler(), srv.Admin(reg), cfg.Limits.ShutdownGrace.D(),
			connLimits(cfg, reg))
		stopBG()
		<-registered // the "not ready" report (bounded by 2 s) lands before the process exits
		// The servers have stopped: nothing uses the caches any more.
		meta.Close()
		if err := data.close(); err != nil && e.err == nil {
			e.err = err
		}
	}()
	return e, nil
}

// Wait blocks until the edge has drained and closed its caches, and returns why it stopped.
func (e *Edge) Wait() error {
	<-e.done
	return e.err
}

// Source is the edge's read path under the shared handlers: metadata cache (records,
// visibility, layouts) and data cache in front of the origin (readpath.Source).
func (e *Edge) Source() readpath.Source { return e.src }

// TLSAddr is the TLS (and HTTP/3) address; HTTPAddr and AdminAddr are "" when off.
func (e *Edge) TLSAddr() string   { return e.lns.TLS.Addr().String() }
func (e *Edge) HTTPAddr() string  { return addr(e.lns.HTTP) }
func (e *Edge) AdminAddr() string { return addr(e.lns.Admin) }

func addr(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func loadCert(cfg *config.Config) (tls.Certificate, error) {
	if cfg.TLS.CertFile != "" {
		return certs.Load(cfg.TLS.CertFile, cfg.TLS.KeyFile)
	}
	var hosts []string
	if h, _, err := net.SplitHostPort(cfg.Listen); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	if u, err := url.Parse(cfg.PublicURL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	return certs.LoadOrCreate(cfg.TLSDir(), hosts)
}

// loadOrCreateKey reads a 32-byte key, creating it (mode 0600) on first start.
func loadOrCreateKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) < urlsign.MinKeyLen {
			return nil, fmt.Errorf("%s holds %d bytes, want %d", path, len(b), urlsign.MinKeyLen)
		}
		return b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	key := make([]byte, urlsign.MinKeyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return loadOrCreateKey(path) // another process created it first
	}
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return key, nil
}

// followEvents applies the origin's visibility revocations to the metadata cache until ctx
// ends. It starts from the beginning of the stream (replaying old revocations is harmless on
// an empty cache) and backs off while the origin is unreachable.
func followEvents(ctx context.Context, client *originapi.Client, meta *metacache.Cache, evict func([]hash.Hash) int,
	wait time.Duration, log *slog.Logger) {
	var after int64
	backoff := time.Second
	for ctx.Err() == nil {
		evs, err := client.Events(ctx, after, wait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("visibility events from the origin", "err", err, "retry_in", backoff.String())
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		for _, ev := range evs {
			if len(ev.Xorbs) > 0 { // the origin's garbage collection deleted these xorbs
				n := evict(ev.Xorbs)
				log.Info("evicted deleted xorbs", "xorbs", len(ev.Xorbs), "segments", n, "seq", ev.Seq)
			}
			meta.Revoke(ev.Scope, ev.Files)
			after = max(after, ev.Seq)
		}
	}
}

// connLimits are the client connection bounds of cfg; connections closed for the per-address
// cap are counted in xet_edge_connections_refused_total.
func connLimits(cfg *config.Config, reg prometheus.Registerer) server.ConnLimits {
	l := cfg.Limits
	lim := httpapi.NewConnLimiter(l.MaxConnections, l.MaxConnectionsPerIP)
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_connections_refused_total",
		Help: "Client connections closed at accept because their address was at limits.max_connections_per_ip."})
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xet_edge_connections_open",
		Help: "Client connections holding a slot of limits.max_connections."}, func() float64 { return float64(lim.Open()) })
	if reg != nil {
		reg.MustRegister(refused, open)
	}
	lim.OnRefuse = refused.Inc
	return server.ConnLimits{Limiter: lim, ServerLimits: httpapi.ServerLimits{
		ReadHeaderTimeout: l.ReadHeaderTimeout.D(), IdleTimeout: l.IdleTimeout.D(),
		WriteProgress: l.WriteProgress.D(), MaxStreams: l.MaxStreams}}
}

// atLeastTwoProcs runs Go code on two processors (Ps) where the runtime would use one (an edge
// given one CPU), unless GOMAXPROCS is set. With one P a busy edge serves its clients late: the
// fills' verification keeps the P busy, and a goroutine whose client socket became writable
// runs only when the runtime next polls the network, which a P that always has work does about
// every 10 ms; clients then stood still while the edge verified bytes for later. With two, the
// idle P waits in the network poller and runs such a goroutine at once, and the data cache
// leaves it free: fills verify on GOMAXPROCS-1 Ps (datacache's gate) (perf/BENCHMARKS.md,
// 2026-12-04, "read-ahead while idle"; docs/decisions.md).
func atLeastTwoProcs(log *slog.Logger, getenv func(string) string) {
	if getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) >= 2 {
		return
	}
	runtime.GOMAXPROCS(2)
	log.Info("processors set", "gomaxprocs", 2, "cpus", runtime.NumCPU())
}
