package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go/http3"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// binaries builds the xet-origin binary once for all the tests of the run.
var binaries *testenv.Binaries

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		b, err := testenv.NewBinaries()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer b.Close()
		binaries = b
		return m.Run()
	}()
	os.Exit(code)
}

// originBin returns the xet-origin binary; with -short the test is skipped.
func originBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the origin binary (not with -short)")
	}
	return binaries.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
}

// origin is a running xet-origin process.
type origin struct {
	bin, dir, addr, url string
	proc                *testenv.Process
}

// startOrigin runs the origin on dir, with extra flags, and returns once it logged that it
// serves. It is stopped when the test ends.
func startOrigin(t *testing.T, dir string, extra ...string) *origin {
	t.Helper()
	o := &origin{bin: originBin(t), dir: dir, addr: testenv.FreeAddr(t)}
	o.url = "http://" + o.addr
	o.proc = testenv.Start(t, o.bin, append([]string{"--data-dir", dir, "--listen", o.addr}, extra...),
		testenv.Options{Ready: `"msg":"xet-origin serving"`})
	return o
}

// stop kills the origin (no drain: it is gone at once).
func (o *origin) stop() { o.proc.Kill() }

func (o *origin) token(t *testing.T, scope, access string) string {
	t.Helper()
	return testenv.Run(t, o.bin, "token", "--data-dir", o.dir, "--scope", scope, "--access", access)
}

// fixture is a file uploaded to the origin: its bytes and the layouts of its xorbs.
type fixture struct {
	hash    hash.Hash
	data    []byte
	layouts []*xorb.Layout
	bodies  [][]byte // the xorbs' upload bodies (serialized chunks), in layouts' order
}

// chunkBytes returns the serialized chunk bytes of all the fixture's xorbs.
func (f *fixture) chunkBytes() int64 {
	var n int64
	for _, l := range f.layouts {
		n += int64(l.ChunkAreaLen())
	}
	return n
}

// upload builds nx xorbs of nc random chunks (4-12 KiB, LZ4), one file over all of them, and
// registers it under the write token's scope.
func upload(t *testing.T, o *origin, writeTok string, seed uint64, nx, nc int) *fixture {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f := &fixture{}
	var leaves []hash.Leaf
	sf := shard.File{}
	sh := &shard.Shard{}
	for x := 0; x < nx; x++ {
		b := xorb.NewBuilder(xorb.LZ4)
		for c := 0; c < nc; c++ {
			raw := make([]byte, 4096+rng.IntN(8192))
			for i := range raw {
				raw[i] = byte('a' + rng.IntN(16)) // compressible enough to exercise LZ4
			}
			h := hash.Chunk(raw)
			b.Add(raw, h)
			f.data = append(f.data, raw...)
			leaves = append(leaves, hash.Leaf{Hash: h, Size: uint64(len(raw))})
		}
		body, l := b.Finish()
		f.layouts = append(f.layouts, l)
		f.bodies = append(f.bodies, body)
		if st, ans := call(t, "POST", o.url+"/v1/xorbs/default/"+l.Hash.String(), writeTok, body); st != 200 {
			t.Fatalf("xorb upload: %d %s", st, ans)
		}
		n := uint32(l.NumChunks())
		sf.Terms = append(sf.Terms, shard.Term{Xorb: l.Hash, RawBytes: l.RawLen(), Start: 0, End: n})
		sf.Verification = append(sf.Verification, hash.Verification(l.ChunkHashes))
		blk := shard.Xorb{Hash: l.Hash, RawBytes: l.RawLen()}
		var s uint32
		for i, ch := range l.ChunkHashes {
			blk.Chunks = append(blk.Chunks, shard.XorbChunk{Hash: ch, RawStart: s, RawLen: l.RawEnds[i] - s})
			s = l.RawEnds[i]
		}
		sh.Xorbs = append(sh.Xorbs, blk)
	}
	sf.Hash = hash.File(leaves)
	f.hash = sf.Hash
	sh.Files = []shard.File{sf}
	if st, ans := call(t, "POST", o.url+"/v1/shards", writeTok, sh.AppendUpload(nil)); st != 200 {
		t.Fatalf("shard upload: %d %s", st, ans)
	}
	return f
}

// call does one request with the default client (plain HTTP or TLS without verification).
func call(t *testing.T, method, url, tok string, body []byte, hdr ...string) (int, []byte) {
	t.Helper()
	st, b, _ := callH(t, insecureClient(), method, url, tok, body, hdr...)
	return st, b
}

func callH(t *testing.T, c *http.Client, method, url, tok string, body []byte, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, b, resp.Header
}

func insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

func h2Client() *http.Client {
	return &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}}}
}

func h3Client(t *testing.T) *http.Client {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr}
}

// runningEdge is an edge started in-process.
type runningEdge struct {
	*Edge
	reg     *prometheus.Registry
	dir     string
	tlsURL  string
	httpURL string
	cancel  context.CancelFunc
}

// startEdge starts an edge in front of o with extra flags; it is stopped at cleanup.
func startEdge(t *testing.T, o *origin, dir string, extra ...string) *runningEdge {
	t.Helper()
	args := append([]string{"--origin", o.url, "--origin-token", o.token(t, "edge", "edge"),
		"--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	e, err := Start(ctx, args, func(string) string { return "" }, log, reg)
	if err != nil {
		cancel()
		t.Fatalf("start edge: %v", err)
	}
	re := &runningEdge{Edge: e, reg: reg, dir: dir, tlsURL: "https://" + e.TLSAddr(),
		httpURL: "http://" + e.HTTPAddr(), cancel: cancel}
	t.Cleanup(func() {
		cancel()
		done := make(chan error, 1)
		go func() { done <- e.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("edge stopped with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("edge did not drain within 30 s")
		}
	})
	return re
}

// metric sums the samples of a counter or gauge whose labels include want.
func (e *runningEdge) metric(t *testing.T, name string, want ...string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	sample:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(want); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
						ok = true
					}
				}
				if !ok {
					continue sample
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}
