package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// runDownload implements `xet download --endpoint URL --hash H [--size N] [--range A-B] -o OUT`.
// A file OUT is written through OUT.part, renamed into place only once the download succeeded
// (and, for whole files, the content hashed to H); "-o -" writes to standard output.
func runDownload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("download", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.register(fs)
	fileHash := fs.String("hash", "", "file hash (64 hex digits, protocol form) (required)")
	size := fs.Int64("size", 0, "file size if known (saves a probe past the end; a shorter file is an error)")
	rng := fs.String("range", "", "inclusive byte range A-B (or A-) like an HTTP Range")
	out := fs.String("o", "", "output file, or - for standard output (required)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: xet download --endpoint URL [--token TOKEN] --hash H [--size N] [--range A-B] [--http3] [--insecure] -o OUT")
		fs.PrintDefaults()
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	h, err := hash.Parse(*fileHash)
	if err != nil {
		return fmt.Errorf("%w: --hash: %v", errUsage, err)
	}
	if *out == "" {
		return fmt.Errorf("%w: -o is required", errUsage)
	}
	if *size < 0 {
		return fmt.Errorf("%w: --size must not be negative", errUsage)
	}
	opts := xetclient.DownloadOptions{Size: *size}
	if *rng != "" {
		r, err := parseRange(*rng)
		if err != nil {
			return fmt.Errorf("%w: --range: %v", errUsage, err)
		}
		opts.Range = &r
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()

	bar := newProgressBar(stderr, "download")
	opts.Progress = bar.update
	if *out == "-" {
		_, err := c.Download(ctx, h, stdout, opts)
		bar.finish()
		return err
	}
	tmp := *out + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = c.DownloadAt(ctx, h, f, opts)
	bar.finish()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, filepath.Clean(*out))
}

// parseRange reads "A-B" (inclusive) or "A-" (to the end of the file).
func parseRange(s string) ([2]int64, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return [2]int64{}, errors.New("want A-B or A-")
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 {
		return [2]int64{}, fmt.Errorf("bad start %q", a)
	}
	last := int64(math.MaxInt64)
	if b != "" {
		if last, err = strconv.ParseInt(b, 10, 64); err != nil || last < first {
			return [2]int64{}, fmt.Errorf("bad end %q", b)
		}
	}
	return [2]int64{first, last}, nil
}
