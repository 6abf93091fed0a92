package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	originbackend "github.com/xetcdn/xetcdn/origin/internal/backend"
	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/keys"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// backend is one (index, object store) pair the API tests run on.
type backend struct {
	name string
	open func(t testing.TB) (index.Index, objstore.ObjectStore)
}

// sqliteLocal is the embedded backend: SQLite and a local directory.
func sqliteLocal() backend {
	return backend{name: "sqlite+local", open: func(t testing.TB) (index.Index, objstore.ObjectStore) {
		dir := t.TempDir()
		db, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(dir, "index.db")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db, openLocalStore(t, filepath.Join(dir, "objects"))
	}}
}

// env is a running origin on a test server.
type env struct {
	t     testing.TB
	cfg   *config.Config
	srv   *Server
	ts    *httptest.Server
	idx   index.Index
	objs  objstore.ObjectStore
	keys  *keys.Keys
	clock *clock
	reg   *prometheus.Registry
}

type envOption func(*config.Config)

func newEnv(t testing.TB, b backend, opts ...envOption) *env {
	t.Helper()
	idx, objs := b.open(t)
	return newEnvWith(t, idx, objs, opts...)
}

func newEnvWith(t testing.TB, idx index.Index, objs objstore.ObjectStore, opts ...envOption) *env {
	t.Helper()
	return newEnvOptions(t, idx, objs, nil, opts...)
}

