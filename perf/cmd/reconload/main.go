// Command reconload drives reconstructions open loop against an origin or an edge (issue 13 item
// 3; perf/README.md, "Index at scale"): -rate requests/s (Poisson arrivals) for -duration, each a
// GET /v2/reconstructions/{file} of a file drawn by Zipf popularity from a sample of an index
// (indexload -sample), a share of them with a random byte range. Latency is measured from the
// scheduled time to the last byte of the answer, so a server that falls behind cannot hide its
// queue; at most -concurrency requests run at once (the rest wait, and the wait counts).
//
// It reports requests, errors by class, the achieved rate, p50/p90/p99/p99.9/max (HDR
// histograms, overall and per kind), the scheduler's largest lag and, for every -pid NAME=PID,
// the CPU time that process spent per request.
//
//	reconload -url http://127.0.0.1:8080 -sample sample.jsonl \
//	    -token-cmd 'xet-origin token --data-dir D --access read --ttl 24h --scope' -rate 1000 -duration 60s
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xetcdn/xetcdn/perf/fixture"
	"github.com/xetcdn/xetcdn/perf/hdr"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type pidFlag struct {
	name string
	pid  int
}

type config struct {
	url, sample, token string
	tokenCmd           []string
	rate               float64
	duration           time.Duration
	zipf, rangeShare   float64
	concurrency        int
	seed               uint64
	timeout            time.Duration
	progress           time.Duration
	pids               []pidFlag
	out                string
	insecure           bool
}

var pidRE = regexp.MustCompile(`^([a-zA-Z0-9_-]+)=([0-9]+)$`)

func parse(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("reconload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	fs.StringVar(&c.url, "url", "", "base URL of the origin or edge (required)")
	fs.StringVar(&c.sample, "sample", "", "sampled files, JSON lines {scope, file, size, terms} as indexload -sample writes them (required)")
	fs.StringVar(&c.token, "token", "", "one read token for every scope")
	tokenCmd := fs.String("token-cmd", "", "command printing a read token for a scope, which is appended as the last argument")
	fs.Float64Var(&c.rate, "rate", 1000, "reconstructions per second (Poisson arrivals)")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long to issue requests")
	fs.Float64Var(&c.zipf, "zipf", 1.1, "Zipf exponent of file popularity over the sample (> 1)")
	fs.Float64Var(&c.rangeShare, "range-share", 0.2, "share of requests for a random byte range instead of the whole file")
	fs.IntVar(&c.concurrency, "concurrency", 512, "most requests in flight; later ones wait (and the wait counts)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the arrivals, files and ranges")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "per-request time limit (a request over it is a timeout error)")
	fs.DurationVar(&c.progress, "progress", 10*time.Second, "print progress this often (0: never)")
	fs.Func("pid", "NAME=PID: report the CPU time of this process per request (repeatable)", func(s string) error {
		m := pidRE.FindStringSubmatch(s)
		if m == nil {
			return fmt.Errorf("%q: want NAME=PID", s)
		}
		p, err := strconv.Atoi(m[2])
		if err != nil || p <= 0 {
			return fmt.Errorf("%q: bad PID", s)
		}
		c.pids = append(c.pids, pidFlag{m[1], p})
		return nil
	})
	fs.StringVar(&c.out, "out", "", "also write the results as JSON here")
	fs.BoolVar(&c.insecure, "insecure", false, "accept any TLS certificate")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case c.url == "":
		return nil, errors.New("-url: required")
	case !strings.HasPrefix(c.url, "http://") && !strings.HasPrefix(c.url, "https://"):
		return nil, fmt.Errorf("-url: %q: want http:// or https://", c.url)
	case c.sample == "":
		return nil, errors.New("-sample: required")
	case c.token != "" && *tokenCmd != "":
		return nil, errors.New("-token and -token-cmd: give one")
	case !(c.rate > 0 && c.rate <= 1e6):
		return nil, fmt.Errorf("-rate: %v, want (0, 1e6]", c.rate)
	case c.duration <= 0:
		return nil, fmt.Errorf("-duration: %v, want > 0", c.duration)
	case !(c.zipf > 1 && c.zipf <= 10):
		return nil, fmt.Errorf("-zipf: %v, want (1, 10]", c.zipf)
	case !(c.rangeShare >= 0 && c.rangeShare <= 1):
		return nil, fmt.Errorf("-range-share: %v, want [0, 1]", c.rangeShare)
	case c.concurrency < 1 || c.concurrency > 100000:
		return nil, fmt.Errorf("-concurrency: %d, want 1..100000", c.concurrency)
	case c.timeout <= 0:
		return nil, fmt.Errorf("-timeout: %v, want > 0", c.timeout)
	case c.progress < 0:
		return nil, fmt.Errorf("-progress: %v, want >= 0", c.progress)
	}
	c.url = strings.TrimRight(c.url, "/")
	if *tokenCmd != "" {
		c.tokenCmd = strings.Fields(*tokenCmd)
	}
	return c, nil
}

