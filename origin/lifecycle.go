package origin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/xetcdn/xetcdn/origin/internal/backend"
	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/hub"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/lifecycle"
	"github.com/xetcdn/xetcdn/origin/internal/server"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ErrNothingToDelete: `xet-origin delete` found none of the files (or no file of the scope)
// visible; nothing was recorded.
var ErrNothingToDelete = errors.New("nothing visible to delete")

// adminFlags are the flags every offline admin command shares: where the origin's
// configuration is. Secrets come from the environment as for the server.
type adminFlags struct {
	dataDir, config string
}

func (a *adminFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&a.dataDir, "data-dir", "", "the origin's data directory")
	fs.StringVar(&a.config, "config", "", "the origin's JSON configuration file")
}

// open loads the origin's configuration as the server would and opens its backends (no
// metrics). A missing --data-dir and --config is a configuration error.
func (a *adminFlags) open(ctx context.Context, getenv func(string) string) (*backend.Backends, error) {
	_, b, err := a.openConfig(ctx, getenv)
	return b, err
}

// openConfig is open that also returns the configuration.
func (a *adminFlags) openConfig(ctx context.Context, getenv func(string) string) (*config.Config, *backend.Backends, error) {
	var args []string
	if a.dataDir != "" {
		args = append(args, "--data-dir", a.dataDir)
	}
	if a.config != "" {
		args = append(args, "--config", a.config)
	}
	if len(args) == 0 {
		return nil, nil, fmt.Errorf("%w: --data-dir or --config is required", ErrConfig)
	}
	if a.dataDir != "" {
		// Offline commands never create an origin: a wrong path must not look like an empty one.
		if st, err := os.Stat(a.dataDir); err != nil || !st.IsDir() {
			return nil, nil, fmt.Errorf("%w: --data-dir %s is not an origin's data directory", ErrConfig, a.dataDir)
		}
	}
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return nil, nil, err
	}
	b, err := backend.Open(ctx, cfg, nil)
	return cfg, b, err
}

// parseAdmin parses an admin command's flags, printing usage to stdout for -h and to stderr
// after an error (returned wrapping ErrConfig, except flag.ErrHelp).
func parseAdmin(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil {
		return nil
	}
	w := stderr
	if errors.Is(err, flag.ErrHelp) {
		w = stdout
	}
	fmt.Fprintln(w, "usage:", usage)
	fs.SetOutput(w)
	fs.PrintDefaults()
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrConfig, err)
}

// Delete implements `xet-origin delete --scope REPO (FILE... | --all)`: it deletes the files
// from the scope (or, with --all, every file of the scope) in the origin's index, with one
// event for the edges, exactly as DELETE /v1/files/{file} and /v1/scope do, and prints
// {"scope","deleted","all"}. The bytes stay until garbage collection.
func Delete(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("xet-origin delete", flag.ContinueOnError)
	var a adminFlags
	a.bind(fs)
	scope := fs.String("scope", "", "repository to delete from, e.g. models/acme/llama")
	all := fs.Bool("all", false, "delete every file of the scope (instead of naming files)")
	const usage = "xet-origin delete (--data-dir DIR | --config FILE) --scope REPO (FILE_HASH... | --all)"
	if err := parseAdmin(fs, args, usage, stdout, stderr); err != nil {
		return err
	}
	var problems []string
	if err := index.CheckScope(*scope); err != nil {
		problems = append(problems, "--scope: "+err.Error())
	}
	var files []hash.Hash
	for _, s := range fs.Args() {
		h, err := hash.Parse(s)
		if err != nil {
			problems = append(problems, fmt.Sprintf("file %q: %v", s, err))
			continue
		}
		files = append(files, h)
	}
	switch {
	case *all && fs.NArg() > 0:
		problems = append(problems, "--all deletes the whole scope: name no files with it")
	case !*all && fs.NArg() == 0:
		problems = append(problems, "name the files to delete, or --all for the whole scope")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(problems, "\n"))
	}
	cfg, b, err := a.openConfig(ctx, getenv)
	if err != nil {
		return err
	}
	defer b.Close()
	hs, err := openHubStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer hs.Close()
	switch repo, err := hs.IsRepository(ctx, *scope); {
	case err != nil:
		return err
	case repo:
		return server.HubRepositoryError(*scope)
	}
	n, err := b.Index.Delete(ctx, *scope, files)
	if errors.Is(err, index.ErrNotFound) {
		return fmt.Errorf("%w in %q", ErrNothingToDelete, *scope)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(struct {
		Scope   string `json:"scope"`
		Deleted int    `json:"deleted"`
		All     bool   `json:"all"`
	}{*scope, n, *all})
}

