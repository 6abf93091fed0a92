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
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

type answer struct {
	Xorbs map[string][]struct {
		URL    string `json:"url"`
		Ranges []struct {
			Bytes struct{ Start, End uint64 } `json:"bytes"`
		} `json:"ranges"`
	} `json:"xorbs"`
}

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
	flag.Parse()
	if flag.NArg() != 1 || *base == "" || *file == "" {
		flag.Usage()
		os.Exit(2)
	}
	c := client(*proto, *conns)
	mk := func() *http.Client { return client(*proto, *conns) }
	var err error
	switch flag.Arg(0) {
	case "recon":
		err = recon(c, *base, *token, *file, *size, *n)
	case "transfer":
		err = transfer(mk, *base, *token, *file, *edgeBase, *static, *conns, max(*rounds, 1), *dur)
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

func transfer(mk func() *http.Client, base, token, file, edgeBase, static string, conns, rounds int, dur time.Duration) error {
	c := mk()
	b, err := get(c, base+"/v2/reconstructions/"+file, token, "")
	if err != nil {
		return err
	}
	var a answer
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
				jobs = append(jobs, job{edge: eu, static: strings.TrimSuffix(static, "/") + "/" + h,
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
		mbs, err := measure(mk(), jobs, func(j job) string { return j.edge }, conns, dur)
		if err != nil {
			return err
		}
		fmt.Printf("transfer conns=%d MB/s=%.1f\n", conns, mbs)
		return nil
	}
	fmt.Printf("static: %s\n", tlsInfo(c, jobs[0].static))
	var edgeMBs, staticMBs []float64
	for r := 0; r < rounds; r++ {
		order := []string{"edge", "static"}
		if r%2 == 1 {
			order = []string{"static", "edge"}
		}
		for _, who := range order {
			pick := func(j job) string { return j.edge }
			if who == "static" {
				pick = func(j job) string { return j.static }
			}
			mbs, err := measure(mk(), jobs, pick, conns, dur)
			if err != nil {
				return fmt.Errorf("%s: %w", who, err)
			}
			fmt.Printf("round %d %-6s MB/s=%.1f\n", r+1, who, mbs)
			if who == "edge" {
				edgeMBs = append(edgeMBs, mbs)
			} else {
				staticMBs = append(staticMBs, mbs)
			}
		}
	}
	me, ms := median(edgeMBs), median(staticMBs)
	fmt.Printf("median edge MB/s=%.1f static MB/s=%.1f ratio=%.2f (rounds=%d)\n", me, ms, me/ms, rounds)
	return nil
}

// measure GETs the jobs' ranges (URL chosen by pick) over conns workers for dur and returns MB/s
// of body bytes. Every body must have the range's length.
func measure(c *http.Client, jobs []job, pick func(job) string, conns int, dur time.Duration) (float64, error) {
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
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	c.CloseIdleConnections()
	return float64(n.Load()) / time.Since(start).Seconds() / 1e6, nil
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
