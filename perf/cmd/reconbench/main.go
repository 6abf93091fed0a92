// Command reconbench measures GET /v1|v2/reconstructions at an origin or an edge over HTTP.
//
// Latency mode (the default) loads, through the real upload routes, a file of -terms terms over
// -xorbs xorbs of -chunks chunks for every shape of -shapes (skipped when the server already
// has the file), then times -full whole-file and -ranged random-range requests one at a time,
// each to the last byte of the answer, and prints p50/p90/p99/max per shape and kind, and per
// shape over both kinds together.
//
// Shapes: "worst" puts consecutive terms in different xorbs (term i in xorb i mod X), so no two
// fetch ranges merge; "merged" puts each xorb's terms next to each other. Chunks are small
// (-chunk-min..-chunk-max bytes): the cost of an answer depends on terms, xorbs and chunks,
// not on the bytes behind them.
//
// Throughput mode (-concurrency N -duration D) loads -files files of -min-terms..-max-terms
// terms (log-uniform) over a pool of -pool-xorbs xorbs, then runs N closed-loop clients for D,
// each picking a random file and asking for the whole file or (with probability -range-share)
// a random range, and prints req/s and the latency quantiles.
//
//	reconbench -url http://127.0.0.1:8080 -write-token $W -read-token $R [-shapes worst,merged]
//	reconbench -url https://127.0.0.1:8443 -insecure -upload-url http://127.0.0.1:8080 \
//	    -write-token $W -read-token $R -concurrency 16 -duration 30s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/perf/fixture"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

type config struct {
	url, uploadURL, wtok, rtok, api string
	insecure                        bool
	seed                            uint64
	loadConc                        int
	chunkMin, chunkMax              int

	shapes             []fixture.Shape
	xorbs, chunks, nt  int
	full, ranged       int
	concurrency        int
	duration           time.Duration
	files, pool        int
	minTerms, maxTerms int
	rangeShare         float64
	serverPID          int
}

func main() {
	var c config
	var shapes string
	flag.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the origin or edge that answers reconstructions")
	flag.StringVar(&c.uploadURL, "upload-url", "", "base URL to upload the fixture to (default -url)")
	flag.StringVar(&c.wtok, "write-token", "", "write token (fixture upload)")
	flag.StringVar(&c.rtok, "read-token", "", "read token of the same scope (reconstructions)")
	flag.BoolVar(&c.insecure, "insecure", false, "accept any TLS certificate (self-signed edge)")
	flag.StringVar(&c.api, "api", "v2", "v1 | v2")
	flag.Uint64Var(&c.seed, "seed", 1, "fixture seed: the same seed gives the same files")
	flag.IntVar(&c.loadConc, "load-concurrency", 4, "concurrent xorb uploads while loading")
	flag.IntVar(&c.chunkMin, "chunk-min", 16, "smallest chunk, bytes")
	flag.IntVar(&c.chunkMax, "chunk-max", 240, "largest chunk, bytes")
	flag.StringVar(&shapes, "shapes", "worst,merged", "latency mode: comma-separated shapes (worst, merged)")
	flag.IntVar(&c.xorbs, "xorbs", 1000, "latency mode: xorbs of the file")
	flag.IntVar(&c.chunks, "chunks", 1024, "chunks per xorb")
	flag.IntVar(&c.nt, "terms", 100000, "latency mode: terms of the file")
	flag.IntVar(&c.full, "full", 200, "latency mode: whole-file requests per shape")
	flag.IntVar(&c.ranged, "ranged", 200, "latency mode: random-range requests per shape")
	flag.IntVar(&c.concurrency, "concurrency", 0, "throughput mode: closed-loop clients (0 = latency mode)")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "throughput mode: run time")
	flag.IntVar(&c.files, "files", 200, "throughput mode: files")
	flag.IntVar(&c.pool, "pool-xorbs", 64, "throughput mode: xorbs the files draw from")
	flag.IntVar(&c.minTerms, "min-terms", 10, "throughput mode: fewest terms of a file")
	flag.IntVar(&c.maxTerms, "max-terms", 10000, "throughput mode: most terms of a file")
	flag.Float64Var(&c.rangeShare, "range-share", 0.5, "throughput mode: share of random-range requests")
	flag.IntVar(&c.serverPID, "server-pid", 0, "if set, also report the CPU time this process (the server) spent per request")
	flag.Parse()
	for _, s := range strings.Split(shapes, ",") {
		sh, err := fixture.ParseShape(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "reconbench:", err)
			os.Exit(2)
		}
		c.shapes = append(c.shapes, sh)
	}
	if c.uploadURL == "" {
		c.uploadURL = c.url
	}
	if c.api != "v1" && c.api != "v2" {
		fmt.Fprintln(os.Stderr, "reconbench: -api must be v1 or v2")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	run := latency
	if c.concurrency > 0 {
		run = throughput
	}
	if err := run(ctx, &c); err != nil {
		fmt.Fprintln(os.Stderr, "reconbench:", err)
		os.Exit(1)
	}
}

