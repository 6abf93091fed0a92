package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/xetcdn/xetcdn/perf/trace"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// fileState is one file version of the trace: its content and, once uploaded, its hash.
type fileState struct {
	content trace.Content
	ready   chan struct{} // closed when hash (or err) is set
	hash    hash.Hash
	err     error
	// preload: downloaded before the trace uploads it, or the previous version of an upload
	// the trace never uploads: uploaded before the clock starts
	preload bool
	once    sync.Once
}

func (s *fileState) set(h hash.Hash, err error) {
	s.once.Do(func() { s.hash, s.err = h, err; close(s.ready) })
}

type replayer struct {
	c      *config
	recs   []trace.Record
	log    io.Writer
	files  map[trace.FileKey]*fileState
	tokens map[string]string // repo -> token

	mu      sync.Mutex
	http    map[string]*http.Client // per trace client
	clients map[[3]string]*xetclient.Client

	stats *stats
	// newChunks: upload line index -> its lower bound (newchunks.go)
	newChunks map[int]int64
}

func newReplayer(c *config, recs []trace.Record, log io.Writer) (*replayer, error) {
	r := &replayer{c: c, recs: recs, log: log, files: map[trace.FileKey]*fileState{}, tokens: map[string]string{},
		http: map[string]*http.Client{}, clients: map[[3]string]*xetclient.Client{}}
	for i, rec := range recs {
		if _, ok := c.edges[rec.Region]; rec.Region != "" && !ok {
			return nil, fmt.Errorf("trace line %d: field \"region\": no -edge %s=URL for region %q", lineOf(recs, i), rec.Region, rec.Region)
		}
		r.tokens[rec.Repo] = c.token
		if rec.Op == trace.Token {
			continue
		}
		k := trace.FileKey{Repo: rec.Repo, File: rec.File, Version: rec.Version}
		if _, ok := r.files[k]; !ok {
			r.files[k] = &fileState{content: trace.ContentOf(rec), ready: make(chan struct{}), preload: rec.Op != trace.Upload}
		}
	}
	// An upload of version v dedups against version v-1 (what the fine-tune row measures):
	// when the trace never has v-1, it is preloaded like a file downloaded before its upload.
	// Without it the upload would send the whole file, measured against its changed blocks.
	// The trace does not say v-1's head (trace.Content.Head): when v has one of h bytes, v-1
	// gets (h+1)/2, so that its blocks sit at other offsets, as the generator's versions do.
	for _, rec := range recs {
		if rec.Op != trace.Upload || rec.Version == 0 {
			continue
		}
		k := trace.FileKey{Repo: rec.Repo, File: rec.File, Version: rec.Version - 1}
		if _, ok := r.files[k]; !ok {
			c := trace.ContentOf(rec)
			c.Version--
			if c.Head > 0 {
				prev := (c.Head + 1) / 2
				c.Size -= c.Head - prev
				c.Head = prev
			}
			r.files[k] = &fileState{content: c, ready: make(chan struct{}), preload: true}
		}
	}
	for k, s := range r.files {
		if s.preload && !c.preload {
			return nil, fmt.Errorf("%s is downloaded before the trace uploads it (or is the previous version of an upload and never uploaded), and -no-preload is set", k)
		}
	}
	return r, nil
}

// lineOf returns the trace line number of record i (blank lines aside, records are lines).
func lineOf(_ []trace.Record, i int) int { return i + 1 }

func (r *replayer) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.clients {
		c.Close()
	}
	for _, h := range r.http {
		h.CloseIdleConnections()
	}
}

// httpFor returns the connection pool of a trace client.
func (r *replayer) httpFor(client string) *http.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.http[client]; ok {
		return h
	}
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 30 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}
	if r.c.insecure {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // -insecure asks for it
	}
	h := &http.Client{Transport: t}
	r.http[client] = h
	return h
}

// clientFor returns the xetclient of a trace client for one endpoint and repository (the token
// is the repository's).
func (r *replayer) clientFor(client, endpoint, repo string) (*xetclient.Client, error) {
	hc := r.httpFor(client)
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [3]string{client, endpoint, repo}
	if c, ok := r.clients[k]; ok {
		return c, nil
	}
	c, err := xetclient.New(xetclient.Options{Endpoint: endpoint, Token: r.tokens[repo], HTTPClient: hc,
		UserAgent: "xetcdn-replay/1", Retry: xetclient.RetryPolicy{MaxAttempts: r.c.attempts}})
	if err != nil {
		return nil, err
	}
	r.clients[k] = c
	return c, nil
}

