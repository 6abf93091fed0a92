// Command edgebench measures an edge (or an origin) from the client side:
//
//	edgebench -url https://edge:8443 -token T -file H recon    [-n 400] [-proto h1|h2|h3]
//	edgebench -url https://edge:8443 -token T -file H transfer [-conns 64] [-for 10s] [-proto …]
//	          [-edge-base http://edge:8081] [-static https://nginx:8444 -rounds 3]
//
// recon asks n reconstructions one at a time, half for the whole file and half for random
// ranges, and prints p50/p99/max latency. transfer takes the whole file's v2 answer and GETs its
// fetch ranges over conns parallel workers (one connection each over HTTP/1.1) for the given
// time, printing MB/s of xorb bytes; -edge-base sends the transfers to another listener of the
// edge (e.g. its plain-HTTP one) with the same signed paths.
//
// With -static, a static server that serves each xorb object at STATIC/<xorb hash> (nginx in
// perf/nginx) gets the same ranges: every range is first fetched from both and compared byte
// for byte, then -rounds rounds each measure the edge and the static server for the same
// duration with the same connections, alternating which goes first, and the medians and their
// ratio are printed. TLS certificates are not verified (self-signed edges).
//
// -server-pid (the edge) and -static-pids (e.g. nginx's workers, comma-separated) add the
// servers' user+system CPU per GB of body bytes served in each measurement (from /proc; on a
// shared machine the steadier number than MB/s).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/xetcdn/xetcdn/perf/fixture"
	"github.com/xetcdn/xetcdn/shared/wire"
)

func main() {
	base := flag.String("url", "", "edge (or origin) base URL")
	token := flag.String("token", "", "read token")
	file := flag.String("file", "", "file hash")
	size := flag.Int64("size", 0, "file size (for random ranges; 0: ask HEAD /v1/files)")
	n := flag.Int("n", 400, "recon: requests")
	conns := flag.Int("conns", 64, "transfer: parallel connections")
	dur := flag.Duration("for", 10*time.Second, "transfer: duration")
	proto := flag.String("proto", "h1", "h1, h2 or h3")
	edgeBase := flag.String("edge-base", "", "transfer: send transfers to this base URL (same signed path)")
	static := flag.String("static", "", "transfer: also measure a static server serving xorbs at STATIC/<hash>")
	rounds := flag.Int("rounds", 3, "transfer with -static: alternating rounds")
	serverPID := flag.Int("server-pid", 0, "transfer: report this process's (the edge's) CPU seconds per GB served")
	staticPIDs := flag.String("static-pids", "", "transfer: comma-separated processes of the static server, for its CPU per GB")
	flag.Parse()
	if flag.NArg() != 1 || *base == "" || *file == "" {
		flag.Usage()
		os.Exit(2)
	}
	edgeCPU, err := newCPUMeter(fmt.Sprint(*serverPID))
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgebench:", err)
		os.Exit(2)
	}
	staticCPU, err := newCPUMeter(*staticPIDs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgebench:", err)
		os.Exit(2)
	}
	c := client(*proto, *conns)
	mk := func() *http.Client { return client(*proto, *conns) }
	switch flag.Arg(0) {
	case "recon":
		err = recon(c, *base, *token, *file, *size, *n)
	case "transfer":
		err = transfer(mk, *base, *token, *file, *edgeBase, *static, *conns, max(*rounds, 1), *dur, edgeCPU, staticCPU)
	default:
		err = fmt.Errorf("unknown mode %q", flag.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgebench:", err)
		os.Exit(1)
	}
}

func client(proto string, conns int) *http.Client {
	tc := &tls.Config{InsecureSkipVerify: true}
	switch proto {
	case "h3":
		return &http.Client{Transport: &http3.Transport{TLSClientConfig: tc}}
	case "h2":
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, DisableCompression: true}}
	}
	tc.NextProtos = []string{"http/1.1"}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: conns, DisableCompression: true,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
}

func get(c *http.Client, url, token, rng string) ([]byte, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("GET %s: %d %.200s", url, resp.StatusCode, b)
	}
	return b, err
}

