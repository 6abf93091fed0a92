// Command replay drives a running xetcdn deployment (an origin and zero or more edges) with a
// trace (perf/README.md, "Replaying a trace"): open loop, each request issued at its scheduled
// time (divided by -speed) whatever the answers before it, latency measured from that scheduled
// time, at most -concurrency requests in flight (the others wait, and their wait counts). Files a
// trace downloads before (or without) uploading are uploaded first, untimed. Every download is
// checked byte for byte against the file's generated content. It prints per-operation latency
// percentiles to p99.9 (HDR histograms), throughput, errors by class and, from the servers'
// /metrics, edge hit ratio, origin offload, read amplification, dedup and object store request
// counts; -out writes all of it, with the latency CDFs and a per-second time series, as JSON.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xetcdn/xetcdn/perf/trace"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the checked command line.
type config struct {
	tracePath     string
	origin        string
	edges         map[string]string // region -> CAS URL; "" is the default endpoint of downloads
	token         string
	tokenCmd      []string
	speed         float64
	concurrency   int
	insecure      bool
	timeout       time.Duration
	originMetrics string
	edgeMetrics   []string
	pids          map[string]int // name -> pid, for CPU per request
	out           string
	preload       bool
	warm          bool
	newChunks     bool
	progress      time.Duration
	attempts      int
	metricsEvery  time.Duration
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// parseFlags checks the command line; errors name the flag.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var edges, edgeMetrics, pids listFlag
	c := &config{}
	fs.StringVar(&c.tracePath, "trace", "", "trace file (JSONL, perf/README.md \"Traces\"); required")
	fs.StringVar(&c.origin, "origin", "", "origin CAS URL: uploads, token requests, and downloads with no edge; required")
	fs.Var(&edges, "edge", "edge CAS URL for downloads, as URL (the default endpoint) or REGION=URL (lines of that region); repeatable")
	fs.StringVar(&c.token, "token", "", "bearer token for every request (a server without auth: leave empty)")
	tokenCmd := fs.String("token-cmd", "", "command printing a write token for a repository scope, which is appended as the last argument, e.g. 'xet-origin token --data-dir D --access write --ttl 24h --scope'")
	fs.Float64Var(&c.speed, "speed", 1, "speed-up factor: trace time is divided by this")
	fs.IntVar(&c.concurrency, "concurrency", 256, "most requests in flight; later ones wait (and their wait counts in their latency)")
	fs.BoolVar(&c.insecure, "insecure", false, "accept any TLS certificate (self-signed edges)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "bound on one request (a download, an upload, a token)")
	fs.StringVar(&c.originMetrics, "origin-metrics", "", "the origin's Prometheus /metrics URL (admin listener)")
	fs.Var(&edgeMetrics, "edge-metrics", "an edge's /metrics URL; repeatable")
	fs.Var(&pids, "pid", "NAME=PID of a server process, for its CPU time per request; repeatable")
	fs.StringVar(&c.out, "out", "", "write the full results as JSON to this file")
	noPreload := fs.Bool("no-preload", false, "do not upload the files the trace downloads before uploading them (they must exist)")
	fs.BoolVar(&c.newChunks, "new-chunks", true, "compute each upload's new-chunk bytes, the chunks no file on the server has (false: the server already holds the trace's files, e.g. a second pass)")
	fs.BoolVar(&c.warm, "warm", false, "before the clock starts, download every file once through every edge (a warm edge)")
	fs.DurationVar(&c.metricsEvery, "metrics-every", 5*time.Second, "scrape the servers' metrics this often during the run, for the hit-ratio timeline (0: only before and after)")
	fs.IntVar(&c.attempts, "attempts", 6, "attempts per request for transient failures, as hf_xet (6: five retries; 1: none)")
	fs.DurationVar(&c.progress, "progress", 10*time.Second, "print progress this often (0: never)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replay -trace FILE -origin URL [-edge [REGION=]URL]... [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.preload = !*noPreload
	if c.tracePath == "" {
		return nil, errors.New("-trace: required")
	}
	if err := checkURL(c.origin); err != nil {
		return nil, fmt.Errorf("-origin: %w", err)
	}
	c.origin = strings.TrimRight(c.origin, "/")
	c.edges = map[string]string{}
	for _, e := range edges {
		region, u, ok := strings.Cut(e, "=")
		if !ok {
			region, u = "", e
		}
		if err := checkURL(u); err != nil {
			return nil, fmt.Errorf("-edge %q: %w", e, err)
		}
		if _, dup := c.edges[region]; dup {
			return nil, fmt.Errorf("-edge %q: region %q given twice", e, region)
		}
		c.edges[region] = strings.TrimRight(u, "/")
	}
	if c.token != "" && *tokenCmd != "" {
		return nil, errors.New("-token and -token-cmd: give one")
	}
	if *tokenCmd != "" {
		c.tokenCmd = strings.Fields(*tokenCmd)
	}
	switch {
	case !(c.speed > 0 && c.speed <= 1e6):
		return nil, fmt.Errorf("-speed: %v, want (0, 1e6]", c.speed)
	case c.concurrency < 1 || c.concurrency > 100000:
		return nil, fmt.Errorf("-concurrency: %d, want 1..100000", c.concurrency)
	case c.attempts < 1 || c.attempts > 20:
		return nil, fmt.Errorf("-attempts: %d, want 1..20", c.attempts)
	case c.timeout <= 0:
		return nil, fmt.Errorf("-timeout: %v, want > 0", c.timeout)
	case c.metricsEvery < 0:
		return nil, fmt.Errorf("-metrics-every: %v, want >= 0", c.metricsEvery)
	case c.progress < 0:
		return nil, fmt.Errorf("-progress: %v, want >= 0", c.progress)
	}
	for _, m := range append([]string{c.originMetrics}, edgeMetrics...) {
		if m != "" {
			if err := checkURL(m); err != nil {
				return nil, fmt.Errorf("metrics URL %q: %w", m, err)
			}
		}
	}
	c.edgeMetrics = edgeMetrics
	c.pids = map[string]int{}
	for _, p := range pids {
		name, v, ok := strings.Cut(p, "=")
		n, err := strconv.Atoi(v)
		if !ok || name == "" || err != nil || n <= 0 {
			return nil, fmt.Errorf("-pid %q: want NAME=PID", p)
		}
		c.pids[name] = n
	}
	return c, nil
}

func checkURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return 2
	}
	f, err := os.Open(c.tracePath)
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return 2
	}
	recs, err := trace.ReadAll(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "replay: %s: %v\n", c.tracePath, err)
		return 2
	}
	if len(recs) == 0 {
		fmt.Fprintf(stderr, "replay: %s holds no request\n", c.tracePath)
		return 2
	}
	r, err := newReplayer(c, recs, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return 2
	}
	defer r.close()
	res, err := r.replay(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return 1
	}
	res.print(stdout)
	if c.out != "" {
		if err := res.writeJSON(c.out); err != nil {
			fmt.Fprintf(stderr, "replay: %v\n", err)
			return 1
		}
	}
	if res.Interrupted {
		return 130
	}
	if res.Errors > 0 {
		return 3
	}
	return 0
}
