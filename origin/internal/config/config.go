// Package config is the origin's one typed configuration: defaults for the embedded single-node
// mode (SQLite index and local-disk objects under --data-dir), an optional JSON file, flags
// that override the file, and secrets that come only from the environment.
//
// Precedence, lowest first: Default(), the --config file, command-line flags, environment
// secrets. Validate reports every problem at once.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/regions"
	"github.com/xetcdn/xetcdn/shared/configfile"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/memtune"
	"github.com/xetcdn/xetcdn/shared/readpath"
)

// Environment variables holding secrets. They are never read from the file or flags.
const (
	EnvPostgresDSN = "XETCDN_POSTGRES_DSN"
	EnvS3AccessKey = "XETCDN_S3_ACCESS_KEY"
	EnvS3SecretKey = "XETCDN_S3_SECRET_KEY"
	// EnvSecret and EnvPreviousSecret hold the shared secret origin replicas derive their keys
	// from, and the one being rotated out (docs/origin.md, "Origin replicas"); the files named
	// by auth.secret_file and auth.previous_secret_file are the alternative.
	EnvSecret         = "XETCDN_SECRET"
	EnvPreviousSecret = "XETCDN_PREVIOUS_SECRET"
	// MinSecretLen is the shortest shared secret accepted (keys.MinSecretLen).
	MinSecretLen = 32
)

// Index and object store drivers.
const (
	IndexSQLite     = "sqlite"
	IndexPostgres   = "postgres"
	ObjectsLocal    = "local"
	ObjectsS3       = "s3"
	defaultListen   = "127.0.0.1:8080"
	sqliteFileName  = "index.db"
	objectsDirName  = "objects"
	keysDirName     = "keys"
	defaultMaxIngst = 512 << 20
)

// Config is the whole configuration of xet-origin. The JSON names are the file's keys.
type Config struct {
	DataDir     string `json:"data_dir"`     // keys, and the embedded index and objects
	Listen      string `json:"listen"`       // main listener host:port
	AdminListen string `json:"admin_listen"` // /metrics, and pprof and admin routes for admin tokens; empty = off; no host = loopback
	// PublicURL is the origin's base URL as clients reach it: the casUrl of write tokens from the
	// token route. Empty = "http://" + Listen.
	PublicURL string `json:"public_url"`
	// EdgeURL is the casUrl of read tokens; empty = PublicURL.
	EdgeURL string `json:"edge_url"`
	// DevNoAuth disables authentication. Only the --dev-no-auth flag sets it.
	DevNoAuth bool `json:"-"`

	Index   Index   `json:"index"`
	Objects Objects `json:"objects"`
	Auth    Auth    `json:"auth"`
	Limits  Limits  `json:"limits"`
	GC      GC      `json:"gc"`
	Hub     Hub     `json:"hub"`
	// Regions places token callers and sets the edge registry's timeout (docs/origin.md,
	// "Regions and the edge registry").
	Regions regions.Config `json:"regions"`
}

// Hub configures the Hub-compatible repositories API (docs/hub.md).
type Hub struct {
	// InlineMax is the largest file committed inline as a regular file (stored as an object);
	// larger files are uploaded through Xet. 0 = 1 MiB.
	InlineMax int64 `json:"inline_max"`
}

// GC configures the origin's background garbage collection and usage gauges
// (origin/internal/lifecycle; docs/origin.md, "Garbage collection").
type GC struct {
	// Interval between two runs; 0 (the default) = no background runs (`xet-origin gc` only).
	Interval Duration `json:"interval"`
	// Grace is how long an unreferenced xorb stays condemned before it is deleted; it must
	// cover auth.dedup_expiry unless Force. 0 (the default) = dedup_expiry + 1 day
	// (EffectiveGrace).
	Grace Duration `json:"grace"`
	// Force accepts a grace shorter than auth.dedup_expiry (tests, or stores without dedup).
	Force bool `json:"force"`
}

