// Command ingestbench measures an origin's ingest over HTTP.
//
// Mode "xorbs" uploads -n distinct valid xorbs of -chunks LZ4-compressed text-like chunks of
// -chunk-size bytes (64 MiB raw with the defaults), -concurrency at a time, with POST
// /v1/xorbs, and reports MB/s, and with -server-pid the origin's CPU time and MB/s per core.
// With -metrics (the origin's admin /metrics URL) it also reports the validation seconds the
// origin recorded (xet_origin_ingest_validation_seconds) against the request seconds; with
// -profile FILE it saves a CPU profile of the origin taken during the run (admin
// /debug/pprof/profile, which needs an admin token: -admin-token) for `go tool pprof`.
//
// Mode "shards" uploads a pool of -pool-xorbs small xorbs once, then registers -n distinct
// upload shards of -files files of -terms terms each, -concurrency at a time, with POST
// /v1/shards, and reports shards/s, latency quantiles and the origin's CPU per shard; with
// -profile (and -metrics) it saves a CPU profile of the origin as in xorbs mode.
//
// In shards mode -write-token may name several tokens separated by commas, each for its own
// scope: the pool is uploaded with each of them (so every scope holds it), shard i goes to
// token i mod the count and each token has its share of -concurrency in flight, spreading the
// registrations over that many scopes (one scope has at most limits.uploads_per_scope uploads
// in flight at the origin, 16 by default).
//
// In both modes -db-comm NAME (e.g. postgres) also reports the CPU time of every process of
// that command name (utime+stime, plus cutime+cstime of exited children), read from /proc
// before and after the run, and every run prints the load average before and after it: on a
// shared machine, CPU per upload is the steadier number.
//
// Every run uses fresh content (seeded from the clock unless -seed is set), so every upload is
// new work for the origin.
//
//	ingestbench -url http://127.0.0.1:8080 -write-token $W -server-pid $PID \
//	    -metrics http://127.0.0.1:8081/metrics -mode xorbs -n 24 -concurrency 4
//	ingestbench -url http://127.0.0.1:8080 -write-token $W -mode shards -n 4000 -concurrency 32
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/xetcdn/xetcdn/perf/fixture"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

