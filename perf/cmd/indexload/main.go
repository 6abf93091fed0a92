// Command indexload fills an empty xetcdn Postgres index with a synthetic index at scale (issue
// 13 item 3; perf/README.md, "Index at scale"): N xorbs and M files of realistic shape, written
// with COPY, so that reconstruction benchmarks run against 10^5-10^7 files without uploading
// them. Only the index is written: no object exists for these xorbs, so transfers of them fail
// (404); reconstructions, HEAD and the edge's metadata path work. The schema must exist (start
// xet-origin on the database once: it migrates on start); a database that already holds xorbs
// or files is refused.
//
//	indexload -dsn postgres://xet@127.0.0.1:55432/xetload -files 100000 -xorbs 100000 -sample sample.jsonl
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type config struct {
	dsn      string
	files    int
	xorbs    int
	chunks   int
	maxTerms int
	repos    int
	seed     uint64
	sample   string
	samples  int
}

func parse(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("indexload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	fs.StringVar(&c.dsn, "dsn", os.Getenv("XETCDN_POSTGRES_DSN"), "Postgres DSN of the origin's index (default $XETCDN_POSTGRES_DSN)")
	fs.IntVar(&c.files, "files", 100000, "files to load")
	fs.IntVar(&c.xorbs, "xorbs", 100000, "xorbs to load")
	fs.IntVar(&c.chunks, "chunks", 64, "chunks per xorb (32-128 KiB each; a layout row takes 40 bytes per chunk)")
	fs.IntVar(&c.maxTerms, "max-terms", 1000, "largest term count of a file (60 % of files have one term, the rest log-uniform in [2, max])")
	fs.IntVar(&c.repos, "repos", 1000, "repositories (scopes models/load/r0..) the files are spread over")
	fs.Uint64Var(&c.seed, "seed", 1, "seed: the same flags give the same index")
	fs.StringVar(&c.sample, "sample", "", "write every (files/samples)-th file as a JSON line {scope, file, size, terms} here, for benchmarks")
	fs.IntVar(&c.samples, "samples", 1000, "how many files -sample lists")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case c.dsn == "":
		return nil, errors.New("-dsn: required (or set XETCDN_POSTGRES_DSN)")
	case c.files < 1 || c.files > 1e9:
		return nil, fmt.Errorf("-files: %d, want 1..1e9", c.files)
	case c.xorbs < 1 || c.xorbs > 1e9:
		return nil, fmt.Errorf("-xorbs: %d, want 1..1e9", c.xorbs)
	case c.chunks < 1 || c.chunks > 1024:
		return nil, fmt.Errorf("-chunks: %d, want 1..1024 (chunks of up to 128 KiB must fit a 64 MiB xorb)", c.chunks)
	case c.maxTerms < 1 || c.maxTerms > 1e6:
		return nil, fmt.Errorf("-max-terms: %d, want 1..1e6", c.maxTerms)
	case c.repos < 1 || c.repos > c.files:
		return nil, fmt.Errorf("-repos: %d, want 1..files", c.repos)
	case c.samples < 1:
		return nil, fmt.Errorf("-samples: %d, want >= 1", c.samples)
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "indexload: %v\n", err)
		return 2
	}
	if err := load(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "indexload: %v\n", err)
		if errors.Is(err, errInput) {
			return 2
		}
		return 1
	}
	return 0
}

var errInput = errors.New("refused")