// Usage implements `xet-origin usage [SCOPE]`: it prints lifecycle.Usage as JSON, every scope
// or only SCOPE (a zero entry when it holds no visible file), with the store's totals.
func Usage(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("xet-origin usage", flag.ContinueOnError)
	var a adminFlags
	a.bind(fs)
	const usage = "xet-origin usage (--data-dir DIR | --config FILE) [SCOPE]"
	if err := parseAdmin(fs, args, usage, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("%w: at most one SCOPE, got %q", ErrConfig, fs.Args())
	}
	scope := fs.Arg(0)
	if fs.NArg() == 1 {
		if err := index.CheckScope(scope); err != nil {
			return fmt.Errorf("%w: SCOPE: %v", ErrConfig, err)
		}
	}
	b, err := a.open(ctx, getenv)
	if err != nil {
		return err
	}
	defer b.Close()
	u, err := lifecycle.Compute(ctx, b.Index)
	if err != nil {
		return err
	}
	if fs.NArg() == 1 {
		u.Scopes = []lifecycle.ScopeUsage{u.Scope(scope)}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(u)
}

// GC implements `xet-origin gc [--dry-run] [--grace D] [--force]`: one garbage collection
// (lifecycle.GC) on the origin's backends, its report printed as JSON. It shares the
// collector's lock with the origin's background runs.
func GC(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("xet-origin gc", flag.ContinueOnError)
	var a adminFlags
	a.bind(fs)
	dry := fs.Bool("dry-run", false, "report what would be condemned and deleted; change nothing")
	grace := fs.Duration("grace", 0, "how long a xorb stays condemned before deletion (default gc.grace of the configuration)")
	force := fs.Bool("force", false, "accept a grace shorter than auth.dedup_expiry")
	const usage = "xet-origin gc (--data-dir DIR | --config FILE) [--dry-run] [--grace DURATION [--force]]"
	if err := parseAdmin(fs, args, usage, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", ErrConfig, fs.Args())
	}
	graceSet := false
	fs.Visit(func(f *flag.Flag) { graceSet = graceSet || f.Name == "grace" })
	cfg, b, err := a.openConfig(ctx, getenv)
	if err != nil {
		return err
	}
	defer b.Close()
	g := cfg.EffectiveGrace()
	if graceSet {
		g = *grace
	}
	if err := lifecycle.CheckGrace(g, cfg.Auth.DedupExpiry.D(), *force || cfg.GC.Force); err != nil {
		return fmt.Errorf("%w: --grace: %v", ErrConfig, err)
	}
	hs, err := openHubStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer hs.Close()
	rep, err := lifecycle.GC(ctx, b.Index, b.Objects, lifecycle.GCOptions{Grace: g, DryRun: *dry,
		Roots:     hubRoots(hs, g),
		Blobs:     hubBlobs(hs, b, nil),
		Failpoint: lifecycle.FailpointFromEnv(getenv)})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// hubBlobs is the hub's collector of inline-file blobs no commit names (docs/hub.md, "Garbage
// collection").
func hubBlobs(st *hub.Store, b *backend.Backends, log *slog.Logger) []lifecycle.ObjectCollector {
	return []lifecycle.ObjectCollector{&hub.BlobCollector{Store: st, Objects: b.Objects, Log: log}}
}