var errInput = errors.New("bad input")

// file is one line of the sample.
type file struct {
	Scope string `json:"scope"`
	File  string `json:"file"`
	Size  uint64 `json:"size"`
	Terms int    `json:"terms"`
}

// readSample reads the sample, naming the line and field of the first bad line.
func readSample(path string) ([]file, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: -sample: %v", errInput, err)
	}
	defer f.Close()
	var out []file
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			return nil, fmt.Errorf("%w: sample line %d: empty", errInput, n)
		}
		var s file
		dec := json.NewDecoder(strings.NewReader(string(line)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("%w: sample line %d: %v", errInput, n, err)
		}
		switch _, herr := hash.Parse(s.File); {
		case s.Scope == "":
			return nil, fmt.Errorf("%w: sample line %d: field \"scope\": missing", errInput, n)
		case herr != nil:
			return nil, fmt.Errorf("%w: sample line %d: field \"file\": %v", errInput, n, herr)
		case s.Terms < 1:
			return nil, fmt.Errorf("%w: sample line %d: field \"terms\": %d, want >= 1", errInput, n, s.Terms)
		case s.Size == 0:
			return nil, fmt.Errorf("%w: sample line %d: field \"size\": missing or 0", errInput, n)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: -sample: %v", errInput, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: -sample: no files", errInput)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "reconload: %v\n", err)
		return 2
	}
	res, err := load(ctx, c, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "reconload: %v\n", err)
		if errors.Is(err, errInput) {
			return 2
		}
		return 1
	}
	res.print(stdout)
	if c.out != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(c.out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "reconload: -out: %v\n", err)
			return 1
		}
	}
	switch {
	case res.Interrupted:
		return 130
	case res.Errors > 0:
		return 3
	}
	return 0
}

// tokens returns a read token per scope of files.
func tokens(ctx context.Context, c *config, files []file) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range files {
		out[f.Scope] = c.token
	}
	if c.tokenCmd == nil {
		return out, nil
	}
	scopes := make([]string, 0, len(out))
	for s := range out {
		scopes = append(scopes, s)
	}
	slices.Sort(scopes)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, s := range scopes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			b, err := exec.CommandContext(cctx, c.tokenCmd[0], append(slices.Clone(c.tokenCmd[1:]), s)...).Output()
			mu.Lock()
			defer mu.Unlock()
			tok := strings.TrimSpace(string(b))
			if err == nil && tok == "" {
				err = errors.New("printed nothing")
			}
			if err != nil {
				if first == nil {
					first = fmt.Errorf("-token-cmd for scope %s: %v", s, err)
				}
				return
			}
			out[s] = tok
		}()
	}
	wg.Wait()
	return out, first
}

// result is what a run measured.
type result struct {
	URL           string             `json:"url"`
	Rate          float64            `json:"rate"`
	Duration      float64            `json:"duration_s"`
	Files         int                `json:"sample_files"`
	Requests      int                `json:"requests"`
	Errors        int                `json:"errors"`
	ErrorClasses  map[string]int     `json:"error_classes,omitempty"`
	ErrorSample   map[string]string  `json:"error_samples,omitempty"`
	Achieved      float64            `json:"achieved_rate"`
	MaxLagMs      float64            `json:"max_issue_lag_ms"`
	Kinds         map[string]summary `json:"kinds"`
	CPUms         map[string]float64 `json:"cpu_ms_per_request,omitempty"`
	CPUCores      map[string]float64 `json:"cpu_cores,omitempty"`
	AnswerBytes   int64              `json:"answer_bytes"`
	DistinctFiles int                `json:"distinct_files"`
	Interrupted   bool               `json:"interrupted,omitempty"`
}

type summary struct {
	N                      uint64             `json:"n"`
	P50, P90, P99, P999, M float64            `json:"-"`
	Quantiles              map[string]float64 `json:"ms"`
}