// target is a file to ask for: its reconstruction path and size.
type target struct {
	path string
	size uint64
}

// load uploads the xorbs of spec and registers files over them, unless the reader already sees
// every file. It returns the files as targets.
func load(ctx context.Context, c *config, reader *fixture.Client, spec fixture.XorbSpec, n int,
	files func([]*xorb.Layout) ([]shard.File, error)) ([]target, error) {
	start := time.Now()
	if err := spec.Check(); err != nil {
		return nil, err
	}
	xs := spec.BuildAll(n, runtime.GOMAXPROCS(0))
	layouts := make([]*xorb.Layout, n)
	for i := range xs {
		layouts[i] = xs[i].Layout
	}
	fs, err := files(layouts)
	if err != nil {
		return nil, err
	}
	present := true
	for _, f := range fs {
		if _, ok, err := reader.FileSize(ctx, f.Hash); err != nil {
			return nil, err
		} else if !ok {
			present = false
			break
		}
	}
	how := "already loaded"
	if !present {
		up := fixture.NewClient(c.uploadURL, c.wtok, c.loadConc, c.insecure)
		if err := up.PutXorbs(ctx, xs, c.loadConc); err != nil {
			return nil, err
		}
		if err := up.Register(ctx, fs, layouts); err != nil {
			return nil, err
		}
		how = "uploaded"
	}
	out := make([]target, len(fs))
	for i, f := range fs {
		out[i] = target{path: "/" + c.api + "/reconstructions/" + f.Hash.String(), size: f.Size()}
	}
	fmt.Printf("setup: %s/%d: %d xorbs x %d chunks, %d file(s), %s in %v\n", spec.Tag, spec.Seed, n, spec.Chunks,
		len(fs), how, time.Since(start).Round(time.Millisecond))
	return out, nil
}

func latency(ctx context.Context, c *config) error {
	reader := fixture.NewClient(c.url, c.rtok, 1, c.insecure)
	for _, shape := range c.shapes {
		refs, err := fixture.ReconRefs(shape, c.xorbs, c.chunks, c.nt)
		if err != nil {
			return err
		}
		spec := fixture.XorbSpec{Tag: string(shape), Seed: c.seed, Chunks: c.chunks, MinChunk: c.chunkMin, MaxChunk: c.chunkMax}
		ts, err := load(ctx, c, reader, spec, c.xorbs, func(ls []*xorb.Layout) ([]shard.File, error) {
			f, err := fixture.NewFile(ls, refs)
			return []shard.File{f}, err
		})
		if err != nil {
			return err
		}
		t := ts[0]
		if err := checkAnswer(ctx, reader, t, c.nt); err != nil {
			return fmt.Errorf("%s: %w", shape, err)
		}
		rng := rand.New(rand.NewPCG(c.seed, 2))
		var all []time.Duration // both kinds: the set the targets name ("200 full + 200 ranged: p99")
		for _, kind := range []string{"full", "ranged"} {
			n := c.full
			if kind == "ranged" {
				n = c.ranged
			}
			settle()
			var lat []time.Duration
			var bytesOut int64
			cpu := c.cpuMeter()
			for range n {
				hdr := ""
				if kind == "ranged" {
					hdr = randomRange(rng, t.size)
				}
				d, nb, err := get(ctx, reader, t.path, hdr)
				if err != nil {
					return err
				}
				lat = append(lat, d)
				bytesOut += nb
			}
			all = append(all, lat...)
			fmt.Printf("%s %s %s: n=%d %s avg_answer=%d B%s\n", c.api, shape, kind, n, quantiles(lat),
				bytesOut/int64(max(n, 1)), cpu(n, 0))
		}
		if c.full > 0 && c.ranged > 0 {
			fmt.Printf("%s %s full+ranged: n=%d %s\n", c.api, shape, len(all), quantiles(all))
		}
	}
	return nil
}