// endpoint is where a record's downloads go.
func (r *replayer) endpoint(rec trace.Record) string {
	if u, ok := r.c.edges[rec.Region]; ok {
		return u
	}
	return r.c.origin
}

// mintTokens runs -token-cmd once per repository.
func (r *replayer) mintTokens(ctx context.Context) error {
	if len(r.c.tokenCmd) == 0 {
		return nil
	}
	repos := make([]string, 0, len(r.tokens))
	for repo := range r.tokens {
		repos = append(repos, repo)
	}
	slices.Sort(repos)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, repo := range repos {
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(gctx, time.Minute)
			defer cancel()
			args := append(slices.Clone(r.c.tokenCmd[1:]), repo)
			var stderr strings.Builder
			cmd := exec.CommandContext(cctx, r.c.tokenCmd[0], args...)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("-token-cmd for %s: %v: %s", repo, err, strings.TrimSpace(stderr.String()))
			}
			tok := strings.TrimSpace(string(out))
			if tok == "" || strings.ContainsAny(tok, " \n\t") {
				return fmt.Errorf("-token-cmd for %s printed %q, want one token", repo, tok)
			}
			mu.Lock()
			r.tokens[repo] = tok
			mu.Unlock()
			return nil
		})
	}
	return g.Wait()
}

// upload uploads one file version through the origin and returns its hash and bytes sent.
func (r *replayer) upload(ctx context.Context, client string, c trace.Content) (hash.Hash, int64, error) {
	cl, err := r.clientFor(client, r.c.origin, c.Repo)
	if err != nil {
		return hash.Hash{}, 0, err
	}
	res, err := cl.UploadFiles(ctx, []xetclient.UploadFile{{Path: c.File, Reader: c.Reader(), Size: c.Size}}, xetclient.UploadOptions{})
	if err != nil {
		return hash.Hash{}, 0, err
	}
	if res[0].Size != c.Size {
		return hash.Hash{}, 0, fmt.Errorf("%w: uploaded %d bytes of %s", errShort, res[0].Size, c)
	}
	return res[0].FileHash, res[0].BytesSent, nil
}

var (
	errMismatch = errors.New("downloaded bytes differ from the file's content")
	errShort    = errors.New("wrong number of bytes")
	errUpload   = errors.New("the file's upload failed")
)

// download downloads bytes [first, last] (nil: the whole file) through endpoint and checks them.
func (r *replayer) download(ctx context.Context, client, endpoint string, s *fileState, rng *[2]int64) (int64, int64, error) {
	cl, err := r.clientFor(client, endpoint, s.content.Repo)
	if err != nil {
		return 0, 0, err
	}
	off, want := int64(0), s.content.Size
	if rng != nil {
		off, want = rng[0], rng[1]-rng[0]+1
	}
	v := trace.NewVerifier(s.content, off)
	var st xetclient.DownloadStats
	n, err := cl.Download(ctx, s.hash, v, xetclient.DownloadOptions{Range: rng, Size: s.content.Size, Stats: &st})
	if err != nil {
		return n, st.TransferBytes, err
	}
	switch {
	case v.Mismatch >= 0:
		return n, st.TransferBytes, fmt.Errorf("%w: %s byte %d", errMismatch, s.content, v.Mismatch)
	case n != want || v.Offset() != off+want:
		return n, st.TransferBytes, fmt.Errorf("%w: %d bytes of %s from %d, want %d", errShort, n, s.content, off, want)
	}
	return n, st.TransferBytes, nil
}

