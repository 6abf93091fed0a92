package origin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/backend"
	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/hub"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/lifecycle"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// openHubStore opens the Hub API's tables in the index's database (docs/hub.md).
func openHubStore(ctx context.Context, cfg *config.Config) (*hub.Store, error) {
	switch cfg.Index.Driver {
	case config.IndexSQLite:
		return hub.Open(ctx, "sqlite", cfg.Index.SQLitePath)
	case config.IndexPostgres:
		return hub.Open(ctx, "postgres", cfg.Index.PostgresDSN)
	}
	return nil, fmt.Errorf("hub: index driver %q is unknown", cfg.Index.Driver)
}

// newHub builds the Hub API over the store and the opened backends; CAS tokens are verified by
// the server (server.New calls Service.SetVerifyCAS).
func newHub(cfg *config.Config, st *hub.Store, b *backend.Backends, log *slog.Logger) *hub.Service {
	return hub.New(hub.Options{Store: st, Objects: b.Objects, PublicURL: cfg.PublicURL, InlineMax: cfg.Hub.InlineMax,
		Log: log,
		XetRecord: func(ctx context.Context, file hash.Hash, scope string) (*recon.FileRecord, error) {
			rec, err := b.Index.File(ctx, file, scope)
			if errors.Is(err, index.ErrNotFound) {
				return nil, fmt.Errorf("%w: %v", hub.ErrEntryNotFound, err)
			}
			return rec, err
		},
		CommittedRecord: func(ctx context.Context, file hash.Hash) (*recon.FileRecord, error) {
			return committedRecord(ctx, b.Index, file)
		},
		DropScope: func(ctx context.Context, scope string) error {
			if _, err := b.Index.Delete(ctx, scope, nil); err != nil && !errors.Is(err, index.ErrNotFound) {
				return err
			}
			return nil
		},
		Unavailable: func(err error) bool {
			return errors.Is(err, index.ErrUnavailable) || errors.Is(err, objstore.ErrUnavailable) ||
				errors.Is(err, objstore.ErrNotFound)
		},
	})
}

// committedRecord reads the record of file whether or not a scope sees it (hub.Options.
// CommittedRecord), with the collector's key-ordered scan: the first record after the hash just
// below file's.
func committedRecord(ctx context.Context, ix index.Index, file hash.Hash) (*recon.FileRecord, error) {
	below, ok := file, false
	for i := len(below) - 1; i >= 0; i-- {
		if below[i] > 0 {
			below[i]--
			ok = true
			break
		}
		below[i] = 0xff
	}
	if !ok { // the zero hash: no record has a Xet file's terms under it
		return nil, fmt.Errorf("%w: no record of %s", hub.ErrEntryNotFound, file)
	}
	page, err := ix.Files(ctx, below, 1)
	if err != nil {
		return nil, err
	}
	if len(page) == 0 || page[0].Hash != file {
		return nil, fmt.Errorf("%w: no record of %s", hub.ErrEntryNotFound, file)
	}
	return index.DecodeFile(file, page[0].Record)
}

// hubRoots is the hub's garbage-collection root source for a collection with this grace
// period (docs/hub.md, "Garbage collection").
func hubRoots(st *hub.Store, grace time.Duration) []lifecycle.Roots {
	return []lifecycle.Roots{&hub.Roots{Store: st, LFSWindow: grace}}
}

// adminFlags parses the flags shared by `users add` and `tokens create`: --data-dir or
// --config select the database, as for the server.
func adminConfig(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, usage string) (*config.Config, error) {
	dataDir := fs.String("data-dir", "", "the origin's data directory (embedded SQLite index)")
	file := fs.String("config", "", "the origin's configuration file (e.g. a Postgres deployment)")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		w := stderr
		if errors.Is(err, flag.ErrHelp) {
			w = stdout
		}
		fmt.Fprintln(w, "usage: "+usage)
		fs.SetOutput(w)
		fs.PrintDefaults()
		return nil, err
	}
	var cargs []string
	if *dataDir != "" {
		cargs = append(cargs, "--data-dir", *dataDir)
	}
	if *file != "" {
		cargs = append(cargs, "--config", *file)
	}
	if len(cargs) == 0 {
		return nil, errors.New("--data-dir or --config is required")
	}
	return config.Load(cargs, os.Getenv)
}

// AddUser implements `xet-origin users add --data-dir DIR|--config FILE NAME`.
func AddUser(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "add" {
		fmt.Fprintln(stderr, "usage: xet-origin users add --data-dir DIR|--config FILE NAME")
		return errors.New("the only users subcommand is 'add'")
	}
	fs := flag.NewFlagSet("xet-origin users add", flag.ContinueOnError)
	cfg, err := adminConfig(fs, args[1:], stdout, stderr, "xet-origin users add --data-dir DIR|--config FILE NAME")
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("exactly one user NAME is expected")
	}
	name := fs.Arg(0)
	if err := hub.CheckRepoID(name + "/x"); err != nil {
		return fmt.Errorf("user name %q: letters, digits, '.', '_', '-' (a repository namespace)", name)
	}
	st, err := openHubStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.AddUser(ctx, name); err != nil {
		if errors.Is(err, hub.ErrExists) {
			return fmt.Errorf("user %q exists", name)
		}
		return err
	}
	return nil
}

type grantFlags []hub.Grant

func (g *grantFlags) String() string { return fmt.Sprint(*g) }
func (g *grantFlags) Set(s string) error {
	gr, err := hub.ParseGrant(s)
	if err != nil {
		return err
	}
	*g = append(*g, gr)
	return nil
}

// CreateToken implements `xet-origin tokens create --data-dir DIR|--config FILE --user NAME
// --grant PATTERN:read|write [--grant ...]`: it prints only the new hf_ token; only its hash is
// stored.
func CreateToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "xet-origin tokens create --data-dir DIR|--config FILE --user NAME --grant PATTERN:read|write [--grant ...]"
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(stderr, "usage: "+usage)
		return errors.New("the only tokens subcommand is 'create'")
	}
	fs := flag.NewFlagSet("xet-origin tokens create", flag.ContinueOnError)
	user := fs.String("user", "", "the user the token belongs to")
	var grants grantFlags
	fs.Var(&grants, "grant", "PATTERN:read|write, e.g. models/acme/*:write (repeatable)")
	cfg, err := adminConfig(fs, args[1:], stdout, stderr, usage)
	if err != nil {
		return err
	}
	var problems []error
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *user == "" {
		problems = append(problems, errors.New("--user is required"))
	}
	if len(grants) == 0 {
		problems = append(problems, errors.New("at least one --grant PATTERN:read|write is required"))
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}
	st, err := openHubStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	tok, h, err := hub.NewToken()
	if err != nil {
		return err
	}
	if err := st.AddToken(ctx, *user, h, grants); err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