func throughput(ctx context.Context, c *config) error {
	reader := fixture.NewClient(c.url, c.rtok, c.concurrency, c.insecure)
	spec := fixture.XorbSpec{Tag: "mix", Seed: c.seed, Chunks: c.chunks, MinChunk: c.chunkMin, MaxChunk: c.chunkMax}
	ts, err := load(ctx, c, reader, spec, c.pool, func(ls []*xorb.Layout) ([]shard.File, error) {
		fs := make([]shard.File, c.files)
		for i := range fs {
			refs, err := fixture.MixRefs(ls, c.seed, i, c.minTerms, c.maxTerms)
			if err != nil {
				return nil, err
			}
			if fs[i], err = fixture.NewFile(ls, refs); err != nil {
				return nil, err
			}
		}
		return fs, nil
	})
	if err != nil {
		return err
	}
	// Warm up: every file once, so that a cold metadata cache is not what is measured.
	for _, t := range ts {
		if _, _, err := get(ctx, reader, t.path, ""); err != nil {
			return err
		}
	}
	settle()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		errs     int
		firstErr error
		wg       sync.WaitGroup
	)
	cpu := c.cpuMeter()
	deadline := time.Now().Add(c.duration)
	start := time.Now()
	for w := range c.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(c.seed, uint64(w)+100))
			var mine []time.Duration
			var bad int
			var werr error
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t := ts[rng.IntN(len(ts))]
				hdr := ""
				if rng.Float64() < c.rangeShare {
					hdr = randomRange(rng, t.size)
				}
				d, _, err := get(ctx, reader, t.path, hdr)
				if err != nil {
					bad++
					werr = firstErrOf(werr, err)
					continue
				}
				mine = append(mine, d)
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			firstErr = firstErrOf(firstErr, werr)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("%s throughput: concurrency=%d files=%d terms=%d..%d range_share=%.2f duration=%v ok=%d errors=%d req/s=%.0f %s%s\n",
		c.api, c.concurrency, len(ts), c.minTerms, c.maxTerms, c.rangeShare, el.Round(time.Millisecond),
		len(lat), errs, float64(len(lat))/el.Seconds(), quantiles(lat), cpu(len(lat), el))
	if firstErr != nil {
		return fmt.Errorf("%d requests failed, first: %w", errs, firstErr)
	}
	return nil
}

// cpuMeter starts measuring the server's CPU time; the returned function formats the time
// spent since, per request (and in cores over el when el > 0). Without -server-pid it prints
// nothing.
func (c *config) cpuMeter() func(n int, el time.Duration) string {
	if c.serverPID == 0 {
		return func(int, time.Duration) string { return "" }
	}
	t0, err0 := fixture.ProcCPU(c.serverPID)
	return func(n int, el time.Duration) string {
		t1, err1 := fixture.ProcCPU(c.serverPID)
		if err0 != nil || err1 != nil || n == 0 {
			return fmt.Sprintf(" server_cpu=? (%v)", firstErrOf(err0, err1))
		}
		s := fmt.Sprintf(" server_cpu=%.2fms/req", float64(t1-t0)/float64(time.Millisecond)/float64(n))
		if el > 0 {
			s += fmt.Sprintf(" server_cores=%.2f", (t1-t0).Seconds()/el.Seconds())
		}
		return s
	}
}

func firstErrOf(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// randomRange is a Range header for a uniformly random start and a uniformly random end after it.
func randomRange(rng *rand.Rand, size uint64) string {
	if size == 0 {
		return ""
	}
	s := rng.Uint64N(size)
	e := s + rng.Uint64N(size-s)
	return fmt.Sprintf("bytes=%d-%d", s, e)
}

// quantiles formats p50/p90/p99/max of lat (sorted in place).
func quantiles(lat []time.Duration) string {
	if len(lat) == 0 {
		return "p50=- p90=- p99=- max=-"
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("p50=%v p90=%v p99=%v max=%v", q(0.5), q(0.9), q(0.99), lat[len(lat)-1].Round(10*time.Microsecond))
}

// settle collects the garbage of the setup (the fixture's xorbs, the decoded check answer: a few
// hundred MB) before a timed loop, so that the client's own garbage collector does not run in the
// middle of the measured requests and steal the core the requests need.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
}

// get times one request to the last byte of its body.
func get(ctx context.Context, c *fixture.Client, path, rng string) (time.Duration, int64, error) {
	var hdr http.Header
	if rng != "" {
		hdr = http.Header{"Range": {rng}}
	}
	t := time.Now()
	resp, err := c.Do(ctx, http.MethodGet, path, nil, 0, hdr)
	if err != nil {
		return 0, 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(t)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%w: GET %s (%s): %d", fixture.ErrStatus, path, rng, resp.StatusCode)
	}
	return d, n, nil
}

// checkAnswer asks for the whole file once and requires an answer of terms terms, so that a
// misconfigured server (or a wrong fixture) cannot pass for a fast one.
func checkAnswer(ctx context.Context, c *fixture.Client, t target, terms int) error {
	resp, err := c.Do(ctx, http.MethodGet, t.path, nil, 0, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET %s: %d", fixture.ErrStatus, t.path, resp.StatusCode)
	}
	var ans struct {
		Terms []json.RawMessage `json:"terms"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	if len(ans.Terms) != terms {
		return fmt.Errorf("answer has %d terms, want %d", len(ans.Terms), terms)
	}
	return nil
}