// Index selects the index backend.
type Index struct {
	Driver      string `json:"driver"`      // sqlite | postgres
	SQLitePath  string `json:"sqlite_path"` // default DataDir/index.db
	PostgresDSN string `json:"-"`           // env XETCDN_POSTGRES_DSN
	MaxConns    int    `json:"max_conns"`   // postgres pool size; 0 = driver default
	// LayoutCache bounds the memory of decoded xorb layouts kept in front of the index
	// (bytes); 0 disables the cache.
	LayoutCache int64 `json:"layout_cache"`
	// DedupFilterReload is how often the Postgres dedup filter is rebuilt from the table at the
	// latest (docs/origin.md, "Dedup filter"); 0 = 1h, negative = no filter (every
	// global-dedup query reads the table).
	DedupFilterReload Duration `json:"dedup_filter_reload"`
	// Log receives the index's background errors (the dedup filter's listener); nil: none.
	Log *slog.Logger `json:"-"`
}

// Objects selects the object store.
type Objects struct {
	Driver    string `json:"driver"`   // local | s3
	Dir       string `json:"dir"`      // local: default DataDir/objects
	Endpoint  string `json:"endpoint"` // s3: host:port
	Bucket    string `json:"bucket"`   // s3
	Region    string `json:"region"`   // s3, optional
	UseTLS    bool   `json:"use_tls"`  // s3
	AccessKey string `json:"-"`        // env XETCDN_S3_ACCESS_KEY
	SecretKey string `json:"-"`        // env XETCDN_S3_SECRET_KEY
}

// Auth configures keys and token lifetimes.
type Auth struct {
	KeyDir string `json:"key_dir"` // default DataDir/keys: signing.pem, transfer.key, dedup.key
	// SecretFile names a file holding the shared secret every replica derives its keys from
	// (surrounding white space ignored, at least MinSecretLen bytes); the key directory is then
	// not used. The environment variable XETCDN_SECRET is the alternative (not both).
	SecretFile string `json:"secret_file"`
	// PreviousSecretFile (or XETCDN_PREVIOUS_SECRET) is the secret being rotated out: tokens
	// signed with it keep verifying while it is configured. Needs a current secret.
	PreviousSecretFile string `json:"previous_secret_file"`
	// Secret and PreviousSecret are the secrets read by Load (nil when none is configured).
	Secret         []byte `json:"-"`
	PreviousSecret []byte `json:"-"`
	secretProblems []string
	// CASTokenTTL is the lifetime of tokens minted by the Hub-compatible token route.
	CASTokenTTL Duration `json:"cas_token_ttl"`
	// TransferURLTTL is the lifetime of signed transfer URLs in reconstruction answers.
	TransferURLTTL Duration `json:"transfer_url_ttl"`
	// DedupExpiry is how long a global-dedup answer stays valid for the client.
	DedupExpiry Duration `json:"dedup_expiry"`
	// Leeway is the clock skew tolerated when verifying tokens.
	Leeway Duration `json:"leeway"`
}