type config struct {
	url, wtok, mode, metrics, profile string
	adminTok                          string
	dbComm                            string
	insecure                          bool
	seed                              uint64
	serverPID, dbPID                  int
	n, concurrency                    int
	chunks, chunkSize                 int
	pool, files, terms                int
	shape                             string
	ownChunks                         int
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the origin")
	flag.StringVar(&c.wtok, "write-token", "", "write token (shards mode: several, comma-separated, one per scope)")
	flag.BoolVar(&c.insecure, "insecure", false, "accept any TLS certificate")
	flag.StringVar(&c.mode, "mode", "xorbs", "xorbs | shards")
	flag.Uint64Var(&c.seed, "seed", uint64(time.Now().UnixNano()), "content seed (default: the clock, so every run uploads new content)")
	flag.IntVar(&c.serverPID, "server-pid", 0, "origin process id, for its CPU time from /proc")
	flag.StringVar(&c.metrics, "metrics", "", "origin admin /metrics URL (validation seconds)")
	flag.StringVar(&c.profile, "profile", "", "save a CPU profile of the origin during the run to FILE.1, FILE.2, ... (needs -metrics)")
	flag.StringVar(&c.adminTok, "admin-token", "", "admin token for -profile (xet-origin token --access admin)")
	flag.IntVar(&c.dbPID, "db-pid", 0, "also report the CPU time of this process and its children (a private PostgreSQL's postmaster: its backends), timed part only")
	flag.StringVar(&c.dbComm, "db-comm", "", "also report the CPU time of all processes with this command name (e.g. postgres)")
	flag.IntVar(&c.n, "n", 0, "uploads (default 16 xorbs or 2000 shards)")
	flag.IntVar(&c.concurrency, "concurrency", 4, "concurrent uploads")
	flag.IntVar(&c.chunks, "chunks", 1024, "xorbs mode: chunks per xorb")
	flag.IntVar(&c.chunkSize, "chunk-size", 64<<10, "xorbs mode: raw bytes per chunk")
	flag.IntVar(&c.pool, "pool-xorbs", 16, "shards mode: xorbs the files draw from")
	flag.IntVar(&c.files, "files", 4, "shards mode: files per shard")
	flag.IntVar(&c.terms, "terms", 4, "shards mode: terms per file")
	flag.StringVar(&c.shape, "shape", "pool", "shards mode: pool (every shard's files draw from the shared -pool-xorbs; their dedup entries take over the same rows) | own (shard i's files reference a xorb of its own, uploaded before the run in shard i's scope and described in the shard's xorb section, as hf_xet sends it)")
	flag.IntVar(&c.ownChunks, "own-chunks", 64, "shards mode, -shape own: chunks of each shard's own xorb")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch c.mode {
	case "xorbs":
		c.n = cmpOr(c.n, 16)
		if strings.Contains(c.wtok, ",") {
			err = fmt.Errorf("-write-token: several tokens are for -mode shards only")
			break
		}
		err = xorbs(ctx, &c)
	case "shards":
		c.n = cmpOr(c.n, 2000)
		err = shards(ctx, &c)
	default:
		err = fmt.Errorf("-mode %q: want xorbs or shards", c.mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ingestbench:", err)
		os.Exit(1)
	}
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// usage is what a run cost: wall time, the origin's CPU time (when known) and ours.
type usage struct {
	wall, server, self, db, tree    time.Duration
	serverKnown, dbKnown, treeKnown bool
	load0, load1                    string // load averages before and after
}

// report prints the database's CPU (when measured) per unit and the load averages.
func (u usage) report(n int, unit string, dbComm string) {
	if u.treeKnown {
		fmt.Printf("db-pid cpu: %.2f s = %.3f ms per %s, %.2f cores busy\n", u.tree.Seconds(),
			u.tree.Seconds()*1000/float64(n), unit, u.tree.Seconds()/u.wall.Seconds())
	}
	if u.dbKnown {
		fmt.Printf("%s cpu: %.2f s = %.2f ms per %s, %.2f cores busy\n", dbComm, u.db.Seconds(),
			u.db.Seconds()*1000/float64(n), unit, u.db.Seconds()/u.wall.Seconds())
	}
	fmt.Printf("load average: before %s, after %s\n", u.load0, u.load1)
}

type meter struct {
	pid, dbPID   int
	dbComm       string
	tree         time.Duration
	start        time.Time
	server, self time.Duration
	db           time.Duration
	load         string
	err          error
}

func startMeter(pid, dbPID int, dbComm string) *meter {
	m := &meter{pid: pid, dbPID: dbPID, dbComm: dbComm, start: time.Now(), load: loadAvg()}
	if dbPID > 0 {
		m.tree, _ = fixture.ProcTreeCPU(dbPID)
	}
	m.self, _ = fixture.ProcCPU(os.Getpid())
	if pid > 0 {
		m.server, m.err = fixture.ProcCPU(pid)
	}
	if dbComm != "" {
		m.db = commCPU(dbComm)
	}
	return m
}

// loadAvg returns the three load averages of /proc/loadavg, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// commCPU sums utime, stime, cutime and cstime of every process whose command name is comm
// (children that exited are counted by their parent). Unreadable processes are skipped.
func commCPU(comm string) time.Duration {
	ents, _ := os.ReadDir("/proc")
	var ticks time.Duration
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if c, f, err := fixture.ProcStat(e.Name()); err == nil && c == comm {
			ticks += fixture.StatTicks(f, 4)
		}
	}
	return ticks * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

func (m *meter) stop() usage {
	u := usage{wall: time.Since(m.start), load0: m.load, load1: loadAvg()}
	if m.dbPID > 0 {
		if t, err := fixture.ProcTreeCPU(m.dbPID); err == nil {
			u.tree, u.treeKnown = t-m.tree, true
		}
	}
	if m.dbComm != "" {
		u.db, u.dbKnown = commCPU(m.dbComm)-m.db, true
	}
	self, _ := fixture.ProcCPU(os.Getpid())
	u.self = self - m.self
	if m.pid > 0 && m.err == nil {
		if s, err := fixture.ProcCPU(m.pid); err == nil {
			u.server, u.serverKnown = s-m.server, true
		}
	}
	return u
}

func xorbs(ctx context.Context, c *config) error {
	t0 := time.Now()
	set, err := fixture.NewIngestSet(c.seed, c.chunks, c.chunkSize)
	if err != nil {
		return err
	}
	// Bodies are built before the clock starts: the first chunk of each differs (cheap), the
	// rest is shared, so n uploads cost one compressed xorb of memory plus n first chunks.
	type upload struct {
		first, rest []byte
		h           hash.Hash
	}
	ups := make([]upload, c.n)
	var wire int64
	for i := range ups {
		f, r, h := set.Xorb(i)
		ups[i] = upload{first: f, rest: r, h: h}
		wire += int64(len(f) + len(r))
	}
	raw := set.RawLen() * int64(c.n)
	fmt.Printf("setup: %d xorbs of %d x %d B LZ4 text (ratio %.2f, %.1f MiB on the wire each) in %v\n", c.n, c.chunks, c.chunkSize,
		set.Ratio(), float64(wire)/float64(c.n)/(1<<20), time.Since(t0).Round(time.Millisecond))

	cl := fixture.NewClient(c.url, c.wtok, c.concurrency, c.insecure)
	admin := &http.Client{}
	valKey, reqKey := "xet_origin_ingest_validation_seconds_sum", "xet_origin_http_request_duration_seconds_sum"
	var val0, req0 float64
	if c.metrics != "" {
		if val0, err = fixture.MetricSum(ctx, admin, c.metrics, valKey, `kind="xorb"`); err != nil {
			return err
		}
		req0, _ = fixture.MetricSum(ctx, admin, c.metrics, reqKey, `xorb`)
	}
	stopProfile := startProfile(ctx, c, admin)

	m := startMeter(c.serverPID, c.dbPID, c.dbComm)
	lat, err := timedUploads(ctx, len(ups), c.concurrency, "xorb", func(ctx context.Context, i int) (bool, error) {
		return cl.PutXorb(ctx, ups[i].h, ups[i].first, ups[i].rest)
	})
	if err != nil {
		return err
	}
	u := m.stop()
	stopProfile()
	mb := float64(raw) / 1e6
	fmt.Printf("xorbs: n=%d concurrency=%d raw=%.0f MB wire=%.0f MB wall=%v  %.1f MB/s raw (%.1f MB/s wire)  upload %s\n",
		c.n, c.concurrency, mb, float64(wire)/1e6, u.wall.Round(time.Millisecond), mb/u.wall.Seconds(),
		float64(wire)/1e6/u.wall.Seconds(), quantiles(lat))
	if u.serverKnown {
		fmt.Printf("origin cpu: %.2f s = %.1f ms per xorb, %.0f MB/s raw per core, %.2f cores busy; ingestbench itself %.2f s\n",
			u.server.Seconds(), u.server.Seconds()*1000/float64(c.n), mb/u.server.Seconds(), u.server.Seconds()/u.wall.Seconds(),
			u.self.Seconds())
	}
	u.report(c.n, "xorb", c.dbComm)
	if c.metrics != "" {
		val1, err := fixture.MetricSum(ctx, admin, c.metrics, valKey, `kind="xorb"`)
		if err != nil {
			return err
		}
		req1, _ := fixture.MetricSum(ctx, admin, c.metrics, reqKey, `xorb`)
		v, r := val1-val0, req1-req0
		line := fmt.Sprintf("validation (metric, wall): %.2f s = %.1f ms per xorb", v, v*1000/float64(c.n))
		if r > 0 {
			line += fmt.Sprintf(", %.0f%% of xorb request time (%.2f s)", 100*v/r, r)
		}
		if u.serverKnown {
			line += fmt.Sprintf("; validation wall / origin CPU = %.0f%% (an upper bound of the CPU share when cores are contended)", 100*v/u.server.Seconds())
		}
		fmt.Println(line)
	}
	return nil
}

// startProfile runs profile in the background when -profile and -metrics are set. The
// returned stop ends it, waits for it and reports its failure on stderr; a run that fails
// before calling stop exits with the profile unfinished.
func startProfile(ctx context.Context, c *config, admin *http.Client) (stop func()) {
	if c.profile == "" || c.metrics == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- profile(ctx, admin, strings.TrimSuffix(c.metrics, "/metrics"), c.adminTok, c.profile) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "ingestbench: profile:", err)
		}
	}
}