// token asks the Hub-compatible token route.
func (r *replayer) token(ctx context.Context, rec trace.Record) error {
	u := r.c.origin + "/api/" + rec.Repo + "/xet-" + rec.Access + "-token/main"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if t := r.tokens[rec.Repo]; t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := r.httpFor(rec.Client).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &xetclient.StatusError{Method: "GET", URL: u, Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	var out struct {
		AccessToken string `json:"accessToken"`
		CasURL      string `json:"casUrl"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.AccessToken == "" {
		return fmt.Errorf("%w: token answer %q", errShort, b)
	}
	return nil
}

// prepare mints tokens, uploads the files downloaded before the trace uploads them, and with
// -warm downloads every file once through every edge.
func (r *replayer) prepare(ctx context.Context) error {
	if err := r.mintTokens(ctx); err != nil {
		return err
	}
	if r.c.newChunks {
		t0, cpu0 := time.Now(), selfCPU()
		nc, chunked, err := newChunkBytes(ctx, r.recs, r.files)
		if err != nil {
			return err
		}
		r.newChunks = nc
		if len(nc) > 0 {
			fmt.Fprintf(r.log, "replay: lower bound of %d uploads (new-chunk bytes): %s chunked in %s, %s CPU\n",
				len(nc), human(chunked), time.Since(t0).Round(time.Millisecond), (selfCPU() - cpu0).Round(time.Millisecond))
		}
	}
	var pre []*fileState
	var total int64
	for _, s := range r.files {
		if s.preload {
			pre = append(pre, s)
			total += s.content.Size
		}
	}
	slices.SortFunc(pre, func(a, b *fileState) int { return strings.Compare(a.content.String(), b.content.String()) })
	if len(pre) > 0 {
		fmt.Fprintf(r.log, "replay: preloading %d file versions (%s) through the origin\n", len(pre), human(total))
	}
	var done atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, s := range pre {
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(gctx, r.c.timeout)
			defer cancel()
			h, _, err := r.upload(cctx, "preload", s.content)
			if err != nil {
				return fmt.Errorf("preload %s: %w", s.content, err)
			}
			s.set(h, nil)
			if n := done.Add(1); r.c.progress > 0 && n%50 == 0 {
				fmt.Fprintf(r.log, "replay: preloaded %d/%d (%s)\n", n, len(pre), time.Since(start).Round(time.Second))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if !r.c.warm || len(r.c.edges) == 0 {
		return nil
	}
	fmt.Fprintf(r.log, "replay: warming %d edges with %d file versions\n", len(r.c.edges), len(pre))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, e := range r.c.edges {
		for _, s := range pre {
			g.Go(func() error {
				cctx, cancel := context.WithTimeout(gctx, r.c.timeout)
				defer cancel()
				if _, _, err := r.download(cctx, "warm", e, s, nil); err != nil {
					return fmt.Errorf("warm %s through %s: %w", s.content, e, err)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// outcome is what one request did.
type outcome struct {
	bytes    int64 // file bytes delivered (downloads) or uploaded (uploads)
	transfer int64 // transfer bytes received (downloads) or body bytes sent (uploads)
	changed  int64 // uploads: bytes in blocks that differ from the previous version
	// uploads: bytes of the file's chunks no file on the server has (newchunks.go)
	newChunks int64
	index     int  // the record's index in the trace
	waited    bool // a download waited for its file's upload to finish
	err       error
}

// do performs one record.
func (r *replayer) do(ctx context.Context, i int, rec trace.Record) outcome {
	ctx, cancel := context.WithTimeout(ctx, r.c.timeout)
	defer cancel()
	switch rec.Op {
	case trace.Token:
		return outcome{err: r.token(ctx, rec)}
	case trace.Upload:
		s := r.files[trace.FileKey{Repo: rec.Repo, File: rec.File, Version: rec.Version}]
		// A new version is uploaded once the previous one (when this replay has it) is in: a
		// publisher derives it from that one, and its dedup depends on it.
		var waited bool
		if prev := r.files[trace.FileKey{Repo: rec.Repo, File: rec.File, Version: rec.Version - 1}]; rec.Version > 0 && prev != nil {
			select {
			case <-prev.ready:
			default:
				waited = true
				select {
				case <-prev.ready:
				case <-ctx.Done():
					return outcome{waited: true, err: fmt.Errorf("waiting for the upload of %s: %w", prev.content, ctx.Err())}
				}
			}
		}
		h, sent, err := r.upload(ctx, rec.Client, s.content)
		if !s.preload {
			s.set(h, err)
		}
		_, changed := s.content.ChangedBlocks()
		if err != nil {
			return outcome{waited: waited, err: err}
		}
		return outcome{bytes: s.content.Size, transfer: sent, changed: changed, newChunks: r.newChunks[i], waited: waited}
	}
	s := r.files[trace.FileKey{Repo: rec.Repo, File: rec.File, Version: rec.Version}]
	var o outcome
	select {
	case <-s.ready:
	default:
		o.waited = true
		select {
		case <-s.ready:
		case <-ctx.Done():
			o.err = fmt.Errorf("waiting for the upload of %s: %w", s.content, ctx.Err())
			return o
		}
	}
	if s.err != nil {
		o.err = fmt.Errorf("%w: %s: %v", errUpload, s.content, s.err)
		return o
	}
	ep := r.endpoint(rec)
	if rec.Op == trace.Download {
		o.bytes, o.transfer, o.err = r.download(ctx, rec.Client, ep, s, nil)
		return o
	}
	for _, g := range rec.Ranges {
		n, t, err := r.download(ctx, rec.Client, ep, s, &g)
		o.bytes += n
		o.transfer += t
		if err != nil {
			o.err = err
			return o
		}
	}
	return o
}

// replay prepares, runs the trace on its schedule and collects the results.
func (r *replayer) replay(ctx context.Context) (*results, error) {
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	m0, err := r.scrape(ctx)
	if err != nil {
		return nil, err
	}
	cpu0 := r.cpu()
	r.stats = newStats()
	span := time.Duration(r.recs[len(r.recs)-1].T / r.c.speed * float64(time.Second))
	fmt.Fprintf(r.log, "replay: %d requests over %s (speed %gx, at most %d in flight)\n", len(r.recs), span.Round(time.Millisecond), r.c.speed, r.c.concurrency)
	sem := make(chan struct{}, r.c.concurrency)
	var wg sync.WaitGroup
	start := time.Now().Add(200 * time.Millisecond)
	r.stats.start = start
	stopProgress := r.showProgress(start, span)
	stopWatch := r.watchMetrics(ctx, start, m0)
	interrupted := false
	for i, rec := range r.recs {
		at := start.Add(time.Duration(rec.T / r.c.speed * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			interrupted = true
			r.stats.notIssued = len(r.recs) - i
			break
		}
		r.stats.lag(time.Since(at))
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				r.stats.add(rec, at, outcome{err: ctx.Err()})
				return
			}
			o := r.do(ctx, i, rec)
			o.index = i
			<-sem
			r.stats.add(rec, at, o)
		}()
	}
	wg.Wait()
	stopProgress()
	watched := stopWatch()
	r.stats.end = time.Now()
	res := r.stats.results(r.c)
	res.Interrupted = interrupted
	res.MetricsTimeline = watched
	// The metrics are read even after an interrupt: what was done is still worth reporting.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	m1, err := r.scrape(mctx)
	if err != nil {
		fmt.Fprintf(r.log, "replay: metrics after the run: %v\n", err)
	} else {
		res.Server = derive(m0, m1, res)
	}
	res.cpu(cpu0, r.cpu())
	return res, nil
}

// metricsPoint is the servers' cumulative ratios since the run started, at T seconds.
type metricsPoint struct {
	T             float64  `json:"t"`
	EdgeHitRatio  *float64 `json:"edge_hit_ratio,omitempty"`
	OriginOffload *float64 `json:"origin_offload,omitempty"`
}

// watchMetrics scrapes the servers every -metrics-every during the run; the returned function
// stops it and returns the points.
func (r *replayer) watchMetrics(ctx context.Context, start time.Time, m0 samples) func() []metricsPoint {
	if r.c.metricsEvery <= 0 || (r.c.originMetrics == "" && len(r.c.edgeMetrics) == 0) {
		return func() []metricsPoint { return nil }
	}
	done := make(chan struct{})
	var out []metricsPoint
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.c.metricsEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				m, err := r.scrape(ctx)
				if err != nil {
					continue
				}
				d := derive(m0, m, &results{})
				out = append(out, metricsPoint{T: time.Since(start).Seconds(), EdgeHitRatio: d.EdgeHitRatio, OriginOffload: d.OriginOffload})
			}
		}
	}()
	return func() []metricsPoint { close(done); wg.Wait(); return out }
}

// showProgress prints a line every -progress until the returned function is called.
func (r *replayer) showProgress(start time.Time, span time.Duration) func() {
	if r.c.progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.c.progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n, errs, inflight := r.stats.snapshot()
				fmt.Fprintf(r.log, "replay: %s of %s: %d/%d done, %d errors, %d in flight\n",
					time.Since(start).Round(time.Second), span.Round(time.Second), n, len(r.recs), errs, inflight)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// classify names the class of a request error.
func classify(err error) string {
	var se *xetclient.StatusError
	var ne net.Error
	switch {
	case errors.Is(err, errMismatch):
		return "corrupt_bytes"
	case errors.Is(err, xetclient.ErrCorrupt):
		return "corrupt_answer"
	case errors.Is(err, errShort), errors.Is(err, xetclient.ErrSizeMismatch):
		return "wrong_length"
	case errors.Is(err, errUpload):
		return "upload_failed"
	case errors.Is(err, xetclient.ErrNotFound):
		return "not_found"
	case errors.Is(err, xetclient.ErrRangeNotSatisfiable):
		return "range_not_satisfiable"
	case errors.As(err, &se):
		return fmt.Sprintf("http_%d", se.Status)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case xetclient.IsCertificateError(err):
		return "tls_certificate"
	case xetclient.IsUnreachable(err), errors.As(err, &ne):
		return "connection"
	}
	return "other"
}