// Limits bound resources.
type Limits struct {
	PaceFloor       int64    `json:"pace_floor"`        // bytes/s an upload must sustain; <0 off
	PaceWindow      Duration `json:"pace_window"`       // window the floor is measured over
	IngestMemory    int64    `json:"ingest_memory"`     // bytes of request bodies held at once
	ShardHeartbeat  Duration `json:"shard_heartbeat"`   // /v2/shards heartbeat interval
	ReconPermits    int      `json:"recon_permits"`     // goroutines writing big answers
	ReconParallelAt int      `json:"recon_parallel_at"` // terms from which answers are written in parallel
	ShutdownGrace   Duration `json:"shutdown_grace"`    // drain time on SIGTERM
	EventsWait      Duration `json:"events_wait"`       // long-poll limit of /internal/v1/events
	// DependencyTimeout bounds every index call and every object-store step (503 beyond it).
	DependencyTimeout Duration `json:"dependency_timeout"`
	// Batch reconstructions (GET|POST /v1/reconstructions): at most BatchFiles file ids, at most
	// BatchTerms terms summed over the distinct files, POST bodies of at most BatchBody bytes;
	// 413 beyond any of them.
	BatchFiles int   `json:"batch_files"`
	BatchTerms int   `json:"batch_terms"`
	BatchBody  int64 `json:"batch_body"`
	// Upload admission (docs/origin.md, "Bounded waiting"): ingest memory is reserved as a
	// body grows and a reservation waits at most IngestWait (503 + Retry-After beyond it); at
	// most UploadsPerScope uploads of one scope at once (429 + Retry-After beyond it); a body
	// must be complete within UploadBodyTimeout (408).
	IngestWait        Duration `json:"ingest_wait"`
	UploadsPerScope   int      `json:"uploads_per_scope"`
	UploadBodyTimeout Duration `json:"upload_body_timeout"`
	// Connections (docs/origin.md, "Bounded waiting"): at most MaxConnections open on the main
	// listener (more wait to be accepted), at most MaxConnectionsPerIP from one address (0 =
	// no per-address cap; more are closed at once). An answer whose writes make no progress for
	// WriteProgress is cut off; a keep-alive connection is closed after IdleTimeout without a
	// request; a request header must arrive within ReadHeaderTimeout.
	MaxConnections      int      `json:"max_connections"`
	MaxConnectionsPerIP int      `json:"max_connections_per_ip"`
	WriteProgress       Duration `json:"write_progress"`
	IdleTimeout         Duration `json:"idle_timeout"`
	ReadHeaderTimeout   Duration `json:"read_header_timeout"`
	// MemoryLimit is the Go runtime's soft memory limit (debug.SetMemoryLimit) in bytes: 0 =
	// MemoryBudget() (the layout cache, the ingest memory and a working set); negative = none.
	MemoryLimit int64 `json:"memory_limit"`
	// GCPercent is the Go collector's heap growth target (debug.SetGCPercent, GOGC): 0 =
	// DefaultGCPercent, -1 = the runtime's own (the GOGC environment variable, else 100).
	GCPercent int `json:"gc_percent"`
}

// DefaultGCPercent is limits.gc_percent when 0. The origin's live heap is small next to its
// memory budget (tens of MB while registering shards against the 1.25 GiB budget of the
// defaults), and at Go's 100 % it collected every ~15 MB allocated: ~10 % of its CPU while
// registering shards. 400 collects about a quarter as often; the memory limit still caps the
// heap (docs/origin.md "Memory"; docs/decisions.md 2026-12-02 "Shard registration: the origin's
// allocations").
const DefaultGCPercent = memtune.DefaultGCPercent

// GCPercent is the collector target to apply (memtune.GCPercent): 0 means leave the runtime's own.
func (c *Config) GCPercent() int { return memtune.GCPercent(c.Limits.GCPercent) }

// WorkingSetBytes is the memory an origin needs besides its layout cache and ingest memory
// (connections, request handling, index answers, the dedup filter, the runtime).
const WorkingSetBytes = 512 << 20

// MemoryBudget is the memory an origin is allowed to grow to: the layout cache, the ingest
// memory (bodies held while they validate) and WorkingSetBytes.
func (c *Config) MemoryBudget() int64 {
	return max(c.Index.LayoutCache, 0) + c.Limits.IngestMemory + WorkingSetBytes
}

// MemoryLimit is the soft memory limit to apply (memtune.MemoryLimit), or a negative value for
// none.
func (c *Config) MemoryLimit() int64 {
	return memtune.MemoryLimit(c.Limits.MemoryLimit, c.MemoryBudget())
}

// Duration is a time.Duration written as a Go duration string ("20s") in JSON.
type Duration = configfile.Duration

// Default is the embedded single-node configuration; DataDir must still be set.
func Default() Config {
	return Config{
		Listen:  defaultListen,
		Index:   Index{Driver: IndexSQLite, LayoutCache: 256 << 20},
		Objects: Objects{Driver: ObjectsLocal},
		Auth: Auth{
			CASTokenTTL:    Duration(time.Hour),
			TransferURLTTL: Duration(time.Hour),
			DedupExpiry:    Duration(7 * 24 * time.Hour),
			Leeway:         Duration(30 * time.Second),
		},

		Limits: Limits{
			PaceFloor:         httpapi.DefaultPaceFloor,
			PaceWindow:        Duration(httpapi.DefaultPaceWindow),
			IngestMemory:      defaultMaxIngst,
			ShardHeartbeat:    Duration(20 * time.Second),
			ReconPermits:      8,
			ReconParallelAt:   20000,
			ShutdownGrace:     Duration(30 * time.Second),
			EventsWait:        Duration(30 * time.Second),
			DependencyTimeout: Duration(10 * time.Second),
			BatchFiles:        readpath.DefaultBatchFiles,
			BatchTerms:        readpath.DefaultBatchTerms,
			BatchBody:         readpath.DefaultBatchBody,
			IngestWait:        Duration(5 * time.Second),
			UploadsPerScope:   16,
			// The largest xorb body (64 MiB) at 56 KiB/s (~0.45 Mbit/s) per upload.
			UploadBodyTimeout:   Duration(20 * time.Minute),
			MaxConnections:      4096,
			MaxConnectionsPerIP: 0,
			WriteProgress:       Duration(60 * time.Second),
			IdleTimeout:         Duration(120 * time.Second),
			ReadHeaderTimeout:   Duration(30 * time.Second),
		},
	}
}

