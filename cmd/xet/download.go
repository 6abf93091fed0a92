package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// downloadOutput is the JSON line `xet download` prints on success, in this field order. The
// client keeps no cache, so every byte came from the network: BytesReceived counts the transfer
// bodies (compressed xorb ranges), not the reconstruction answers.
type downloadOutput struct {
	Path          string    `json:"path"`
	FileHash      hash.Hash `json:"file_hash"`
	Size          int64     `json:"size"`
	SHA256        string    `json:"sha256,omitempty"` // with --sha256 only
	Seconds       float64   `json:"seconds"`
	BytesReceived int64     `json:"bytes_received"`
}

// runDownload implements `xet download --endpoint URL --hash H [--size N] [--range A-B] -o OUT`.
// A file OUT is written through OUT.part, renamed into place only once the download succeeded
// (and, for whole files, the content hashed to H); "-o -" writes to standard output. On success
// it prints a JSON line (downloadOutput) to stdout, or to stderr when stdout carries the file.
func runDownload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("download", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.register(fs)
	fileHash := fs.String("hash", "", "file hash (64 hex digits, protocol form) (required)")
	size := fs.Int64("size", 0, "file size if known (saves a probe past the end; a shorter file is an error)")
	rng := fs.String("range", "", "inclusive byte range A-B (or A-) like an HTTP Range")
	out := fs.String("o", "", "output file, or - for standard output (required)")
	withSHA := fs.Bool("sha256", false, "also print the SHA-256 of the bytes written (the download is verified against --hash either way; this costs about 0.7 CPU-seconds per GiB more)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: xet download (--endpoint URL | --token-url URL) [--token TOKEN] --hash H [--size N] [--range A-B] [--sha256] [--http3] [--insecure] [--ca-file PEM] -o OUT")
		fmt.Fprintln(stderr, `prints {"path":…,"file_hash":…,"size":N,"seconds":S,"bytes_received":N} (to stderr with -o -), with "sha256":… after "size" under --sha256`)
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
	err = download(ctx, c, h, opts, *out, *withSHA, stdout, stderr)
	if errors.Is(err, xetclient.ErrNotFound) {
		// The server's own text may name its routes; the user needs only this.
		return fmt.Errorf("file %s not found (or not readable with this token)", h)
	}
	return err
}

// download fetches h to out ("-": stdout) and prints the summary line, with the SHA-256 of the
// bytes written when withSHA is set. Not by default: a whole-file download is already checked
// against its Xet hash, and the SHA-256 cost about as much CPU as that check (~0.7 CPU-s per GiB,
// plus a second read of the file for -o FILE; docs/decisions.md, 2026-12-04).
func download(ctx context.Context, c *xetclient.Client, h hash.Hash, opts xetclient.DownloadOptions, out string, withSHA bool, stdout, stderr io.Writer) error {
	bar := newProgressBar(stderr, "download")
	opts.Progress = bar.update
	var stats xetclient.DownloadStats
	opts.Stats = &stats
	start := time.Now()
	sum := sha256.New()
	// hashed tees w into sum when the SHA-256 was asked for.
	hashed := func(w io.Writer) io.Writer {
		if withSHA {
			return io.MultiWriter(w, sum)
		}
		return w
	}
	result := func(n int64, w io.Writer) error {
		o := downloadOutput{Path: out, FileHash: h, Size: n,
			Seconds: math.Round(time.Since(start).Seconds()*1000) / 1000, BytesReceived: stats.TransferBytes}
		if withSHA {
			o.SHA256 = hex.EncodeToString(sum.Sum(nil))
		}
		return json.NewEncoder(w).Encode(o)
	}
	if out == "-" {
		n, err := c.Download(ctx, h, hashed(stdout), opts)
		bar.finish()
		if err != nil {
			return err
		}
		return result(n, stderr)
	}
	if fi, err := os.Stat(out); err == nil && !fi.Mode().IsRegular() {
		// A device, FIFO or directory (-o /dev/null): written in order, in place. The temp file
		// and rename below would replace the device node itself (as root, /dev/null).
		f, err := os.OpenFile(out, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		n, err := c.Download(ctx, h, hashed(f), opts)
		bar.finish()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		return result(n, stdout)
	}
	tmp := out + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	n, err := c.DownloadAt(ctx, h, f, opts)
	bar.finish()
	if err == nil && withSHA { // DownloadAt writes out of order: hash what is on disk
		if _, err = f.Seek(0, io.SeekStart); err == nil {
			_, err = io.Copy(sum, f)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Clean(out)); err != nil {
		return err
	}
	return result(n, stdout)
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
