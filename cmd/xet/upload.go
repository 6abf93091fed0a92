package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// clientFlags are the connection flags shared by upload and download.
type clientFlags struct {
	endpoint    string
	token       string
	tokenURL    string
	http3       bool
	insecure    bool
	caFile      string
	concurrency int
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoint, "endpoint", "", "CAS base URL, e.g. https://cas.example.com (required)")
	fs.StringVar(&f.token, "token", "", "bearer token (default $XET_TOKEN; none: no Authorization header)")
	fs.StringVar(&f.tokenURL, "token-url", "", "Hub-style token route, e.g. https://origin/api/models/ORG/REPO/xet-read-token/main: --token is sent to it, "+
		"and the CAS is the casUrl it answers (without --endpoint: followed, and asked again when that edge stops answering)")
	fs.BoolVar(&f.http3, "http3", false, "use HTTP/3 (QUIC); needs an https endpoint")
	fs.BoolVar(&f.insecure, "insecure", false, "accept any TLS certificate (self-signed servers)")
	fs.StringVar(&f.caFile, "ca-file", "", "trust the CA certificates in this PEM file (e.g. an edge's DATA-DIR/tls/cert.pem) instead of the system's (default: the system's, or $SSL_CERT_FILE)")
	fs.IntVar(&f.concurrency, "concurrency", xetclient.DefaultConcurrency, "parallel xorb uploads / range fetches")
}

// client builds the library client the flags describe.
func (f *clientFlags) client() (*xetclient.Client, error) {
	if f.endpoint == "" && f.tokenURL == "" {
		return nil, fmt.Errorf("%w: --endpoint or --token-url is required", errUsage)
	}
	tok := f.token
	if tok == "" {
		tok = os.Getenv("XET_TOKEN")
	}
	o := xetclient.Options{
		Endpoint:           f.endpoint,
		Token:              tok,
		InsecureSkipVerify: f.insecure,
		Concurrency:        f.concurrency,
	}
	if f.tokenURL != "" {
		o.TokenURL, o.Token = f.tokenURL, ""
		if tok != "" {
			o.TokenHeader = http.Header{"Authorization": {"Bearer " + tok}}
		}
	}
	if f.caFile != "" {
		pool, err := xetclient.LoadCAFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --ca-file: %v", errUsage, err)
		}
		o.RootCAs = pool
	}
	if f.http3 {
		o.Protocol = xetclient.HTTP3
	}
	return xetclient.New(o)
}

// parseFlags parses args with fs and maps -h and flag errors the way main expects.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, fmt.Errorf("%w: %v", errUsage, err)
	}
	return false, nil
}

// uploadOutput is the JSON line `xet upload` prints per file, in this field order.
type uploadOutput struct {
	Path      string    `json:"path"`
	FileHash  hash.Hash `json:"file_hash"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	BytesSent int64     `json:"bytes_sent"`
}

// runUpload implements `xet upload --endpoint URL [--token T] FILE...`: all files are uploaded
// in one session (deduplicated against each other and the server), then one JSON line per file
// is printed in argument order. "-" reads standard input.
func runUpload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("upload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: xet upload --endpoint URL [--token TOKEN] [--http3] [--insecure] [--ca-file PEM] FILE...   (\"-\" reads standard input)")
		fmt.Fprintln(stderr, `prints {"path":…,"file_hash":…,"size":N,"sha256":…,"bytes_sent":N} per file`)
		fs.PrintDefaults()
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: no file given", errUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()

	files := make([]xetclient.UploadFile, fs.NArg())
	for i, name := range fs.Args() {
		files[i].Path = name
		if name == "-" {
			files[i].Reader = os.Stdin
		}
	}
	bar := newProgressBar(stderr, "upload")
	res, err := c.UploadFiles(ctx, files, xetclient.UploadOptions{Progress: bar.update})
	bar.finish()
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	for _, r := range res {
		if err := enc.Encode(uploadOutput{Path: r.Path, FileHash: r.FileHash, Size: r.Size,
			SHA256: hex.EncodeToString(r.SHA256[:]), BytesSent: r.BytesSent}); err != nil {
			return err
		}
	}
	return out.Flush()
}
