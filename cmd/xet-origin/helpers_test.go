package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// buildBinary compiles xet-origin for the test.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	return testenv.Build(t, ".")
}

// proc is one configuration of the xet-origin binary: its data directory and listen address,
// plus the flags and environment that select its backends.
type proc struct {
	bin, dir, addr string
	args, env      []string
}

func newOrigin(t *testing.T, bin string) *proc {
	return &proc{bin: bin, dir: t.TempDir(), addr: testenv.FreeAddr(t)}
}

func (o *proc) base() string { return "http://" + o.addr }

// start runs the origin and returns once it logged that it serves (its listener is bound).
// The process is stopped when the test ends; a failed test shows its log lines above INFO.
func (o *proc) start(t *testing.T) *testenv.Process {
	t.Helper()
	return testenv.Start(t, o.bin, append([]string{"--data-dir", o.dir, "--listen", o.addr}, o.args...),
		testenv.Options{Env: o.env, Ready: `"msg":"xet-origin serving"`,
			ShowOnFailure: func(l string) bool { return !strings.Contains(l, `"level":"INFO"`) }})
}

// token mints a token with the origin's signing key.
func (o *proc) token(t *testing.T, scope, access string) string {
	t.Helper()
	tok := testenv.Run(t, o.bin, "token", "--data-dir", o.dir, "--scope", scope, "--access", access)
	if strings.Count(tok, ".") != 2 || strings.ContainsAny(tok, " \n") {
		t.Fatalf("token output %q is not just a JWT", tok)
	}
	return tok
}

