// Command reconbench measures reconstruction latency at an origin (or edge) over HTTP.
//
// It uploads (once; re-uploads are cheap no-ops) a file of -terms terms over -xorbs xorbs of
// -chunks chunks each, then times -full whole-file and -ranged random-range
// GET /v2/reconstructions requests, one at a time, each to the last byte of the answer, and
// prints p50/p90/p99/max.
//
// Shapes: "worst" puts consecutive terms in different xorbs (term i in xorb i mod X), so no two
// fetch ranges merge; "merged" puts each xorb's terms next to each other, so each xorb's ranges
// merge into one. Chunks are tiny: answer size depends on the term structure, not the data.
//
//	reconbench -url http://127.0.0.1:8080 -write-token $W -read-token $R [-shape worst|merged]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "base URL of the origin")
	wtok := flag.String("write-token", "", "write token (upload)")
	rtok := flag.String("read-token", "", "read token (reconstruction)")
	nx := flag.Int("xorbs", 1000, "xorbs")
	nc := flag.Int("chunks", 1024, "chunks per xorb")
	nt := flag.Int("terms", 100000, "terms of the file")
	shape := flag.String("shape", "worst", "worst | merged")
	full := flag.Int("full", 200, "whole-file requests")
	ranged := flag.Int("ranged", 200, "random-range requests")
	version := flag.String("api", "v2", "v1 | v2")
	flag.Parse()
	if err := run(*url, *wtok, *rtok, *nx, *nc, *nt, *shape, *full, *ranged, *version); err != nil {
		fmt.Fprintln(os.Stderr, "reconbench:", err)
		os.Exit(1)
	}
}

func run(base, wtok, rtok string, nx, nc, nt int, shape string, full, ranged int, version string) error {
	if nt%nx != 0 || (nt/nx) > nc {
		return fmt.Errorf("terms (%d) must be a multiple of xorbs (%d), at most chunks (%d) per xorb", nt, nx, nc)
	}
	perXorb := nt / nx
	span := uint32(nc / perXorb) // chunks per term
	c := &http.Client{}
	start := time.Now()
	layouts := make([]*xorb.Layout, nx)
	sh := &shard.Shard{}
	for x := 0; x < nx; x++ {
		b := xorb.NewBuilder(xorb.None)
		for i := 0; i < nc; i++ {
			raw := fmt.Appendf(nil, "%s xorb %d chunk %d", shape, x, i)
			b.Add(raw, hash.Chunk(raw))
		}
		body, l := b.Finish()
		layouts[x] = l
		if err := post(c, base+"/v1/xorbs/default/"+l.Hash.String(), wtok, body); err != nil {
			return err
		}
		blk := shard.Xorb{Hash: l.Hash, RawBytes: l.RawLen()}
		var s uint32
		for i, ch := range l.ChunkHashes {
			blk.Chunks = append(blk.Chunks, shard.XorbChunk{Hash: ch, RawStart: s, RawLen: l.RawEnds[i] - s})
			s = l.RawEnds[i]
		}
		sh.Xorbs = append(sh.Xorbs, blk)
	}
	f := shard.File{}
	var leaves []hash.Leaf
	var size uint64
	for i := 0; i < nt; i++ {
		var x, k int
		if shape == "merged" {
			x, k = i/perXorb, i%perXorb
		} else {
			x, k = i%nx, i/nx
		}
		l := layouts[x]
		a, b := uint32(k)*span, uint32(k+1)*span
		f.Terms = append(f.Terms, shard.Term{Xorb: l.Hash, RawBytes: l.RawRange(a, b), Start: a, End: b})
		f.Verification = append(f.Verification, hash.Verification(l.ChunkHashes[a:b]))
		for ch := a; ch < b; ch++ {
			leaves = append(leaves, hash.Leaf{Hash: l.ChunkHashes[ch], Size: uint64(l.RawRange(ch, ch+1))})
		}
		size += uint64(l.RawRange(a, b))
	}
	f.Hash = hash.File(leaves)
	sh.Files = []shard.File{f}
	if err := post(c, base+"/v1/shards", wtok, sh.AppendUpload(nil)); err != nil {
		return err
	}
	fmt.Printf("setup: %d xorbs x %d chunks, file of %d terms (%s), %d bytes, in %v\n", nx, nc, nt, shape, size,
		time.Since(start).Round(time.Millisecond))

	path := base + "/" + version + "/reconstructions/" + f.Hash.String()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range []string{"full", "ranged"} {
		n := full
		if kind == "ranged" {
			n = ranged
		}
		var lat []time.Duration
		var bytesOut int64
		for i := 0; i < n; i++ {
			hdr := ""
			if kind == "ranged" {
				s := rng.Uint64N(size)
				e := s + rng.Uint64N(size-s)
				hdr = fmt.Sprintf("bytes=%d-%d", s, e)
			}
			d, nb, err := get(c, path, rtok, hdr)
			if err != nil {
				return err
			}
			lat = append(lat, d)
			bytesOut += nb
		}
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		fmt.Printf("%s %s: n=%d p50=%v p90=%v p99=%v max=%v avg_answer=%d B\n", version, kind, n,
			q(0.5).Round(10*time.Microsecond), q(0.9).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond),
			lat[len(lat)-1].Round(10*time.Microsecond), bytesOut/int64(max(n, 1)))
	}
	return nil
}

func post(c *http.Client, url, tok string, body []byte) error {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return nil
}

// get times one request to the last byte of its body.
func get(c *http.Client, url, tok, rng string) (time.Duration, int64, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	t := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(t)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != 200 {
		return 0, 0, fmt.Errorf("GET %s (%s): %d", url, rng, resp.StatusCode)
	}
	return d, n, nil
}