func summarize(h *hdr.Histogram) summary {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	s := summary{N: h.Count(), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), M: ms(h.Max())}
	s.Quantiles = map[string]float64{"p50": s.P50, "p90": s.P90, "p99": s.P99, "p99.9": s.P999, "max": s.M}
	return s
}

func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "reconload: %s: %d requests in %.1f s (%.1f/s, asked %.0f/s) over %d sampled files (%d asked), %d errors",
		r.URL, r.Requests, r.Duration, r.Achieved, r.Rate, r.Files, r.DistinctFiles, r.Errors)
	for _, k := range slices.Sorted(mapKeys(r.ErrorClasses)) {
		fmt.Fprintf(w, " %s=%d (%s)", k, r.ErrorClasses[k], r.ErrorSample[k])
	}
	fmt.Fprintf(w, "; max issue lag %.1f ms%s\n", r.MaxLagMs, map[bool]string{true: " (interrupted)"}[r.Interrupted])
	for _, k := range []string{"all", "whole", "ranged"} {
		s, ok := r.Kinds[k]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "reconload: %-6s n=%d p50=%.2fms p90=%.2fms p99=%.2fms p99.9=%.2fms max=%.2fms\n", k, s.N, s.P50, s.P90, s.P99, s.P999, s.M)
	}
	for _, k := range slices.Sorted(mapKeys(r.CPUms)) {
		fmt.Fprintf(w, "reconload: cpu %s %.3f ms/request (%.2f cores)\n", k, r.CPUms[k], r.CPUCores[k])
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// classify names the class of a failed request.
func classify(err error, status int) string {
	var ne net.Error
	switch {
	case status != 0:
		return fmt.Sprintf("http_%d", status)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne):
		return "connection"
	}
	return "other"
}

func load(ctx context.Context, c *config, log io.Writer) (*result, error) {
	files, err := readSample(c.sample)
	if err != nil {
		return nil, err
	}
	for _, p := range c.pids {
		if _, err := fixture.ProcCPU(p.pid); err != nil {
			return nil, fmt.Errorf("%w: -pid %s=%d: %v", errInput, p.name, p.pid, err)
		}
	}
	toks, err := tokens(ctx, c, files)
	if err != nil {
		return nil, err
	}
	cl := fixture.NewClient(c.url, "", c.concurrency, c.insecure)
	// Before the clock: a whole-file answer must list the file's terms, so that a server that
	// answers something else (or an index without these files) cannot pass for a fast one.
	for _, f := range files[:min(10, len(files))] {
		if err := check(ctx, cl, toks[f.Scope], f); err != nil {
			return nil, fmt.Errorf("check before the run: %w", err)
		}
	}
	rng := rand.New(rand.NewPCG(c.seed, 0x7265636f6e))
	order := rng.Perm(len(files)) // popularity rank -> sample index, so rank is not the load order
	var zipf *rand.Zipf
	if len(files) > 1 {
		zipf = rand.NewZipf(rng, c.zipf, 1, uint64(len(files)-1))
	}
	pick := func() int {
		if zipf == nil {
			return 0
		}
		return order[zipf.Uint64()]
	}

	var mu sync.Mutex
	hist := map[string]*hdr.Histogram{"all": hdr.New(), "whole": hdr.New(), "ranged": hdr.New()}
	res := &result{URL: c.url, Rate: c.rate, Files: len(files), ErrorClasses: map[string]int{}, ErrorSample: map[string]string{}}
	asked := map[int]bool{}
	var inflight, done int
	cpu0 := map[string]time.Duration{}
	for _, p := range c.pids {
		t, err := fixture.ProcCPU(p.pid)
		if err != nil {
			return nil, fmt.Errorf("-pid %s=%d: %v", p.name, p.pid, err)
		}
		cpu0[p.name] = t
	}
	sem := make(chan struct{}, c.concurrency)
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	start := time.Now()
	stopProgress := make(chan struct{})
	if c.progress > 0 {
		go func() {
			t := time.NewTicker(c.progress)
			defer t.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					mu.Lock()
					fmt.Fprintf(log, "reconload: %s of %s: %d done, %d errors, %d in flight, p99 so far %.1f ms\n",
						time.Since(start).Round(time.Second), c.duration, done, res.Errors, inflight,
						float64(hist["all"].Quantile(0.99).Microseconds())/1000)
					mu.Unlock()
				}
			}
		}()
	}
	var maxLag time.Duration
	at := time.Duration(0)
	for {
		at += time.Duration(rng.ExpFloat64() / c.rate * float64(time.Second))
		if at >= c.duration {
			break
		}
		if d := time.Until(start.Add(at)); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			res.Interrupted = true
			break
		}
		sched := start.Add(at)
		lag := time.Since(sched)
		maxLag = max(maxLag, lag)
		i := pick()
		f := files[i]
		var rg string
		kind := "whole"
		if rng.Float64() < c.rangeShare {
			s := rng.Uint64N(f.Size)
			rg = fmt.Sprintf("bytes=%d-%d", s, s+rng.Uint64N(f.Size-s))
			kind = "ranged"
		}
		mu.Lock()
		asked[i] = true
		res.Requests++
		mu.Unlock()
		sem <- struct{}{} // the wait for a slot counts: latency runs from sched
		mu.Lock()
		inflight++
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, status, err := get(rctx, cl, toks[f.Scope], f.File, rg, c.timeout)
			d := time.Since(sched)
			mu.Lock()
			defer mu.Unlock()
			inflight--
			done++
			res.AnswerBytes += n
			if err != nil {
				res.Errors++
				cls := classify(err, status)
				res.ErrorClasses[cls]++
				if _, ok := res.ErrorSample[cls]; !ok {
					res.ErrorSample[cls] = err.Error()
				}
				return
			}
			hist["all"].Record(d)
			hist[kind].Record(d)
		}()
	}
	issued := time.Since(start)
	wg.Wait()
	close(stopProgress)
	if ctx.Err() != nil {
		res.Interrupted = true
	}
	el := time.Since(start)
	res.Duration = issued.Seconds()
	res.Achieved = float64(res.Requests) / issued.Seconds()
	res.MaxLagMs = float64(maxLag.Microseconds()) / 1000
	res.DistinctFiles = len(asked)
	res.Kinds = map[string]summary{}
	for k, h := range hist {
		if h.Count() > 0 {
			res.Kinds[k] = summarize(h)
		}
	}
	if len(c.pids) > 0 {
		res.CPUms, res.CPUCores = map[string]float64{}, map[string]float64{}
		for _, p := range c.pids {
			t, err := fixture.ProcCPU(p.pid)
			if err != nil {
				return nil, fmt.Errorf("-pid %s=%d after the run: %v", p.name, p.pid, err)
			}
			spent := t - cpu0[p.name]
			if res.Requests > 0 {
				res.CPUms[p.name] = float64(spent.Microseconds()) / 1000 / float64(res.Requests)
			}
			res.CPUCores[p.name] = spent.Seconds() / el.Seconds()
		}
	}
	return res, nil
}

