// Command edgebench measures an edge (or an origin) from the client side:
//
//	edgebench -url https://edge:8443 -token T -file H recon    [-n 400] [-proto h1|h2|h3]
//	edgebench -url https://edge:8443 -token T -file H transfer [-conns 64] [-for 10s] [-proto …]
//
// recon asks n reconstructions one at a time, half for the whole file and half for random
// ranges, and prints p50/p99/max latency. transfer takes the whole file's v2 answer and GETs its
// fetch ranges over conns parallel workers for the given time, printing MB/s of xorb bytes.
// TLS certificates are not verified (self-signed edges).
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
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
	flag.Parse()
	if flag.NArg() != 1 || *base == "" || *file == "" {
		flag.Usage()
		os.Exit(2)
	}
	c := client(*proto, *conns)
	var err error
	switch flag.Arg(0) {
	case "recon":
		err = recon(c, *base, *token, *file, *size, *n)
	case "transfer":
		err = transfer(c, *base, *token, *file, *conns, *dur)
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
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	}
	tc.NextProtos = []string{"http/1.1"}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: conns,
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

func transfer(c *http.Client, base, token, file string, conns int, dur time.Duration) error {
	b, err := get(c, base+"/v2/reconstructions/"+file, token, "")
	if err != nil {
		return err
	}
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	type job struct{ url, rng string }
	var jobs []job
	for _, es := range a.Xorbs {
		for _, e := range es {
			for _, r := range e.Ranges {
				jobs = append(jobs, job{e.URL, fmt.Sprintf("bytes=%d-%d", r.Bytes.Start, r.Bytes.End)})
			}
		}
	}
	if len(jobs) == 0 {
		return errors.New("no fetch ranges")
	}
	for _, j := range jobs { // warm the data cache
		if _, err := get(c, j.url, "", j.rng); err != nil {
			return err
		}
	}
	var bytes atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline); i++ {
				j := jobs[i%len(jobs)]
				b, err := get(c, j.url, "", j.rng)
				if err != nil {
					failed.Store(err)
					return
				}
				bytes.Add(int64(len(b)))
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("transfer conns=%d bytes=%d seconds=%.1f MB/s=%.1f\n", conns, bytes.Load(), secs, float64(bytes.Load())/secs/1e6)
	return nil
}