// EffectiveGrace is gc.grace, or auth.dedup_expiry + 1 day when it is 0.
func (c *Config) EffectiveGrace() time.Duration {
	if c.GC.Grace == 0 {
		return c.Auth.DedupExpiry.D() + 24*time.Hour
	}
	return c.GC.Grace.D()
}

// ErrInvalid wraps every configuration problem.
var ErrInvalid = errors.New("config: invalid")

// Load builds the configuration from command-line args (without the program name) and the
// environment (getenv, os.Getenv in production). Flags override the file named by --config.
func Load(args []string, getenv func(string) string) (*Config, error) {
	c := Default()
	if err := configfile.Load("xet-origin", &c, args, defineFlags, ErrInvalid); err != nil {
		return nil, err
	}
	c.Index.PostgresDSN = getenv(EnvPostgresDSN)
	c.Objects.AccessKey = getenv(EnvS3AccessKey)
	c.Objects.SecretKey = getenv(EnvS3SecretKey)
	c.Auth.Secret, c.Auth.PreviousSecret, c.Auth.secretProblems = loadSecrets(c.Auth, getenv)
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
	fs.StringVar(&f.DataDir, "data-dir", "", "data directory (keys; embedded index and objects)")
	fs.StringVar(&f.Listen, "listen", defaultListen, "main listener host:port")
	fs.StringVar(&f.AdminListen, "admin-listen", "", "admin listener [host]:port (/metrics; pprof and admin routes need an admin token); no host = 127.0.0.1")
	fs.StringVar(&f.PublicURL, "public-url", "", "base URL clients use for the origin")
	fs.StringVar(&f.EdgeURL, "edge-url", "", "casUrl handed out with read tokens")
	fs.BoolVar(&f.DevNoAuth, "dev-no-auth", false, "DEVELOPMENT ONLY: accept requests without tokens")
	fs.StringVar(&f.Index.Driver, "index", IndexSQLite, "index backend: sqlite | postgres")
	fs.StringVar(&f.Objects.Driver, "objects", ObjectsLocal, "object store: local | s3")
	fs.StringVar(&f.Objects.Endpoint, "s3-endpoint", "", "S3/MinIO host:port")
	fs.StringVar(&f.Objects.Bucket, "s3-bucket", "", "S3 bucket")
	fs.StringVar(&f.Auth.SecretFile, "secret-file", "", "file holding the shared secret replicas derive their keys from (or env "+EnvSecret+")")
	fs.StringVar(&f.Auth.PreviousSecretFile, "previous-secret-file", "", "file holding the secret being rotated out (or env "+EnvPreviousSecret+")")
	fs.Int64Var(&f.Limits.PaceFloor, "pace-floor", httpapi.DefaultPaceFloor, "minimum upload pace in bytes/s (<0 disables)")
}

// PrintFlags writes the flags' descriptions and defaults to w (for --help).
func PrintFlags(w io.Writer) { configfile.PrintFlags("xet-origin", w, defineFlags) }