// newEnvOptions is newEnvWith with a last say on the server's Options (may be nil).
func newEnvOptions(t testing.TB, idx index.Index, objs objstore.ObjectStore, edit func(*Options), opts ...envOption) *env {
	t.Helper()
	dir := t.TempDir()
	k, err := keys.Load(filepath.Join(dir, "keys"), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.Limits.ShardHeartbeat = config.Duration(time.Hour)
	ts := httptest.NewUnstartedServer(nil)
	cfg.Listen = ts.Listener.Addr().String()
	for _, o := range opts {
		o(&cfg)
	}
	cfg.PublicURL = "http://" + cfg.Listen
	if cfg.EdgeURL == "" {
		cfg.EdgeURL = cfg.PublicURL
	}
	clk := &clock{t: time.Now().Truncate(time.Second)}
	reg := prometheus.NewRegistry()
	o := Options{Config: &cfg, Index: idx, Objects: objs, Keys: k, Registerer: reg, Now: clk.Now}
	if edit != nil {
		edit(&o)
	}
	o.Index, o.Objects = productionLayers(t, o)
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(ts.Close)
	return &env{t: t, cfg: &cfg, srv: srv, ts: ts, idx: idx, objs: objs, keys: k, clock: clk, reg: reg}
}

// productionLayers wraps the index and object store of o in the decorators backend.Open puts
// around them in production (metrics on o.Registerer, timeouts of o.DependencyTimeout: 0 =
// DefaultDependencyTimeout, < 0 = none), since the server wraps nothing itself. The caches are
// left to each test (cachedStack).
func productionLayers(t testing.TB, o Options) (Index, Objects) {
	t.Helper()
	d := o.DependencyTimeout
	if d == 0 {
		d = DefaultDependencyTimeout
	}
	ix, ok := o.Index.(index.Index)
	if !ok {
		t.Fatalf("%T is not an index.Index", o.Index)
	}
	objs, ok := o.Objects.(objstore.ObjectStore)
	if !ok {
		t.Fatalf("%T is not an objstore.ObjectStore", o.Objects)
	}
	// backend.LayersOf sets LocalBodies from the configured driver; here the store is at hand.
	_, local := objs.(*objstore.Local)
	l := originbackend.Layers{Timeout: d, Registerer: o.Registerer, LocalBodies: local}
	wix, err := originbackend.WrapIndex(ix, l)
	if err != nil {
		t.Fatal(err)
	}
	wobjs, err := originbackend.WrapObjects(objs, l)
	if err != nil {
		t.Fatal(err)
	}
	return wix, wobjs
}

func (e *env) token(scope string, a auth.Access) string {
	e.t.Helper()
	tok, _, err := e.keys.Signing.Mint(scope, a, e.clock.Now(), time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// do sends a request; hdr holds extra headers as name, value pairs.
func (e *env) do(method, path, token string, body []byte, hdr ...string) *http.Response {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// read returns the body of resp and closes it.
func read(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expect checks the status of resp (and, for errors, the JSON error body) and returns the body.
func expect(t testing.TB, resp *http.Response, status int) []byte {
	t.Helper()
	b := read(t, resp)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, b)
	}
	if status >= 400 && resp.Request.Method != http.MethodHead {
		var eb struct{ Error, Code string }
		if err := json.Unmarshal(b, &eb); err != nil || eb.Error == "" || eb.Code == "" {
			t.Fatalf("error answer without a JSON error body: %q", b)
		}
	}
	return b
}

// fixture is a file uploaded as xorbs plus one shard.
type fixture struct {
	data    []byte
	file    hash.Hash
	xorbs   [][]byte // upload bodies
	layouts []*xorb.Layout
	shard   *shard.Shard
	body    []byte // shard upload body
}

// chunkSizes splits n bytes into pseudo-random chunk sizes of 1..maxChunk.
func randomData(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		// Compressible but not trivial: small alphabet with runs.
		b[i] = byte('a' + rng.IntN(6))
	}
	return b
}

// makeFixture builds a file of nChunks chunks of chunkSize bytes spread over nXorbs xorbs, with
// terms covering each xorb's chunks in turn.
func makeFixture(t testing.TB, seed uint64, nXorbs, chunksPerXorb, chunkSize int) *fixture {
	t.Helper()
	f := &fixture{data: randomData(seed, nXorbs*chunksPerXorb*chunkSize)}
	sf := shard.File{}
	var leaves []hash.Leaf
	for x := 0; x < nXorbs; x++ {
		b := xorb.NewBuilder(xorb.LZ4)
		for c := 0; c < chunksPerXorb; c++ {
			off := (x*chunksPerXorb + c) * chunkSize
			raw := f.data[off : off+chunkSize]
			h := hash.Chunk(raw)
			if !b.Add(raw, h) {
				t.Fatal("builder refused a chunk")
			}
			leaves = append(leaves, hash.Leaf{Hash: h, Size: uint64(chunkSize)})
		}
		body, l := b.Finish()
		f.xorbs = append(f.xorbs, body)
		f.layouts = append(f.layouts, l)
		n := uint32(l.NumChunks())
		sf.Terms = append(sf.Terms, shard.Term{Xorb: l.Hash, RawBytes: l.RawRange(0, n), Start: 0, End: n})
		sf.Verification = append(sf.Verification, hash.Verification(l.ChunkHashes))
	}
	f.file = hash.File(leaves)
	sf.Hash = f.file
	f.shard = &shard.Shard{Files: []shard.File{sf}}
	for _, l := range f.layouts {
		f.shard.Xorbs = append(f.shard.Xorbs, xorbBlock(l))
	}
	f.body = f.shard.AppendUpload(nil)
	return f
}

func xorbBlock(l *xorb.Layout) shard.Xorb {
	x := shard.Xorb{Hash: l.Hash, RawBytes: l.RawLen()}
	var start uint32
	for i, h := range l.ChunkHashes {
		x.Chunks = append(x.Chunks, shard.XorbChunk{Hash: h, RawStart: start, RawLen: l.RawEnds[i] - start})
		start = l.RawEnds[i]
	}
	return x
}

// upload puts the fixture's xorbs and shard (v1) with a write token for scope.
func (e *env) upload(f *fixture, scope string) {
	e.t.Helper()
	tok := e.token(scope, auth.Write)
	for i, body := range f.xorbs {
		expect(e.t, e.do("POST", "/v1/xorbs/default/"+f.layouts[i].Hash.String(), tok, body), 200)
	}
	expect(e.t, e.do("POST", "/v1/shards", tok, f.body), 200)
}

// rawRequest writes a request head (with Content-Length declared) and the partial body on a
// raw connection, leaves the connection open for writing, and returns the status line and
// body the server answers with.
func (e *env) rawRequest(method, path, token string, declared int64, partial []byte) (string, string) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", method, path, token, declared)
	c.Write(partial)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.Status, string(b)
}

func withPace(floor int64, window time.Duration) envOption {
	return func(c *config.Config) {
		c.Limits.PaceFloor = floor
		c.Limits.PaceWindow = config.Duration(window)
	}
}