func load(ctx context.Context, c *config, stdout, log io.Writer) error {
	pool, err := pgxpool.New(ctx, c.dsn)
	if err != nil {
		return fmt.Errorf("%w: -dsn: %v", errInput, err)
	}
	defer pool.Close()
	for _, q := range []string{`SELECT hash, stored_size, layout FROM xorbs LIMIT 0`, `SELECT hash, record FROM files LIMIT 0`,
		`SELECT scope, file FROM visibility LIMIT 0`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%w: the database has no xetcdn index schema (%v): start xet-origin on it once, it migrates on start", errInput, err)
		}
	}
	var used bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS(SELECT 1 FROM xorbs) OR EXISTS(SELECT 1 FROM files)`).Scan(&used); err != nil {
		return err
	}
	if used {
		return fmt.Errorf("%w: the database already holds xorbs or files; load into an empty one", errInput)
	}
	s := &synth{seed: c.seed, xorbs: c.xorbs, chunks: c.chunks, maxTerms: c.maxTerms, repos: c.repos, hashes: make([]hash.Hash, c.xorbs)}
	start := time.Now()
	progress := func(what string, i, n int, since time.Time) {
		if n >= 10 && i%(n/10) == 0 && i > 0 {
			el := time.Since(since)
			fmt.Fprintf(log, "indexload: %s %d/%d (%.0f%%), %s elapsed, %.0f rows/s\n", what, i, n, 100*float64(i)/float64(n),
				el.Round(time.Second), float64(i)/el.Seconds())
		}
	}
	// Xorbs, then files (their terms need the xorb hashes), then visibility: three COPYs, each
	// one statement streamed from a generator, in one transaction so that an interrupted or
	// failed load leaves nothing behind.
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	// The tables are empty (checked above): truncating them in the loading transaction changes
	// nothing, but lets a server with wal_level=minimal (perf/scale.sh's own instance) skip
	// writing the COPYs to the WAL, which halves the disk a 10^7 load needs.
	if _, err := tx.Exec(ctx, `TRUNCATE xorbs, files, visibility`); err != nil {
		return err
	}
	i := 0
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"xorbs"}, []string{"hash", "stored_size", "layout"}, pgx.CopyFromFunc(func() ([]any, error) {
		if i == c.xorbs {
			return nil, nil
		}
		l := s.layout(i)
		b, err := l.MarshalBinary()
		if err != nil {
			return nil, err
		}
		i++
		progress("xorbs", i, c.xorbs, start)
		return []any{l.Hash[:], int64(l.ChunkAreaLen()), b}, nil
	})); err != nil {
		return fmt.Errorf("copy xorbs: %w", err)
	}
	xorbsDone := time.Since(start)
	start = time.Now()
	var sample *json.Encoder
	if c.sample != "" {
		f, err := os.Create(c.sample)
		if err != nil {
			return fmt.Errorf("%w: -sample: %v", errInput, err)
		}
		defer f.Close()
		sample = json.NewEncoder(f)
	}
	step := max(1, c.files/c.samples)
	var terms, bytes int64
	j := 0
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"files"}, []string{"hash", "record"}, pgx.CopyFromFunc(func() ([]any, error) {
		if j == c.files {
			return nil, nil
		}
		rec := s.record(j)
		b, err := rec.MarshalBinary()
		if err != nil {
			return nil, err
		}
		terms += int64(len(rec.Terms))
		bytes += int64(len(b))
		if sample != nil && j%step == 0 {
			if err := sample.Encode(map[string]any{"scope": s.scope(j), "file": rec.Hash.String(), "size": rec.Size, "terms": len(rec.Terms)}); err != nil {
				return nil, err
			}
		}
		j++
		progress("files", j, c.files, start)
		return []any{rec.Hash[:], b}, nil
	})); err != nil {
		return fmt.Errorf("copy files: %w", err)
	}
	k := 0
	visStart := time.Now()
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"visibility"}, []string{"scope", "file"}, pgx.CopyFromFunc(func() ([]any, error) {
		if k == c.files {
			return nil, nil
		}
		h := s.fileHash(k)
		sc := s.scope(k)
		k++
		progress("visibility", k, c.files, visStart)
		return []any{sc, h[:]}, nil
	})); err != nil {
		return fmt.Errorf("copy visibility: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	filesDone := time.Since(start)
	if _, err := pool.Exec(ctx, `ANALYZE xorbs, files, visibility`); err != nil {
		return err
	}
	var dbSize int64
	if err := pool.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&dbSize); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "indexload: %d xorbs of %d chunks in %s (%.0f/s); %d files, %d terms (%.1f per file), %d record bytes, with visibility, in %s (%.0f/s)\n",
		c.xorbs, c.chunks, xorbsDone.Round(time.Millisecond), float64(c.xorbs)/xorbsDone.Seconds(), c.files, terms,
		float64(terms)/float64(c.files), bytes, filesDone.Round(time.Millisecond), float64(c.files)/filesDone.Seconds())
	fmt.Fprintf(stdout, "indexload: database %d MiB", dbSize>>20)
	// Where the space goes, per table: rows (with TOAST) and indexes.
	for _, t := range []string{"xorbs", "files", "visibility"} {
		var tbl, idx int64
		if err := pool.QueryRow(ctx, `SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass)`, t).Scan(&tbl, &idx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "; %s %d MiB (rows %d, indexes %d)", t, (tbl+idx)>>20, tbl>>20, idx>>20)
	}
	fmt.Fprintln(stdout)
	return nil
}