// fillDerived fills paths and URLs that default from other fields.
func (c *Config) fillDerived() {
	c.AdminListen = AdminAddr(c.AdminListen)
	if c.DataDir != "" {
		if c.Index.SQLitePath == "" {
			c.Index.SQLitePath = filepath.Join(c.DataDir, sqliteFileName)
		}
		if c.Objects.Dir == "" {
			c.Objects.Dir = filepath.Join(c.DataDir, objectsDirName)
		}
		if c.Auth.KeyDir == "" {
			c.Auth.KeyDir = filepath.Join(c.DataDir, keysDirName)
		}
	}
	if c.PublicURL == "" && c.Listen != "" {
		c.PublicURL = "http://" + c.Listen
	}
	if c.EdgeURL == "" {
		c.EdgeURL = c.PublicURL
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	c.EdgeURL = strings.TrimRight(c.EdgeURL, "/")
}

// Validate reports every problem of c at once, joined, each wrapping ErrInvalid.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if c.DataDir == "" {
		bad("data_dir (--data-dir) is required")
	}
	for _, p := range c.Auth.secretProblems {
		bad("%s", p)
	}
	if c.Hub.InlineMax < 0 || c.Hub.InlineMax > 16<<20 {
		bad("hub.inline_max %d: must be between 0 (default 1 MiB) and 16 MiB", c.Hub.InlineMax)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen %q: %v", c.Listen, err)
	}
	if c.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			bad("admin_listen %q: %v", c.AdminListen, err)
		} else if c.AdminListen == c.Listen {
			bad("admin_listen must differ from listen")
		}
	}
	for name, u := range map[string]string{"public_url": c.PublicURL, "edge_url": c.EdgeURL} {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("%s %q is not an http(s) URL", name, u)
		}
	}
	switch c.Index.Driver {
	case IndexSQLite:
		if c.Index.SQLitePath == "" && c.DataDir != "" { // without data_dir, only that is reported
			bad("index.sqlite_path is empty")
		}
	case IndexPostgres:
		if c.Index.PostgresDSN == "" {
			bad("index driver postgres needs %s in the environment", EnvPostgresDSN)
		}
	default:
		bad("index.driver %q is not sqlite or postgres", c.Index.Driver)
	}
	if c.Index.LayoutCache < 0 {
		bad("index.layout_cache must not be negative")
	}
	switch c.Objects.Driver {
	case ObjectsLocal:
		if c.Objects.Dir == "" && c.DataDir != "" {
			bad("objects.dir is empty")
		}
	case ObjectsS3:
		if c.Objects.Endpoint == "" || c.Objects.Bucket == "" {
			bad("objects driver s3 needs objects.endpoint and objects.bucket")
		}
		if c.Objects.AccessKey == "" || c.Objects.SecretKey == "" {
			bad("objects driver s3 needs %s and %s in the environment", EnvS3AccessKey, EnvS3SecretKey)
		}
	default:
		bad("objects.driver %q is not local or s3", c.Objects.Driver)
	}
	for name, d := range map[string]Duration{
		"auth.cas_token_ttl": c.Auth.CASTokenTTL, "auth.transfer_url_ttl": c.Auth.TransferURLTTL,
		"auth.dedup_expiry": c.Auth.DedupExpiry, "limits.pace_window": c.Limits.PaceWindow,
		"limits.shard_heartbeat": c.Limits.ShardHeartbeat, "limits.shutdown_grace": c.Limits.ShutdownGrace,
		"limits.events_wait": c.Limits.EventsWait, "limits.dependency_timeout": c.Limits.DependencyTimeout,
		"limits.ingest_wait": c.Limits.IngestWait, "limits.upload_body_timeout": c.Limits.UploadBodyTimeout,
		"limits.write_progress": c.Limits.WriteProgress, "limits.idle_timeout": c.Limits.IdleTimeout,
		"limits.read_header_timeout": c.Limits.ReadHeaderTimeout,
	} {
		if d <= 0 {
			bad("%s must be positive, is %v", name, d.D())
		}
	}
	if c.Auth.Leeway < 0 {
		bad("auth.leeway must not be negative")
	}
	if c.GC.Interval < 0 {
		bad("gc.interval must not be negative (0 = off)")
	}
	if g := c.EffectiveGrace(); g < time.Second {
		bad("gc.grace %v is below 1s", g)
	} else if g < c.Auth.DedupExpiry.D() && !c.GC.Force {
		bad("gc.grace %v is shorter than auth.dedup_expiry %v, which it must cover (gc.force to accept)", g, c.Auth.DedupExpiry.D())
	}
	if c.Limits.IngestMemory < 128<<20 {
		bad("limits.ingest_memory %d is below one maximal xorb (128 MiB)", c.Limits.IngestMemory)
	}
	if err := memtune.CheckGCPercent(c.Limits.GCPercent); err != nil {
		bad("%v", err)
	}
	if l := c.Limits.MemoryLimit; l > 0 && l < 256<<20 {
		bad("limits.memory_limit %d is below 256 MiB (0: the memory budget, negative: none)", l)
	}
	if c.Limits.ReconPermits < 1 {
		bad("limits.recon_permits must be at least 1")
	}
	if c.Limits.ReconParallelAt < 1 {
		bad("limits.recon_parallel_at must be at least 1")
	}
	if c.Limits.BatchFiles < 1 || c.Limits.BatchTerms < 1 {
		bad("limits.batch_files and limits.batch_terms must be at least 1")
	}
	if c.Limits.UploadsPerScope < 1 {
		bad("limits.uploads_per_scope must be at least 1")
	}
	if c.Limits.MaxConnections < 1 {
		bad("limits.max_connections must be at least 1")
	}
	if c.Limits.MaxConnectionsPerIP < 0 || c.Limits.MaxConnectionsPerIP > c.Limits.MaxConnections {
		bad("limits.max_connections_per_ip must be between 0 (off) and limits.max_connections")
	}
	if c.Limits.BatchBody < 1<<10 {
		bad("limits.batch_body %d is below 1 KiB (ten file ids)", c.Limits.BatchBody)
	}
	if _, err := regions.Parse(c.Regions); err != nil {
		for _, e := range unjoin(err) {
			bad("%s", strings.TrimPrefix(e.Error(), regions.ErrInvalid.Error()+": "))
		}
	}
	return errors.Join(errs...)
}