// get asks for one reconstruction and reads the answer to its last byte.
func get(ctx context.Context, cl *fixture.Client, token, file, rg string, timeout time.Duration) (int64, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hdr := http.Header{"Authorization": {"Bearer " + token}}
	if rg != "" {
		hdr.Set("Range", rg)
	}
	resp, err := cl.Do(ctx, http.MethodGet, "/v2/reconstructions/"+file, nil, 0, hdr)
	if err != nil {
		return 0, 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return n, resp.StatusCode, fmt.Errorf("GET /v2/reconstructions/%s (%s): %s", file, rg, resp.Status)
	}
	if err != nil {
		return n, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("GET /v2/reconstructions/%s (%s): empty answer", file, rg)
	}
	return n, 0, nil
}

// check asks for f's whole reconstruction and requires an answer of f's size in at most f.Terms terms.
func check(ctx context.Context, cl *fixture.Client, token string, f file) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cl.Do(ctx, http.MethodGet, "/v2/reconstructions/"+f.File, nil, 0, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET /v2/reconstructions/%s (scope %s): %s: %s", f.File, f.Scope, resp.Status, strings.TrimSpace(string(b)))
	}
	var ans struct {
		Terms []struct {
			UnpackedLength uint64 `json:"unpacked_length"`
		} `json:"terms"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return fmt.Errorf("GET /v2/reconstructions/%s: decode: %w", f.File, err)
	}
	var size uint64
	for _, t := range ans.Terms {
		size += t.UnpackedLength
	}
	// Adjacent terms of one xorb may be answered as one: at most f.Terms terms, and all the bytes.
	if len(ans.Terms) == 0 || len(ans.Terms) > f.Terms || size != f.Size {
		return fmt.Errorf("GET /v2/reconstructions/%s: %d terms of %d bytes, the sample says %d terms of %d bytes",
			f.File, len(ans.Terms), size, f.Terms, f.Size)
	}
	return nil
}
