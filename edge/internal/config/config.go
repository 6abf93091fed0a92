// Package config is the edge's one typed configuration: defaults, an optional JSON file, flags
// that override the file, and the origin token, which may also come from the environment.
//
// Precedence, lowest first: Default(), the --config file, command-line flags, environment
// (only when the flag was not given). Validate reports every problem at once.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/edge/internal/server"
	"github.com/xetcdn/xetcdn/shared/configfile"
	"github.com/xetcdn/xetcdn/shared/internalapi"
	"github.com/xetcdn/xetcdn/shared/memtune"
	"github.com/xetcdn/xetcdn/shared/readpath"
)

// EnvOriginToken holds the edge's origin token when --origin-token is not given, so the secret
// need not appear in the process list.
const EnvOriginToken = "XETCDN_EDGE_ORIGIN_TOKEN"

const (
	defaultListen = "127.0.0.1:8443"
	tlsDirName    = "tls"
	keysDirName   = "keys"
	dataDirName   = "xorbs"
)

// Config is the whole configuration of xet-edge. The JSON names are the file's keys.
type Config struct {
	// Origin is the origin's base URL (internal API, proxied routes); several (replicas of one
	// origin): comma-separated, the next used when one does not answer.
	Origin      string `json:"origin"`
	OriginToken string `json:"-"`            // access "edge" token; flag or env only
	DataDir     string `json:"data_dir"`     // TLS cert, URL key, xorb data cache
	Listen      string `json:"listen"`       // TLS: HTTP/1.1 + HTTP/2 on TCP, HTTP/3 on UDP
	HTTPListen  string `json:"http_listen"`  // plain HTTP (behind a TLS-terminating LB); empty = off
	AdminListen string `json:"admin_listen"` // /metrics, and pprof and admin routes for admin tokens; empty = off; no host = loopback
	// PublicURL is the edge's base URL as clients reach it: the base of the transfer URLs it
	// signs. Empty = "https://" + the bound TLS address (see DefaultPublicURL).
	PublicURL string `json:"public_url"`
	// Permits bounds the reconstructions answered locally at once; when none is free the
	// request is proxied to the origin. 0 proxies every reconstruction.
	Permits int `json:"permits"`
	// Region is the region the edge serves (docs/edge.md, "Registration"); it must be one of
	// the origin's regions.order when the origin configures regions. Default "default".
	Region string `json:"region"`
	// Register: report to the origin's edge registry at start and every few seconds, so the
	// token route hands this edge out. Default true.
	Register bool `json:"register"`

	TLS    TLS    `json:"tls"`
	Cache  Cache  `json:"cache"`
	Auth   Auth   `json:"auth"`
	Limits Limits `json:"limits"`
}