// loadSecrets reads the shared secret and the previous one from their file or environment
// variable, and lists every problem: a file that cannot be read, both sources set, a secret
// shorter than MinSecretLen, a previous secret without a current one. Nothing is returned for a
// source that is not set.
func loadSecrets(a Auth, getenv func(string) string) (cur, prev []byte, problems []string) {
	read := func(what, file, env string) []byte {
		v := getenv(env)
		switch {
		case file != "" && v != "":
			problems = append(problems, fmt.Sprintf("auth.%s and %s are both set: use one", what, env))
			return nil
		case file != "":
			b, err := os.ReadFile(file)
			if err != nil {
				problems = append(problems, fmt.Sprintf("auth.%s: %v", what, err))
				return nil
			}
			b = bytes.TrimSpace(b)
			if len(b) < MinSecretLen {
				problems = append(problems, fmt.Sprintf("auth.%s %s holds %d bytes, want at least %d (e.g. openssl rand -base64 48)", what, file, len(b), MinSecretLen))
				return nil
			}
			return b
		case v != "":
			b := bytes.TrimSpace([]byte(v))
			if len(b) < MinSecretLen {
				problems = append(problems, fmt.Sprintf("%s holds %d bytes, want at least %d (e.g. openssl rand -base64 48)", env, len(b), MinSecretLen))
				return nil
			}
			return b
		}
		return nil
	}
	cur = read("secret_file", a.SecretFile, EnvSecret)
	prev = read("previous_secret_file", a.PreviousSecretFile, EnvPreviousSecret)
	if prev != nil && cur == nil && len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("a previous secret needs a current one (auth.secret_file or %s)", EnvSecret))
	}
	return cur, prev, problems
}

// Secrets reads the shared secrets a (its secret files) and getenv name, as Load does, for the
// commands that need the keys without the rest of the configuration (`xet-origin token`).
func Secrets(a Auth, getenv func(string) string) (cur, prev []byte, err error) {
	cur, prev, problems := loadSecrets(a, getenv)
	for _, p := range problems {
		err = errors.Join(err, fmt.Errorf("%w: %s", ErrInvalid, p))
	}
	return cur, prev, err
}

// unjoin lists the errors errors.Join joined into err (err alone otherwise).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// AdminAddr is where an admin_listen value binds: an address without a host (":9090") binds
// loopback, not every interface, so the admin listener is private unless a host is named.
func AdminAddr(a string) string {
	if h, p, err := net.SplitHostPort(a); err == nil && h == "" {
		return net.JoinHostPort("127.0.0.1", p)
	}
	return a
}
