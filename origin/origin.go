// Package origin assembles the xetcdn origin from its internal packages for cmd/xet-origin:
// configuration, keys, backends (index and object store), the HTTP server and its lifecycle.
package origin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/backend"
	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/edgereg"
	"github.com/xetcdn/xetcdn/origin/internal/keys"
	"github.com/xetcdn/xetcdn/origin/internal/lifecycle"
	"github.com/xetcdn/xetcdn/origin/internal/regions"
	"github.com/xetcdn/xetcdn/origin/internal/server"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/memtune"
)

// ErrConfig wraps every configuration problem Run reports (one per line of the error's text).
var ErrConfig = config.ErrInvalid

// PrintFlags writes the server's flags, with their descriptions and defaults, to w.
func PrintFlags(w io.Writer) { config.PrintFlags(w) }

// Run loads the configuration from args (flags, --config file) and getenv (secrets), serves
// until ctx is cancelled, then drains in-flight requests and closes the backends. Metrics are
// registered on reg and served, with pprof, on the admin listener.
func Run(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger, reg *prometheus.Registry) error {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return err
	}
	if cfg.DevNoAuth {
		log.Warn("authentication is DISABLED (--dev-no-auth): anyone can read and write")
	}
	memtune.Apply(log, cfg.MemoryLimit(), cfg.GCPercent()) // docs/origin.md "Memory"
	k, err := loadKeys(cfg, log)
	if err != nil {
		return err
	}
	cfg.Index.Log = log
	b, err := backend.Open(ctx, cfg, reg)
	if err != nil {
		return err
	}
	defer b.Close() // runs after Serve returned: no request uses the backends any more
	hs, err := openHubStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer hs.Close()
	store, err := openEdgeStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	regs, err := regions.Parse(cfg.Regions) // checked by config.Validate already
	if err != nil {
		return err
	}
	edges := edgereg.New(edgereg.Options{Store: store, Timeout: cfg.Regions.EdgeTimeout.D(), Registerer: reg})
	srv, err := server.New(server.Options{Config: cfg, Index: b.Index, Objects: b.Objects, Keys: k,
		DependencyTimeout: cfg.Limits.DependencyTimeout.D(), Log: log, Registerer: reg,
		Hub: newHub(cfg, hs, b, log), Edges: edges, Regions: regs})
	if err != nil {
		return err
	}
	lns, err := server.Listen(cfg.Listen, cfg.AdminListen)
	if err != nil {
		return err
	}
	// Background garbage collection and usage gauges (docs/origin.md, "Garbage collection");
	// stopped before the backends close (Serve returns first, then the deferred cancel).
	gcCtx, stopGC := context.WithCancel(ctx)
	gcDone := make(chan struct{})
	defer func() { stopGC(); <-gcDone }()
	go func() {
		defer close(gcDone)
		lifecycle.RunCollector(gcCtx, b.Index, b.Objects, lifecycle.NewMetrics(reg), lifecycle.CollectorOptions{
			Interval: cfg.GC.Interval.D(), Grace: cfg.EffectiveGrace(), Log: log,
			Roots:     hubRoots(hs, cfg.EffectiveGrace()),
			Blobs:     hubBlobs(hs, b, log),
			Failpoint: lifecycle.FailpointFromEnv(getenv)})
	}()
	log.Info("xet-origin serving", "listen", lns.Main.Addr().String(), "admin", cfg.AdminListen,
		"index", cfg.Index.Driver, "objects", cfg.Objects.Driver, "public_url", cfg.PublicURL)
	return server.Serve(ctx, log, lns, srv.Handler(), srv.Admin(reg, b.Index), cfg.Limits.ShutdownGrace.D(), srv.Drain,
		srv.ConnLimits())
}

// loadKeys derives the keys from the shared secret when one is configured (replicas), and reads
// or creates them in the key directory otherwise.
func loadKeys(cfg *config.Config, log *slog.Logger) (*keys.Keys, error) {
	if cfg.Auth.Secret == nil {
		return keys.Load(cfg.Auth.KeyDir, nil, true)
	}
	k, err := keys.FromSecret(cfg.Auth.Secret, cfg.Auth.PreviousSecret)
	if err != nil {
		return nil, err
	}
	log.Info("keys derived from the shared secret", "kid", k.Signing.ID, "previous_kids", len(k.Previous))
	// A shared secret means replicas (or is meant to): say so when their state would not be
	// shared (docs/origin.md, "Origin replicas").
	if cfg.Index.Driver != config.IndexPostgres || cfg.Objects.Driver != config.ObjectsS3 {
		log.Warn("a shared secret is configured but the index or the object store is local to this process: replicas need index postgres and objects s3",
			"index", cfg.Index.Driver, "objects", cfg.Objects.Driver)
	}
	return k, nil
}

// MintToken implements `xet-origin token`: it writes only the token (and a newline) to stdout,
// signed with the key the origin uses: the one derived from the shared secret when --secret-file
// or XETCDN_SECRET (getenv) gives one, otherwise the one in the data directory, created there if
// the origin has not started yet.
func MintToken(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("xet-origin token", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // printed below: usage to stdout for -h, to stderr after an error
	dataDir := fs.String("data-dir", "", "the origin's data directory")
	keyDir := fs.String("key-dir", "", "key directory (default DATA-DIR/keys)")
	secretFile := fs.String("secret-file", "", "file holding the replicas' shared secret (or env "+config.EnvSecret+")")
	scope := fs.String("scope", "", "repository the token is for, e.g. models/acme/llama")
	access := fs.String("access", "", "read | write | edge | admin")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime")
	if err := fs.Parse(args); err != nil {
		w := stderr
		if errors.Is(err, flag.ErrHelp) {
			w = stdout
		}
		fmt.Fprintln(w, "usage: xet-origin token (--data-dir DIR | --secret-file FILE) --scope REPO --access read|write|edge|admin [--ttl DURATION]")
		fs.SetOutput(w)
		fs.PrintDefaults()
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	a, err := auth.ParseAccess(*access)
	var problems []error
	if err != nil {
		problems = append(problems, err)
	}
	secret := getenv(config.EnvSecret) != "" || *secretFile != ""
	if *dataDir == "" && *keyDir == "" && !secret {
		problems = append(problems, errors.New("--data-dir is required"))
	}
	if *scope == "" && a.Client() {
		problems = append(problems, errors.New("--scope is required for read and write tokens"))
	}
	if *ttl <= 0 {
		problems = append(problems, errors.New("--ttl must be positive"))
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}
	var k *keys.Keys
	if secret {
		// The same reading and checks as the server's (config.Load).
		cur, _, err := config.Secrets(config.Auth{SecretFile: *secretFile}, getenv)
		if err != nil {
			return err
		}
		if k, err = keys.FromSecret(cur, nil); err != nil {
			return err
		}
	} else {
		dir := *keyDir
		if dir == "" {
			dir = filepath.Join(*dataDir, "keys")
		}
		if k, err = keys.Load(dir, nil, true); err != nil {
			return err
		}
	}
	tok, _, err := k.Signing.Mint(*scope, a, time.Now(), *ttl)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