// profile saves a CPU profile of the origin from its admin listener until ctx is done (at most
// 120 s). pprof's profile endpoint takes a duration up front, so the profile is asked for in
// 2-second slices and the slices are saved as FILE.1, FILE.2, ... for `go tool pprof` to merge.
// The origin's allocation profile is saved before the first slice and after the last, as
// FILE-allocs.0 and FILE-allocs.1: what the run allocated is
// `go tool pprof -sample_index=alloc_space -diff_base FILE-allocs.0 FILE-allocs.1`.
func profile(ctx context.Context, c *http.Client, admin, tok, file string) error {
	get := func(path, to string) error {
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, admin+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%w: %s: %d %s", fixture.ErrStatus, path, resp.StatusCode, b)
		}
		return os.WriteFile(to, b, 0o644)
	}
	if err := get("/debug/pprof/allocs", file+"-allocs.0"); err != nil {
		return err
	}
	for i := 1; i <= 60 && ctx.Err() == nil; i++ {
		if err := get("/debug/pprof/profile?seconds=2", fmt.Sprintf("%s.%d", file, i)); err != nil {
			return err
		}
	}
	return get("/debug/pprof/allocs", file+"-allocs.1")
}

func shards(ctx context.Context, c *config) error {
	t0 := time.Now()
	toks := strings.Split(c.wtok, ",")
	cls := make([]*fixture.Client, len(toks))
	for i, t := range toks {
		if t == "" {
			return fmt.Errorf("-write-token: token %d of %d is empty", i+1, len(toks))
		}
		cls[i] = fixture.NewClient(c.url, t, max(1, c.concurrency/len(toks)), c.insecure)
	}
	var bodies [][]byte
	var err error
	switch c.shape {
	case "pool":
		bodies, err = poolShards(ctx, c, cls)
	case "own":
		bodies, err = ownShards(ctx, c, cls)
	default:
		err = fmt.Errorf("-shape %q: want pool or own", c.shape)
	}
	if err != nil {
		return err
	}
	fmt.Printf("setup: shape %s, %d shards of %d files x %d terms (%d B each) over %d scopes in %v\n", c.shape, c.n, c.files, c.terms,
		len(bodies[0]), len(cls), time.Since(t0).Round(time.Millisecond))

	stopProfile := startProfile(ctx, c, &http.Client{})

	m := startMeter(c.serverPID, c.dbPID, c.dbComm)
	// Each scope gets its share of -concurrency and the shards i with i mod len(cls) = its
	// index, so no scope has more in flight than its share (the origin refuses uploads over
	// its per-scope limit).
	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	g, gctx := errgroup.WithContext(ctx)
	for k, cl := range cls {
		mine := make([][]byte, 0, len(bodies)/len(cls)+1)
		for i := k; i < len(bodies); i += len(cls) {
			mine = append(mine, bodies[i])
		}
		g.Go(func() error {
			l, err := timedUploads(gctx, len(mine), max(1, c.concurrency/len(cls)), "shard", func(ctx context.Context, i int) (bool, error) {
				return cl.PutShard(ctx, mine[i])
			})
			mu.Lock()
			lat = append(lat, l...)
			mu.Unlock()
			if err != nil && len(cls) > 1 {
				err = fmt.Errorf("scope %d: %w", k+1, err)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	u := m.stop()
	stopProfile()
	fmt.Printf("shards: shape=%s n=%d concurrency=%d scopes=%d files/shard=%d terms/file=%d wall=%v  %.0f shards/s  latency %s\n",
		c.shape, c.n, c.concurrency, len(cls), c.files, c.terms, u.wall.Round(time.Millisecond), float64(c.n)/u.wall.Seconds(), quantiles(lat))
	if u.serverKnown {
		fmt.Printf("origin cpu: %.2f s = %.2f ms per shard, %.2f cores busy; ingestbench itself %.2f s\n",
			u.server.Seconds(), u.server.Seconds()*1000/float64(c.n), u.server.Seconds()/u.wall.Seconds(), u.self.Seconds())
	}
	u.report(c.n, "shard", c.dbComm)
	return nil
}

// poolShards uploads the pool of -pool-xorbs xorbs in every scope (untimed) and returns the
// upload shards: files drawing random chunk runs from the whole pool, no xorb section. Every
// shard's dedup entries (its files' first chunks and anchors) are chunks of the same pool, so
// concurrent registrations take over the same dedup rows: the worst case for batches in flight
// at once, not what hf_xet uploads look like.
func poolShards(ctx context.Context, c *config, cls []*fixture.Client) ([][]byte, error) {
	spec := fixture.XorbSpec{Tag: "reg", Seed: 1, Chunks: 1024, MinChunk: 16, MaxChunk: 240}
	xs := spec.BuildAll(c.pool, runtime.GOMAXPROCS(0))
	for _, cl := range cls { // every scope uploads (and so holds) the pool
		if err := cl.PutXorbs(ctx, xs, 4); err != nil {
			return nil, err
		}
	}
	layouts := make([]*xorb.Layout, len(xs))
	for i := range xs {
		layouts[i] = xs[i].Layout
	}
	bodies := make([][]byte, c.n)
	for i := range bodies {
		sh, err := fixture.RegistrationShard(layouts, c.seed, i, c.files, c.terms)
		if err != nil {
			return nil, err
		}
		bodies[i] = sh.AppendUpload(nil)
	}
	return bodies, nil
}

// ownShards uploads, untimed, one fresh xorb of -own-chunks chunks per shard through the scope
// that registers the shard (shard i's scope is token i mod the count, as in the timed run), so
// that scope possesses it as after a real upload, and returns the shards: files whose terms are
// chunk runs of that xorb only, and the xorb's block in the shard's xorb section, as hf_xet
// sends the xorbs of its session. Each shard's dedup entries (its files' first chunks, chunks
// with hash % 1024 == 0 of its xorb section, anchors) are new rows, shared with no other
// registration.
func ownShards(ctx context.Context, c *config, cls []*fixture.Client) ([][]byte, error) {
	// The seed makes the xorbs new content for every run, as the shards are; chunks of at
	// least 48 bytes keep the whole "tag/seed/xorb/chunk:" prefix that makes them distinct.
	spec := fixture.XorbSpec{Tag: "own", Seed: c.seed, Chunks: c.ownChunks, MinChunk: 48, MaxChunk: 240}
	if err := spec.Check(); err != nil {
		return nil, err
	}
	xs := spec.BuildAll(c.n, runtime.GOMAXPROCS(0))
	g, gctx := errgroup.WithContext(ctx)
	for k, cl := range cls {
		var mine []fixture.Xorb
		for i := k; i < len(xs); i += len(cls) {
			mine = append(mine, xs[i])
		}
		g.Go(func() error { return cl.PutXorbs(gctx, mine, 4) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	bodies := make([][]byte, c.n)
	for i := range bodies {
		ls := []*xorb.Layout{xs[i].Layout}
		sh, err := fixture.RegistrationShard(ls, c.seed, i, c.files, c.terms)
		if err != nil {
			return nil, err
		}
		sh.Xorbs = []shard.Xorb{fixture.XorbBlock(xs[i].Layout)}
		bodies[i] = sh.AppendUpload(nil)
	}
	return bodies, nil
}

// quantiles formats p50/p99/max of lat (sorted in place).
func quantiles(lat []time.Duration) string {
	if len(lat) == 0 {
		return "p50=- p99=- max=-"
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("p50=%v p99=%v max=%v", q(0.5), q(0.99), lat[len(lat)-1].Round(100*time.Microsecond))
}

// timedUploads runs put(0..n-1) with at most concurrency at once and returns each call's
// latency. Every upload must be new to the origin: one it already had means the run would
// not measure a real ingest, so it fails the run (use a new -seed).
func timedUploads(ctx context.Context, n, concurrency int, kind string, put func(context.Context, int) (bool, error)) ([]time.Duration, error) {
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i := range n {
		g.Go(func() error {
			t := time.Now()
			ins, err := put(gctx, i)
			if err != nil {
				return fmt.Errorf("%s %d: %w", kind, i, err)
			}
			if !ins {
				return fmt.Errorf("%s %d: the origin had it already; use a new -seed", kind, i)
			}
			mu.Lock()
			lat = append(lat, time.Since(t))
			mu.Unlock()
			return nil
		})
	}
	return lat, g.Wait()
}