func recon(c *http.Client, base, token, file string, size int64, n int) error {
	if size == 0 {
		req, _ := http.NewRequest(http.MethodHead, base+"/v1/files/"+file, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if size = resp.ContentLength; resp.StatusCode != 200 || size <= 0 {
			return fmt.Errorf("HEAD file: %d, size %d", resp.StatusCode, size)
		}
	}
	u := base + "/v2/reconstructions/" + file
	if _, err := get(c, u, token, ""); err != nil { // warm the caches
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		h := ""
		if i%2 == 1 {
			a := rng.Int64N(size)
			h = fmt.Sprintf("bytes=%d-%d", a, a+rng.Int64N(size-a))
		}
		start := time.Now()
		if _, err := get(c, u, token, h); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("recon n=%d p50=%v p99=%v max=%v\n", n, q(0.50), q(0.99), lat[len(lat)-1])
	return nil
}

// job is one fetch range of the answer: the edge's signed URL, the static server's URL of the
// same xorb, and the Range header.
type job struct {
	edge, static, rng string
	n                 int64
}

func transfer(mk func() *http.Client, base, token, file, edgeBase, static string, conns, rounds int, dur time.Duration, edgeCPU, staticCPU cpuMeter) error {
	c := mk()
	b, err := get(c, base+"/v2/reconstructions/"+file, token, "")
	if err != nil {
		return err
	}
	var a wire.QueryReconstructionResponseV2
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	var jobs []job
	for h, es := range a.Xorbs {
		for _, e := range es {
			u, err := url.Parse(e.URL)
			if err != nil {
				return err
			}
			eu := e.URL
			if edgeBase != "" {
				eu = strings.TrimSuffix(edgeBase, "/") + u.RequestURI()
			}
			for _, r := range e.Ranges {
				jobs = append(jobs, job{edge: eu, static: strings.TrimSuffix(static, "/") + "/" + h.String(),
					rng: fmt.Sprintf("bytes=%d-%d", r.Bytes.Start, r.Bytes.End), n: int64(r.Bytes.End-r.Bytes.Start) + 1})
			}
		}
	}
	if len(jobs) == 0 {
		return errors.New("no fetch ranges")
	}
	slices.SortFunc(jobs, func(x, y job) int { return strings.Compare(x.edge+x.rng, y.edge+y.rng) })
	var total int64
	for _, j := range jobs { // warm the data cache, and check that both servers send the same bytes
		eb, err := get(c, j.edge, "", j.rng)
		if err != nil {
			return err
		}
		if int64(len(eb)) != j.n {
			return fmt.Errorf("edge sent %d bytes for %s, want %d", len(eb), j.rng, j.n)
		}
		if static != "" {
			sb, err := get(c, j.static, "", j.rng)
			if err != nil {
				return err
			}
			if !bytes.Equal(eb, sb) {
				return fmt.Errorf("%s %s: the static server's %d bytes differ from the edge's", j.static, j.rng, len(sb))
			}
		}
		total += j.n
	}
	fmt.Printf("transfer: %d ranges, %d bytes, conns=%d, for=%v, %s\n", len(jobs), total, conns, dur, tlsInfo(c, jobs[0].edge))
	if static == "" {
		res, err := measure(mk(), jobs, func(j job) string { return j.edge }, conns, dur, edgeCPU)
		if err != nil {
			return err
		}
		fmt.Printf("transfer conns=%d MB/s=%.1f%s\n", conns, res.mbs, res.cpuText())
		return nil
	}
	fmt.Printf("static: %s\n", tlsInfo(c, jobs[0].static))
	var edgeMBs, staticMBs, edgeCPUs, staticCPUs []float64
	for r := 0; r < rounds; r++ {
		order := []string{"edge", "static"}
		if r%2 == 1 {
			order = []string{"static", "edge"}
		}
		for _, who := range order {
			pick, meter := func(j job) string { return j.edge }, edgeCPU
			if who == "static" {
				pick, meter = func(j job) string { return j.static }, staticCPU
			}
			res, err := measure(mk(), jobs, pick, conns, dur, meter)
			if err != nil {
				return fmt.Errorf("%s: %w", who, err)
			}
			fmt.Printf("round %d %-6s MB/s=%.1f%s\n", r+1, who, res.mbs, res.cpuText())
			if who == "edge" {
				edgeMBs, edgeCPUs = append(edgeMBs, res.mbs), append(edgeCPUs, res.cpuPerGB)
			} else {
				staticMBs, staticCPUs = append(staticMBs, res.mbs), append(staticCPUs, res.cpuPerGB)
			}
		}
	}
	me, ms := median(edgeMBs), median(staticMBs)
	fmt.Printf("median edge MB/s=%.1f static MB/s=%.1f ratio=%.2f (rounds=%d)", me, ms, me/ms, rounds)
	if len(edgeCPU) > 0 {
		fmt.Printf(" edge cpu-s/GB=%.2f", median(edgeCPUs))
	}
	if len(staticCPU) > 0 {
		fmt.Printf(" static cpu-s/GB=%.2f", median(staticCPUs))
	}
	fmt.Println()
	return nil
}

// cpuMeter sums the user+system CPU time of a set of processes (none: not measured).
type cpuMeter []int

// newCPUMeter parses a comma-separated list of process IDs; "" and "0" measure nothing.
func newCPUMeter(list string) (cpuMeter, error) {
	var m cpuMeter
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" || f == "0" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("bad process ID %q", f)
		}
		m = append(m, pid)
	}
	if _, err := m.sample(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m cpuMeter) sample() (time.Duration, error) {
	var t time.Duration
	for _, pid := range m {
		d, err := fixture.ProcCPU(pid)
		if err != nil {
			return 0, err
		}
		t += d
	}
	return t, nil
}

// result is one measurement: MB/s of body bytes and the measured processes' CPU seconds per
// GB of them (NaN when no process is measured).
type result struct{ mbs, cpuPerGB float64 }

func (r result) cpuText() string {
	if math.IsNaN(r.cpuPerGB) {
		return ""
	}
	return fmt.Sprintf(" cpu-s/GB=%.2f", r.cpuPerGB)
}

// measure GETs the jobs' ranges (URL chosen by pick) over conns workers for dur and returns MB/s
// of body bytes and meter's CPU per GB of them. Every body must have the range's length.
func measure(c *http.Client, jobs []job, pick func(job) string, conns int, dur time.Duration, meter cpuMeter) (result, error) {
	cpu0, err := meter.sample()
	if err != nil {
		return result{}, err
	}
	var n atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline) && failed.Load() == nil; i++ {
				j := jobs[i%len(jobs)]
				got, err := discard(c, pick(j), j.rng)
				if err == nil && got != j.n {
					err = fmt.Errorf("GET %s %s: %d bytes, want %d", pick(j), j.rng, got, j.n)
				}
				if err != nil {
					failed.Store(err)
					return
				}
				n.Add(got)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := meter.sample()
	if err != nil {
		return result{}, err
	}
	if err, _ := failed.Load().(error); err != nil {
		return result{}, err
	}
	c.CloseIdleConnections()
	res := result{mbs: float64(n.Load()) / elapsed.Seconds() / 1e6, cpuPerGB: math.NaN()}
	if len(meter) > 0 && n.Load() > 0 {
		res.cpuPerGB = (cpu1 - cpu0).Seconds() / (float64(n.Load()) / 1e9)
	}
	return res, nil
}

// discard GETs a range and counts the body without keeping it.
func discard(c *http.Client, u, rng string) (int64, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Range", rng)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return 0, fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return io.Copy(io.Discard, resp.Body)
}

// tlsInfo describes the protocol and TLS parameters a server negotiates with c.
func tlsInfo(c *http.Client, u string) string {
	req, _ := http.NewRequest(http.MethodHead, u, nil)
	resp, err := c.Do(req)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	resp.Body.Close()
	if resp.TLS == nil {
		return resp.Proto + " plain"
	}
	return fmt.Sprintf("%s %s %s", resp.Proto, tls.VersionName(resp.TLS.Version), tls.CipherSuiteName(resp.TLS.CipherSuite))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