// client returns a xetclient for downloads that does not retry (a failure is the answer).
func (o *proc) client(t *testing.T, tok string) *xetclient.Client {
	t.Helper()
	c, err := xetclient.New(xetclient.Options{Endpoint: o.base(), Token: tok,
		Retry: xetclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// requestTimeout bounds every request of these tests: no answer may take longer.
const requestTimeout = 20 * time.Second

// answer is an HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

// do sends one request; err is a transport error (no answer, or the body was cut off).
func do(method, url, tok string, body []byte, hdr ...string) (answer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{took: time.Since(start)}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b, took: time.Since(start)}, err
}

// call is do for requests that must get an answer.
func call(t *testing.T, method, url, tok string, body []byte, hdr ...string) (int, []byte) {
	t.Helper()
	a, err := do(method, url, tok, body, hdr...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a.status, a.body
}

// shardAccepted reports whether a /v2/shards answer ends with a result frame; a /v1/shards
// answer is accepted by its 200 alone.
func shardAccepted(path string, a answer) bool {
	if a.status != http.StatusOK {
		return false
	}
	if path == "/v1/shards" {
		return true
	}
	return lastFrame(a.body).Type == "result"
}

// frame is the part of a /v2/shards NDJSON frame the tests look at.
type frame struct {
	Type      string `json:"type"`
	Retryable *bool  `json:"retryable"`
}

func lastFrame(body []byte) frame {
	lines := bytes.Split(bytes.TrimSpace(body), []byte("\n"))
	var f frame
	json.Unmarshal(lines[len(lines)-1], &f)
	return f
}

// ---- Fixtures: xorbs and files built from random chunks ----

// xorbUp is a xorb ready to upload, with the chunks it holds.
type xorbUp struct {
	hash   hash.Hash
	body   []byte
	layout *xorb.Layout
	chunks [][]byte
}

func (x xorbUp) path() string { return "/v1/xorbs/default/" + x.hash.String() }

// makeXorb builds a xorb of n compressible random chunks of 4–8 KB.
func makeXorb(rng *mrand.Rand, n int) xorbUp {
	var chunks [][]byte
	for range n {
		raw := make([]byte, 4000+rng.IntN(4000))
		for i := range raw {
			raw[i] = byte('a' + rng.IntN(4))
		}
		chunks = append(chunks, raw)
	}
	return packXorb(xorb.LZ4, chunks)
}

// packXorb builds the xorb of chunks, encoded with scheme s.
func packXorb(s xorb.Scheme, chunks [][]byte) xorbUp {
	b := xorb.NewBuilder(s)
	for _, raw := range chunks {
		b.Add(raw, hash.Chunk(raw))
	}
	x := xorbUp{chunks: chunks}
	x.body, x.layout = b.Finish()
	x.hash = x.layout.Hash
	return x
}

// fileUp is a file made of whole xorbs, with the shard that registers it.
type fileUp struct {
	hash  hash.Hash
	data  []byte
	xorbs []xorbUp
	shard []byte // upload form: no footer (same for /v1 and /v2)
}

func makeFile(xs ...xorbUp) fileUp {
	f := fileUp{xorbs: xs}
	sf := shard.File{}
	sh := &shard.Shard{}
	var leaves []hash.Leaf
	for _, x := range xs {
		l := x.layout
		for i, raw := range x.chunks {
			f.data = append(f.data, raw...)
			leaves = append(leaves, hash.Leaf{Hash: l.ChunkHashes[i], Size: uint64(len(raw))})
		}
		sf.Terms = append(sf.Terms, shard.Term{Xorb: l.Hash, RawBytes: l.RawLen(), Start: 0, End: uint32(l.NumChunks())})
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
	sh.Files = []shard.File{sf}
	f.hash = sf.Hash
	f.shard = sh.AppendUpload(nil)
	return f
}

// download reads the file back with the Go client, which checks every chunk hash and the file
// hash.
func download(c *xetclient.Client, file hash.Hash) ([]byte, error) {
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	_, err := c.Download(ctx, file, &buf, xetclient.DownloadOptions{})
	return buf.Bytes(), err
}

// checkDownload fails unless file downloads as exactly want.
func checkDownload(t *testing.T, c *xetclient.Client, file hash.Hash, want []byte) {
	t.Helper()
	got, err := download(c, file)
	if err != nil {
		t.Fatalf("download %s: %v", file, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("download %s: %d bytes differ from the %d uploaded", file, len(got), len(want))
	}
}

// ---- Backends ----

// backendCase configures an origin for one pair of backends, fresh and empty.
type backendCase struct {
	name      string
	configure func(t *testing.T, o *proc)
}

// backendCases are the backends the binary's tests run on: the embedded default always, and
// PostgreSQL + MinIO when the test services are there (always in CI).
func backendCases() []backendCase {
	return []backendCase{
		{"embedded", func(*testing.T, *proc) {}},
		{"postgres+minio", func(t *testing.T, o *proc) {
			pg, s3 := services(t)
			production(t, o, pg, s3)
		}},
	}
}

// onEachBackend builds the binary and runs test once per backend case, each in its own subtest
// on a fresh origin configured for that case and not yet started (test adds its flags and
// starts it).
func onEachBackend(t *testing.T, test func(t *testing.T, o *proc)) {
	t.Helper()
	bin := buildBinary(t)
	for _, bc := range backendCases() {
		t.Run(bc.name, func(t *testing.T) {
			o := newOrigin(t, bin)
			bc.configure(t, o)
			test(t, o)
		})
	}
}

// services returns the host:port of the test PostgreSQL and MinIO (skipping, or failing in CI,
// when they are not configured).
func services(t *testing.T) (pg, s3 string) {
	t.Helper()
	u, err := url.Parse(testenv.Require(t, testenv.PostgresDSN))
	if err != nil {
		t.Fatalf("%s: %v", testenv.PostgresDSN, err)
	}
	return u.Host, testenv.RequireS3(t).Endpoint
}

// production configures o for a fresh PostgreSQL database and a fresh MinIO bucket, reached at
// pgAddr and s3Addr (the services themselves, or proxies in front of them). Both are removed
// when the test ends, after the origin was killed.
func production(t *testing.T, o *proc, pgAddr, s3Addr string) {
	t.Helper()
	dsn := freshDatabase(t)
	dsn.Host = pgAddr
	bucket := freshBucket(t)
	cfg, err := json.Marshal(map[string]any{
		"index":   map[string]any{"driver": "postgres"},
		"objects": map[string]any{"driver": "s3", "endpoint": s3Addr, "bucket": bucket},
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "origin.json")
	if err := os.WriteFile(file, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	s3 := testenv.RequireS3(t)
	o.args = append(o.args, "--config", file)
	o.env = append(o.env, "XETCDN_POSTGRES_DSN="+dsn.String(), "XETCDN_S3_ACCESS_KEY="+s3.AccessKey,
		"XETCDN_S3_SECRET_KEY="+s3.SecretKey)
}

func randomName(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// freshDatabase creates an empty database on the test PostgreSQL and returns its DSN; it is
// dropped (closing whatever still uses it) when the test ends.
func freshDatabase(t *testing.T) *url.URL {
	t.Helper()
	admin := testenv.Require(t, testenv.PostgresDSN)
	name := randomName("xet_origin_fault_")
	exec := func(stmt string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, stmt)
		return err
	}
	if err := exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if err := exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u
}

// freshBucket returns the name of a bucket that does not exist yet (the origin creates it);
// the bucket and its objects are removed when the test ends.
func freshBucket(t *testing.T) string {
	t.Helper()
	s3 := testenv.RequireS3(t)
	name := strings.ReplaceAll(randomName("xet-origin-fault-"), "_", "-")
	t.Cleanup(func() {
		c, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
		if err != nil {
			t.Errorf("remove bucket %s: %v", name, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		objs := c.ListObjects(ctx, name, minio.ListObjectsOptions{Recursive: true})
		for e := range c.RemoveObjects(ctx, name, objs, minio.RemoveObjectsOptions{}) {
			t.Errorf("remove %s/%s: %v", name, e.ObjectName, e.Err)
		}
		err = c.RemoveBucket(ctx, name)
		if code := minio.ToErrorResponse(err).Code; err != nil && code != "NoSuchBucket" {
			t.Errorf("remove bucket %s: %v", name, err)
		}
	})
	return name
}

// eventually polls check until it returns nil or the deadline passes, and returns its last
// error. Polls are spaced by a short ticker: this is waiting for a state, not for time.
func eventually(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
}

var errNotYet = errors.New("not yet")

func statusIs(a answer, err error, want int) error {
	if err != nil {
		return err
	}
	if a.status != want {
		return fmt.Errorf("%w: status %d, want %d: %s", errNotYet, a.status, want, a.body)
	}
	return nil
}