// TLS names the certificate. Both empty = a self-signed ECDSA certificate kept in DataDir/tls.
type TLS struct {
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// Cache sizes the caches.
type Cache struct {
	MetaBytes int64 `json:"meta_bytes"` // ristretto budget for file records and layouts
	// MetaEntries is the expected number of cached items; ristretto counts 10x as many keys.
	MetaEntries   int64    `json:"meta_entries"`
	DataDir       string   `json:"data_dir"`       // default DataDir/xorbs
	DataBytes     int64    `json:"data_bytes"`     // on-disk xorb bytes
	VisibilityTTL Duration `json:"visibility_ttl"` // how long a (file, scope) check is trusted
	// VisibilityRefreshAhead: a (file, scope) answer that a request used is re-checked with
	// the origin in the background this long before it expires, so requests of files asked
	// at least once per VisibilityTTL never wait for the re-check. 0 = a sixth of
	// VisibilityTTL (5 s of 30 s), negative = off; else it must be below VisibilityTTL.
	VisibilityRefreshAhead Duration `json:"visibility_refresh_ahead"`
	// PlanBytes and AnswerBytes size the answer cache, one LRU of per-file whole-file plans
	// and encoded answers: its budget is their sum. PlanBytes < 0 keeps no plans, AnswerBytes
	// < 0 no encoded answers; a negative one adds nothing to the sum.
	PlanBytes   int64 `json:"plan_bytes"`
	AnswerBytes int64 `json:"answer_bytes"`
	// FillBufferBytes is the ceiling on the receive buffers of the data cache's fills from the
	// origin (datacache.Options.BufferMemory); fills beyond it wait for a buffer.
	FillBufferBytes int64 `json:"fill_buffer_bytes"`
	// ReadAheadBytes bounds the stored bytes of an answered reconstruction's first fetch ranges
	// whose fills start when it is answered (server.Options.ReadAheadBytes); 0 = the default
	// (server.DefaultReadAheadBytes), negative = no read-ahead.
	ReadAheadBytes int64 `json:"read_ahead_bytes"`
	// ReadAheadIdleBytes bounds the stored bytes of an answered reconstruction read ahead after
	// those, while no client's fill runs (server.Options.ReadAheadIdleBytes); 0 = the default
	// (server.DefaultReadAheadIdleBytes), negative = none.
	ReadAheadIdleBytes int64 `json:"read_ahead_idle_bytes"`
}

// Auth configures keys and lifetimes.
type Auth struct {
	KeyDir         string   `json:"key_dir"`          // default DataDir/keys: transfer.key
	TransferURLTTL Duration `json:"transfer_url_ttl"` // lifetime of the URLs the edge signs
	Leeway         Duration `json:"leeway"`           // clock skew tolerated on token exp/iat
	JWKSRefresh    Duration `json:"jwks_refresh"`     // periodic refresh of the origin's keys
}

// Limits bound waits and resources.
type Limits struct {
	// OriginTimeout bounds one call to the origin's internal API; a miss then fails with 504.
	OriginTimeout Duration `json:"origin_timeout"`
	// FillTimeout bounds a cache fill shared by several requests (it outlives the first caller).
	FillTimeout     Duration `json:"fill_timeout"`
	ReconParallelAt int      `json:"recon_parallel_at"` // terms from which extra writers are used
	ShutdownGrace   Duration `json:"shutdown_grace"`    // drain time on SIGTERM
	EventsWait      Duration `json:"events_wait"`       // long-poll of the origin's event stream
	// Client connections (docs/edge.md, "Bounded waiting"): at most MaxConnections open over
	// the TLS, plain HTTP and QUIC listeners together (TCP ones over it wait to be accepted,
	// QUIC ones are closed), at most MaxConnectionsPerIP from one address (0 = no per-address
	// cap). An answer whose writes make no progress for WriteProgress is cut off; a connection
	// without requests is closed after IdleTimeout; a request header must arrive within
	// ReadHeaderTimeout; one HTTP/2 or HTTP/3 connection has at most MaxStreams open streams.
	MaxConnections      int      `json:"max_connections"`
	MaxConnectionsPerIP int      `json:"max_connections_per_ip"`
	WriteProgress       Duration `json:"write_progress"`
	IdleTimeout         Duration `json:"idle_timeout"`
	ReadHeaderTimeout   Duration `json:"read_header_timeout"`
	MaxStreams          int      `json:"max_streams"`
	// MemoryLimit is the Go runtime's soft memory limit (debug.SetMemoryLimit) in bytes: the
	// collector works harder, and returns memory to the system sooner, as the heap nears it.
	// 0 = MemoryBudget() (the caches' budgets plus the working set); negative = no limit.
	MemoryLimit int64 `json:"memory_limit"`
	// GCPercent is the Go collector's heap growth target (debug.SetGCPercent, GOGC): 0 =
	// DefaultGCPercent, -1 = the runtime's own (the GOGC environment variable, else 100).
	GCPercent int `json:"gc_percent"`
	// IdleRelease is how often the edge checks whether it has gone quiet after allocating (a
	// burst ended) and then collects and returns its free heap to the system at once, instead
	// of keeping the garbage the growth target allowed until the next busy period; <= 0 = off.
	IdleRelease Duration `json:"idle_release"`
	// Batch reconstructions answered by the edge (GET|POST /v1/reconstructions): at most
	// BatchFiles file ids, BatchTerms terms summed over the distinct files, POST bodies of at
	// most BatchBody bytes; more is 413. The same keys and defaults as the origin's.
	BatchFiles int   `json:"batch_files"`
	BatchTerms int   `json:"batch_terms"`
	BatchBody  int64 `json:"batch_body"`
}

// RefreshAhead is how long before a used visibility answer expires the edge re-checks it in
// the background (cache.visibility_refresh_ahead): 0 means a sixth of the TTL, so a file asked
// all the time is re-checked every 25 s instead of 30 s by default, with 5 s for the origin to
// answer; negative means off (0).
func (c *Config) RefreshAhead() time.Duration {
	switch ra := c.Cache.VisibilityRefreshAhead.D(); {
	case ra < 0:
		return 0
	case ra == 0:
		return c.Cache.VisibilityTTL.D() / 6
	default:
		return ra
	}
}

// DefaultGCPercent is limits.gc_percent when 0. The edge's live heap is mostly its caches, far
// below the memory limit, and at the Go default (100) a warm edge answering 1,000
// reconstructions/s collected every 2-3 s, marking the whole cache each time; 400 collects about
// a quarter as often while the memory limit still caps the heap (docs/edge.md "Memory").
const DefaultGCPercent = memtune.DefaultGCPercent

// GCPercent is the collector target to apply (memtune.GCPercent): 0 means leave the runtime's own.
func (c *Config) GCPercent() int { return memtune.GCPercent(c.Limits.GCPercent) }

// MemoryLimit is the soft memory limit to apply (memtune.MemoryLimit), or a negative value for
// none.
func (c *Config) MemoryLimit() int64 {
	return memtune.MemoryLimit(c.Limits.MemoryLimit, c.MemoryBudget())
}

// WorkingSetBytes is the memory an edge needs besides its caches' budgets and fill buffers
// (connections, request handling, the runtime), docs/edge.md "Memory".
const WorkingSetBytes = 128 << 20

// MemoryBudget is the memory an edge is allowed to grow to: the metadata and answer caches'
// budgets, the fill buffers' ceiling and WorkingSetBytes.
func (c *Config) MemoryBudget() int64 {
	return c.Cache.MetaBytes + max(c.Cache.PlanBytes, 0) + max(c.Cache.AnswerBytes, 0) +
		c.Cache.FillBufferBytes + WorkingSetBytes
}

// Duration is a time.Duration written as a Go duration string ("20s") in JSON.
type Duration = configfile.Duration

// Default is the configuration before the file and flags; Origin, OriginToken and DataDir
// must still be set.
func Default() Config {
	return Config{
		Listen:   defaultListen,
		Permits:  64,
		Region:   "default",
		Register: true,
		Cache: Cache{
			MetaBytes:     512 << 20,
			MetaEntries:   100_000,
			DataBytes:     64 << 30,
			VisibilityTTL: Duration(30 * time.Second),
			PlanBytes:     server.DefaultPlanCacheBytes,
			AnswerBytes:   server.DefaultAnswerCacheBytes,
			// 64 fills at once (datacache.DefaultBufferMemory).
			FillBufferBytes: 32 << 20,
		},
		Auth: Auth{
			TransferURLTTL: Duration(time.Hour),
			Leeway:         Duration(30 * time.Second),
			JWKSRefresh:    Duration(5 * time.Minute),
		},
		Limits: Limits{
			OriginTimeout:   Duration(10 * time.Second),
			FillTimeout:     Duration(2 * time.Minute),
			ReconParallelAt: 20000,
			ShutdownGrace:   Duration(30 * time.Second),
			EventsWait:      Duration(25 * time.Second),
			MaxConnections:  10000,
			WriteProgress:   Duration(60 * time.Second),
			IdleTimeout:     Duration(120 * time.Second),
			// quic-go caps an HTTP/3 connection's idle timeout at what the peer offers too.
			ReadHeaderTimeout: Duration(30 * time.Second),
			MaxStreams:        250,
			IdleRelease:       Duration(5 * time.Second),
			BatchFiles:        readpath.DefaultBatchFiles,
			BatchTerms:        readpath.DefaultBatchTerms,
			BatchBody:         readpath.DefaultBatchBody,
		},
	}
}

// ErrInvalid wraps every configuration problem.
var ErrInvalid = errors.New("config: invalid")

// Load builds the configuration from command-line args (without the program name) and the
// environment (getenv, os.Getenv in production).
func Load(args []string, getenv func(string) string) (*Config, error) {
	c := Default()
	if err := configfile.Load("xet-edge", &c, args, defineFlags, ErrInvalid); err != nil {
		return nil, err
	}
	if c.OriginToken == "" {
		c.OriginToken = getenv(EnvOriginToken)
	}
	c.fillDerived()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// defineFlags defines the command-line flags on fs, bound to file (--config) and to f's fields
// (configfile.Load applies only the flags given, over the file and the defaults).
func defineFlags(fs *flag.FlagSet, file *string, f *Config) {
	fs.StringVar(file, "config", "", "JSON configuration file")
	fs.StringVar(&f.Origin, "origin", "", "origin base URL, e.g. http://origin:8080; several (replicas), comma-separated: the next is used when one does not answer")
	fs.StringVar(&f.OriginToken, "origin-token", "", "edge access token for the origin (or env "+EnvOriginToken+")")
	fs.StringVar(&f.DataDir, "data-dir", "", "data directory (TLS cert, URL key, xorb cache)")
	fs.StringVar(&f.Listen, "listen", defaultListen, "TLS listener host:port (TCP h1/h2 and UDP h3)")
	fs.StringVar(&f.HTTPListen, "http-listen", "", "plain HTTP listener host:port")
	fs.StringVar(&f.AdminListen, "admin-listen", "", "admin listener [host]:port (/metrics; pprof and admin routes need an admin token); no host = 127.0.0.1")
	fs.StringVar(&f.PublicURL, "public-url", "", "base URL clients use for the edge")
	fs.IntVar(&f.Permits, "permits", 64, "reconstructions answered locally at once (0: proxy all)")
	fs.StringVar(&f.Region, "region", "default", "region this edge serves (one of the origin's regions.order)")
	fs.BoolVar(&f.Register, "register", true, "report to the origin's edge registry so read tokens name this edge")
}

// PrintFlags writes the flags' descriptions and defaults to w (for --help).
func PrintFlags(w io.Writer) { configfile.PrintFlags("xet-edge", w, defineFlags) }

func (c *Config) fillDerived() {
	c.AdminListen = AdminAddr(c.AdminListen)
	if c.DataDir != "" {
		if c.Cache.DataDir == "" {
			c.Cache.DataDir = filepath.Join(c.DataDir, dataDirName)
		}
		if c.Auth.KeyDir == "" {
			c.Auth.KeyDir = filepath.Join(c.DataDir, keysDirName)
		}
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	c.Origin = strings.TrimRight(c.Origin, "/")
}

// DefaultPublicURL is the public URL when none is configured: the TLS listener as bound
// (so a ":0" port becomes the real one).
func DefaultPublicURL(boundTLS string) string { return "https://" + boundTLS }

// TLSDir is where the self-signed certificate is kept.
func (c *Config) TLSDir() string { return filepath.Join(c.DataDir, tlsDirName) }

// Validate reports every problem of c at once, joined, each wrapping ErrInvalid.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if c.DataDir == "" {
		bad("data_dir (--data-dir) is required")
	}
	if c.Limits.BatchFiles < 1 || c.Limits.BatchTerms < 1 {
		bad("limits.batch_files and limits.batch_terms must be at least 1")
	}
	if c.Limits.BatchBody < 1<<10 {
		bad("limits.batch_body %d is below 1 KiB (ten file ids)", c.Limits.BatchBody)
	}
	if c.OriginToken == "" {
		bad("--origin-token (or %s) is required", EnvOriginToken)
	}
	for name, u := range map[string]string{"origin": c.Origin, "public_url": c.PublicURL} {
		if name == "public_url" && u == "" {
			continue // defaults to the bound TLS address
		}
		if name == "origin" && u == "" {
			bad("origin (--origin) is required")
			continue
		}
		if name == "origin" && strings.Contains(u, ",") { // several origins (docs/edge.md)
			if _, err := originapi.ParseOrigins(u); err != nil {
				bad("origin: %v", err)
			}
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("%s %q is not an http(s) URL", name, u)
		}
	}
	addrs := map[string]string{}
	for name, a := range map[string]string{"listen": c.Listen, "http_listen": c.HTTPListen, "admin_listen": c.AdminListen} {
		if a == "" && name != "listen" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("%s %q: %v", name, a, err)
		} else if other, dup := addrs[a]; dup && !strings.HasSuffix(a, ":0") {
			bad("%s and %s are both %q", name, other, a)
		}
		addrs[a] = name
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls.cert_file and tls.key_file go together")
	}
	if c.Permits < 0 {
		bad("permits must not be negative")
	}
	if c.Permits > internalapi.MaxEdgePermits {
		bad("permits %d is above %d", c.Permits, internalapi.MaxEdgePermits)
	}
	if !internalapi.ValidRegion(c.Region) {
		bad("region %q is not a region name (lower-case letters, digits, inner hyphens, at most 63)", c.Region)
	}
	if c.Cache.MetaBytes < 1<<20 {
		bad("cache.meta_bytes %d is below 1 MiB", c.Cache.MetaBytes)
	}
	if c.Cache.MetaEntries < 1 {
		bad("cache.meta_entries must be positive")
	}
	if c.Cache.FillBufferBytes < 1<<20 {
		bad("cache.fill_buffer_bytes %d is below 1 MiB", c.Cache.FillBufferBytes)
	}
	if c.Cache.DataBytes < 64<<20 {
		bad("cache.data_bytes %d is below one xorb (64 MiB)", c.Cache.DataBytes)
	}
	for name, d := range map[string]Duration{
		"cache.visibility_ttl": c.Cache.VisibilityTTL, "auth.transfer_url_ttl": c.Auth.TransferURLTTL,
		"auth.jwks_refresh": c.Auth.JWKSRefresh, "limits.origin_timeout": c.Limits.OriginTimeout,
		"limits.fill_timeout": c.Limits.FillTimeout, "limits.shutdown_grace": c.Limits.ShutdownGrace,
		"limits.events_wait": c.Limits.EventsWait, "limits.write_progress": c.Limits.WriteProgress,
		"limits.idle_timeout": c.Limits.IdleTimeout, "limits.read_header_timeout": c.Limits.ReadHeaderTimeout,
	} {
		if d <= 0 {
			bad("%s must be positive, is %v", name, d.D())
		}
	}
	if c.Auth.Leeway < 0 {
		bad("auth.leeway must not be negative")
	}
	if c.Cache.VisibilityRefreshAhead > 0 && c.Cache.VisibilityRefreshAhead >= c.Cache.VisibilityTTL {
		bad("cache.visibility_refresh_ahead %v must be below cache.visibility_ttl %v (0: a sixth of it, negative: off)",
			c.Cache.VisibilityRefreshAhead.D(), c.Cache.VisibilityTTL.D())
	}
	if err := memtune.CheckGCPercent(c.Limits.GCPercent); err != nil {
		bad("%v", err)
	}
	if c.Limits.ReconParallelAt < 1 {
		bad("limits.recon_parallel_at must be at least 1")
	}
	if c.Limits.MaxConnections < 1 {
		bad("limits.max_connections must be at least 1")
	}
	if c.Limits.MaxConnectionsPerIP < 0 || c.Limits.MaxConnectionsPerIP > c.Limits.MaxConnections {
		bad("limits.max_connections_per_ip must be between 0 (off) and limits.max_connections")
	}
	if c.Limits.MaxStreams < 1 {
		bad("limits.max_streams must be at least 1")
	}
	return errors.Join(errs...)
}

// AdminAddr is where an admin_listen value binds: an address without a host (":9090") binds
// loopback, not every interface, so the admin listener is private unless a host is named.
func AdminAddr(a string) string {
	if h, p, err := net.SplitHostPort(a); err == nil && h == "" {
		return net.JoinHostPort("127.0.0.1", p)
	}
	return a
}
