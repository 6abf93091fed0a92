// Package interop runs the stock Xet clients — hf_xet 1.8.0 (Python) and huggingface.js
// @huggingface/hub 2.17.5 — unmodified against the xetcdn binaries, through the driver scripts in
// this directory (README.md says how each client is pointed at a self-hosted CAS).
//
// TestInterop builds cmd/xet-origin and cmd/xet-edge, starts a fresh origin per
// backend (embedded SQLite + local disk; Postgres + MinIO), uploads files of 0 B, 1 B, 1 MiB and a
// large random file with each client, downloads every file with both clients whole and by ranges,
// byte-exact, checks that a near-duplicate upload sends far fewer xorb bytes, and that a read token
// of another scope sees nothing. Without the client variables of internal/testenv it skips, except
// under CI, where it fails. -short shrinks the large files.
package interop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// Sizes of the generated files. The large file is meant to span several xorbs (a xorb holds at
// most 64 MiB); the base file is the one a near-duplicate is derived from.
const (
	bigSize        = 200 << 20
	bigSizeShort   = 12 << 20
	baseSize       = 24 << 20
	baseSizeShort  = 6 << 20
	similarPatch   = 4 << 10 // bytes changed in the middle of the base file
	scope          = "models/acme/interop"
	otherScope     = "models/acme/elsewhere"
	driverTimeout  = 10 * time.Minute
	startupTimeout = 60 * time.Second
)

// fixture is a local file a client uploads.
type fixture struct {
	name   string
	path   string
	size   int64
	sha256 string
}

// uploaded is a fixture after a client registered it with the origin.
type uploaded struct {
	fixture
	by   string // client that uploaded it
	hash string // xet file hash, protocol string form
}

func TestInterop(t *testing.T) {
	clients := stockClients(t)
	bins := buildBinaries(t)

	big, base := int64(bigSize), int64(baseSize)
	if testing.Short() {
		big, base = bigSizeShort, baseSizeShort
	}
	files := make(map[string][]fixture) // per uploading client: its own random content
	for i, c := range clients {
		files[c.name] = makeFixtures(t, t.TempDir(), uint64(i+1), big, base)
	}

	backends := []struct {
		name  string
		setup func(t *testing.T) backend
	}{
		{"embedded", func(*testing.T) backend { return backend{} }},
		{"postgres-minio", postgresMinIO},
	}
	for i, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			o := startOrigin(t, bins.origin, be.setup(t))
			runScenarios(t, o, bins, clients, files, i == 0)
		})
	}
}

// runScenarios is the whole matrix against one running origin. The edge reads through the
// origin's internal API whatever its backend, so only with fullEdge does it get every file.
func runScenarios(t *testing.T, o *origin, bins binaries, clients []*client, files map[string][]fixture, fullEdge bool) {
	write := o.token(t, scope, "write")
	read := o.token(t, scope, "read")
	otherRead := o.token(t, otherScope, "read")

	var all []uploaded
	for _, up := range clients {
		fx := files[up.name]
		t.Run("upload/"+up.name, func(t *testing.T) {
			// The big file and the three small ones go in one call (one commit for hf_xet).
			got := up.upload(t, o.env, o.writeAuth(write, up.viaHub), pick(fx, "empty", "one", "mib", "big")...)
			all = appendUploads(all, got)
		})
		t.Run("dedup/"+up.name, func(t *testing.T) {
			m0 := o.xorbIngestBytes(t)
			first := up.upload(t, o.env, o.writeAuth(write, up.viaHub), pick(fx, "base")...)
			m1 := o.xorbIngestBytes(t)
			second := up.upload(t, o.env, o.writeAuth(write, up.viaHub), pick(fx, "similar")...)
			m2 := o.xorbIngestBytes(t)
			all = appendUploads(appendUploads(all, first), second)
			baseBytes, similarBytes := m1-m0, m2-m1
			t.Logf("%s: xorb bytes ingested: base %d (%d B file), similar %d; client reported %d then %d",
				up.name, baseBytes, first[0].size, similarBytes, first[0].clientXorbBytes, second[0].clientXorbBytes)
			if baseBytes < first[0].size/2 {
				t.Errorf("origin ingested %d xorb bytes for a %d B random file: counter does not count xorb uploads",
					baseBytes, first[0].size)
			}
			if similarBytes*4 > baseBytes {
				t.Errorf("near-duplicate upload ingested %d xorb bytes, base upload %d: dedup saved too little",
					similarBytes, baseBytes)
			}
			if c1, c2 := first[0].clientXorbBytes, second[0].clientXorbBytes; c1 >= 0 && c2*4 > c1 {
				t.Errorf("client sent %d xorb bytes for the near-duplicate, %d for the base", c2, c1)
			}
		})
	}
	if t.Failed() {
		return
	}

	// Each client uploads the other's files too. The origin must accept a shard whose file reuses
	// xorbs another client uploaded. For a file smaller than one chunk the clients must agree on
	// the file hash; for larger files they need not: huggingface.js 2.17.5 still cuts chunks by
	// the rule xet-core used before v1.1.10, so its chunk boundaries, and file hashes, differ.
	t.Run("cross-upload", func(t *testing.T) {
		for _, from := range clients {
			for _, c := range clients {
				if c == from {
					continue
				}
				for _, name := range []string{"empty", "one", "mib"} {
					f := find(t, all, from.name, name)
					got := c.upload(t, o.env, o.writeAuth(write, c.viaHub), f.fixture)
					switch {
					case got[0].hash == f.hash:
					case f.size <= 1:
						t.Errorf("%s: %s hashed it to %s, %s to %s", name, from.name, f.hash, c.name, got[0].hash)
					default:
						t.Logf("%s: %s hashed it to %s, %s to %s (different chunking)", name, from.name, f.hash, c.name, got[0].hash)
					}
					if got[0].hash != f.hash {
						all = appendUploads(all, got)
					}
				}
			}
		}
	})

	// hf_xet through the token route (token_refresh_url) rather than with a bare token.
	t.Run("token-route/"+clients[0].name, func(t *testing.T) {
		c := clients[0]
		f := find(t, all, c.name, "mib")
		got := c.upload(t, o.env, o.writeAuth(write, true), f.fixture)
		if got[0].hash != f.hash {
			t.Errorf("same client, same bytes: hash %s, earlier %s", got[0].hash, f.hash)
		}
		checkDownloads(t, c, o.env, auth{endpoint: o.url, token: read, hub: o.url, repo: scope}, f)
	})

	origin := endpoints{name: "origin", url: o.url, hub: o.url}
	for _, f := range all {
		for _, down := range clients {
			t.Run(fmt.Sprintf("download/origin/%s->%s/%s", f.by, down.name, f.name), func(t *testing.T) {
				checkDownloads(t, down, o.env, origin.readAuth(read, down.viaHub), f)
			})
		}
	}

	t.Run("other-scope", func(t *testing.T) {
		f := find(t, all, clients[0].name, "mib")
		for _, path := range []string{"/v2/reconstructions/", "/v1/reconstructions/"} {
			if st := httpStatus(t, o.url+path+f.hash, otherRead); st != http.StatusNotFound {
				t.Errorf("GET %s with a read token of %s: status %d, want 404", path, otherScope, st)
			}
		}
		if st := httpStatus(t, o.url+"/api/"+otherScope+"/xet-read-token/main", read); st != http.StatusForbidden {
			t.Errorf("token route for %s with a read token of %s: status %d, want 403", otherScope, scope, st)
		}
		if st := httpStatus(t, o.url+"/v2/reconstructions/"+f.hash, ""); st != http.StatusUnauthorized {
			t.Errorf("GET /v2/reconstructions without a token: status %d, want 401", st)
		}
		for _, down := range clients {
			out := filepath.Join(t.TempDir(), "out")
			err := down.download(t, o.env, auth{endpoint: o.url, token: otherRead}, f.hash, f.size, nil, out)
			if err == nil {
				t.Errorf("%s downloaded %s with a read token of %s", down.name, f.name, otherScope)
			} else if !strings.Contains(err.Error(), "404") {
				t.Logf("%s failed as it should, though without naming a 404: %v", down.name, err)
			}
		}
	})

	// hf_xet's fallbacks and options, forced through its environment: the v1 shard route and the
	// direct xorb route for uploads, the v1 reconstruction route and multi-range transfer GETs
	// for downloads. The near-duplicate file is the one whose xorb fetches have several ranges.
	t.Run("hfxet-variants", func(t *testing.T) {
		c := clients[0]
		fx := makeFixtures(t, t.TempDir(), 99, 0, 3<<20)
		up := append(append([]string(nil), o.env...),
			"HF_XET_CLIENT_SHARD_API_VERSION=1", "HF_XET_CLIENT_LEGACY_DIRECT_XORB_UPLOAD=true")
		// The origin's request counter shows that each setting took effect.
		const (
			v1Shards = "POST /v1/shards"
			v1Xorbs  = "POST /v1/xorbs/{prefix}/{hash}"
			v1Recon  = "GET /v1/reconstructions/{file}"
		)
		before := o.requests(t)
		got := c.upload(t, up, o.writeAuth(write, false), pick(fx, "base", "similar")...)
		after := o.requests(t)
		for _, route := range []string{v1Shards, v1Xorbs} {
			if after[route] <= before[route] {
				t.Errorf("%s not called (%v before, %v after)", route, before[route], after[route])
			}
		}
		files := append(appendUploads(nil, got), find(t, all, c.name, "similar"))
		for _, v := range []string{"HF_XET_CLIENT_RECONSTRUCTION_API_VERSION=1", "HF_XET_CLIENT_ENABLE_MULTIRANGE_FETCHING=true"} {
			env := append(append([]string(nil), o.env...), v)
			before := o.requests(t)
			for _, f := range files {
				t.Run(fmt.Sprintf("%s/%s-%s", strings.SplitN(v, "=", 2)[0], f.by, f.name), func(t *testing.T) {
					checkDownloads(t, c, env, auth{endpoint: o.url, token: read}, f)
				})
			}
			if after := o.requests(t); strings.Contains(v, "RECONSTRUCTION") && after[v1Recon] <= before[v1Recon] {
				t.Errorf("%s: %s not called", v, v1Recon)
			}
		}
	})

	// Two edges: one whose transfer URLs point at its plain HTTP listener, and one on its
	// defaults (TLS with a self-signed certificate, which the clients are told to trust).
	t.Run("edge", func(t *testing.T) {
		// To keep the run within budget the TLS edge, and both edges unless fullEdge, get the two
		// files that matter most.
		plainFiles, tlsFiles := []string{"empty", "one", "mib", "big", "similar"}, []string{"mib", "big"}
		if !fullEdge {
			plainFiles = tlsFiles
		}
		type target struct {
			endpoints
			files []string
		}
		var eps []target
		plain := startEdge(t, bins.edge, o, true)
		f := find(t, all, clients[0].name, "mib")
		for _, path := range []string{"/v2/reconstructions/", "/v1/reconstructions/"} {
			if st := httpStatus(t, plain.httpURL+path+f.hash, otherRead); st != http.StatusNotFound {
				t.Errorf("edge: GET %s with a read token of %s: status %d, want 404", path, otherScope, st)
			}
		}
		eps = append(eps, target{endpoints{name: "edge-http", url: plain.httpURL, hub: o.url},
			plainFiles})
		tls := startEdge(t, bins.edge, o, false)
		if tls.caFile == "" {
			t.Error("no PEM certificate in the edge's data dir: TLS downloads not run")
		} else {
			eps = append(eps, target{endpoints{name: "edge-tls", url: tls.tlsURL, hub: o.url, caFile: tls.caFile},
				tlsFiles})
		}
		for _, ep := range eps {
			for _, f := range all {
				if !slices.Contains(ep.files, f.name) {
					continue
				}
				for _, down := range clients {
					t.Run(fmt.Sprintf("%s/%s->%s/%s", ep.name, f.by, down.name, f.name), func(t *testing.T) {
						// Through the edge the CAS URL is the edge's, so the token goes to the
						// client directly rather than through the origin's token route.
						checkDownloads(t, down, ep.env(o.env), ep.readAuth(read, false), f)
					})
				}
			}
		}
	})
}

// checkDownloads downloads f whole and by a few ranges with c, comparing every byte.
func checkDownloads(t *testing.T, c *client, env []string, a auth, f uploaded) {
	t.Helper()
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole")
	if err := c.download(t, env, a, f.hash, f.size, nil, whole); err != nil {
		t.Fatalf("whole download: %v", err)
	}
	sameBytes(t, f.path, 0, f.size, whole)
	rs := ranges(f.size)
	if len(rs) == 0 {
		return
	}
	// One driver call reads every range (one client session, as an application would).
	out := filepath.Join(dir, "range")
	if err := c.download(t, env, a, f.hash, f.size, rs, out); err != nil {
		t.Fatalf("ranges %v: %v", rs, err)
	}
	for i, r := range rs {
		got := out
		if len(rs) > 1 {
			got = fmt.Sprintf("%s.%d", out, i)
		}
		sameBytes(t, f.path, r[0], r[1]-r[0]+1, got)
	}
}

// ranges lists inclusive byte ranges worth reading from a file of size n: the edges, a middle
// third, a window across several chunk boundaries, and one across the first xorb boundary.
func ranges(n int64) [][2]int64 {
	if n < 2 {
		return nil
	}
	rs := [][2]int64{{0, 0}, {n - 1, n - 1}, {n / 3, 2 * n / 3}}
	if n > 1<<20 {
		rs = append(rs, [2]int64{n/2 - 5000, n/2 + 300_000})
	}
	if n > 64<<20 {
		rs = append(rs, [2]int64{64<<20 - 100_000, 64<<20 + 100_000})
	}
	return rs
}

// ---- clients -------------------------------------------------------------------------------

// client runs one driver script.
type client struct {
	name   string
	argv   []string // interpreter and script
	viaHub bool     // whether its uploads fetch the CAS token from the origin's token route
}

// auth says where a driver sends its requests and with which token.
type auth struct {
	endpoint, token string
	hub, repo       string // set: get the CAS token from the Hub-compatible token route
}

// result is one line of a driver's upload output.
type result struct {
	Path     string  `json:"path"`
	FileHash string  `json:"file_hash"`
	Size     int64   `json:"size"`
	SHA256   *string `json:"sha256"`
	// huggingface.js driver: bytes it POSTed to /v1/xorbs.
	XorbBytesPosted *int64 `json:"xorb_bytes_posted"`
}

// uploadResult is an uploaded file plus the xorb bytes the client says it sent for the call
// (-1 when it does not say).
type uploadResult struct {
	uploaded
	clientXorbBytes int64
}

func hfxetClient(python, root string) *client {
	return &client{name: "hfxet", argv: []string{python, filepath.Join(root, "test", "interop", "hfxet_driver.py")}}
}

// stockClients are the stock clients the tests drive: hf_xet and huggingface.js (the test is
// skipped without them, and fails in CI).
func stockClients(t *testing.T) []*client {
	t.Helper()
	python := testenv.Require(t, testenv.Python)
	nodeDir := testenv.Require(t, testenv.NodeModules)
	root := moduleRoot(t)
	return []*client{hfxetClient(python, root), hfjsClient(t, nodeDir, root)}
}

// hfjsClient runs the node driver from a temp dir whose node_modules links to the one in nodeDir:
// ES modules resolve packages from the script's own location, never from NODE_PATH.
func hfjsClient(t *testing.T, nodeDir, root string) *client {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	mods, err := filepath.Abs(filepath.Join(nodeDir, "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mods, "@huggingface", "hub", "package.json")); err != nil {
		t.Fatalf("%s=%s has no node_modules/@huggingface/hub: %v", testenv.NodeModules, nodeDir, err)
	}
	dir := t.TempDir()
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "test", "interop", "hfjs_driver.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "hfjs_driver.mjs")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return &client{name: "hfjs", argv: []string{node, script}, viaHub: true}
}

// run executes the driver; the error carries the driver's stderr.
func (c *client) run(t *testing.T, env []string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), driverTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.argv[0], append(c.argv[1:], args...)...)
	cmd.Env = append(os.Environ(), env...)
	dieWithTest(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\n%s", c.name, args[0], err, tail(stderr.String(), 40))
	}
	if testing.Verbose() {
		t.Logf("%s %s took %v", c.name, args[0], time.Since(start).Round(time.Millisecond))
	}
	return stdout.Bytes(), nil
}

func (a auth) args() []string {
	args := []string{"--endpoint", a.endpoint, "--token", a.token}
	if a.hub != "" {
		args = append(args, "--hub", a.hub, "--repo", a.repo)
	}
	return args
}

// upload sends fx in one driver call and checks what the driver reports against the local files.
func (c *client) upload(t *testing.T, env []string, a auth, fx ...fixture) []uploadResult {
	t.Helper()
	args := append([]string{"upload"}, a.args()...)
	report := ""
	if c.name == "hfxet" {
		report = filepath.Join(t.TempDir(), "report.json")
		args = append(args, "--report", report)
	}
	for _, f := range fx {
		args = append(args, f.path)
	}
	out, err := c.run(t, env, args...)
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	hexHash := regexp.MustCompile(`^[0-9a-f]{64}$`)
	var res []uploadResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for i := 0; sc.Scan(); i++ {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("upload output line %q: %v", sc.Text(), err)
		}
		if i >= len(fx) {
			t.Fatalf("upload printed more lines than files: %q", out)
		}
		f := fx[i]
		if r.Path != f.path || r.Size != f.size {
			t.Errorf("upload line %d: path %q size %d, want %q size %d", i, r.Path, r.Size, f.path, f.size)
		}
		if !hexHash.MatchString(r.FileHash) {
			t.Errorf("%s: file hash %q is not 64 hex digits", f.name, r.FileHash)
		}
		// hf_xet 1.8.0 reports an all-zero sha256 for an empty file.
		if r.SHA256 != nil && *r.SHA256 != f.sha256 && !(f.size == 0 && *r.SHA256 == strings.Repeat("0", 64)) {
			t.Errorf("%s: client sha256 %s, want %s", f.name, *r.SHA256, f.sha256)
		}
		xb := int64(-1)
		if r.XorbBytesPosted != nil {
			xb = *r.XorbBytesPosted
		}
		res = append(res, uploadResult{uploaded: uploaded{fixture: f, by: c.name, hash: r.FileHash}, clientXorbBytes: xb})
	}
	if len(res) != len(fx) {
		t.Fatalf("upload printed %d lines for %d files: %q", len(res), len(fx), out)
	}
	if report != "" {
		var rep struct {
			Dedup struct {
				XorbBytesUploaded int64 `json:"xorb_bytes_uploaded"`
			} `json:"dedup"`
		}
		b, err := os.ReadFile(report)
		if err == nil {
			err = json.Unmarshal(b, &rep)
		}
		if err != nil {
			t.Fatalf("hf_xet report: %v", err)
		}
		for i := range res {
			res[i].clientXorbBytes = rep.Dedup.XorbBytesUploaded
		}
	}
	return res
}

// download fetches file hash (size bytes) into out; with ranges, the inclusive ranges of it
// into out.0, out.1, ... (out itself when there is one).
func (c *client) download(t *testing.T, env []string, a auth, hash string, size int64, ranges [][2]int64, out string) error {
	t.Helper()
	args := append([]string{"download"}, a.args()...)
	args = append(args, "--hash", hash, "--size", strconv.FormatInt(size, 10), "-o", out)
	for _, r := range ranges {
		args = append(args, "--range", fmt.Sprintf("%d-%d", r[0], r[1]))
	}
	_, err := c.run(t, env, args...)
	return err
}

// ---- the servers ---------------------------------------------------------------------------

type binaries struct{ origin, edge string }

// buildBinaries builds the origin and the edge, unless
// XETCDN_INTEROP_ORIGIN_BIN / XETCDN_INTEROP_EDGE_BIN name prebuilt binaries to use instead.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	var b binaries
	for _, bin := range []struct {
		name, env string
		dst       *string
	}{{"xet-origin", "XETCDN_INTEROP_ORIGIN_BIN", &b.origin}, {"xet-edge", "XETCDN_INTEROP_EDGE_BIN", &b.edge}} {
		if p := os.Getenv(bin.env); p != "" {
			*bin.dst = p
			continue
		}
		*bin.dst = testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/"+bin.name)
	}
	return b
}

// backend is how an origin stores its state: zero value = embedded defaults.
type backend struct {
	config []byte   // JSON config file content, nil for none
	env    []string // secrets for the origin process
}

// postgresMinIO gives the origin a fresh database and a fresh bucket on the test services, and
// drops both when the test ends.
func postgresMinIO(t *testing.T) backend {
	dsn := testenv.Require(t, testenv.PostgresDSN)
	s3 := testenv.RequireS3(t)
	suffix := randomSuffix(t)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	db := "interop_" + suffix
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatalf("create database: %v", err)
	}
	admin.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
				t.Logf("drop database %s: %v", db, err)
			}
			c.Close(ctx)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		t.Fatalf("%s must be a postgres:// URL: %q", testenv.PostgresDSN, dsn)
	}
	u.Path = "/" + db

	mc, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
	if err != nil {
		t.Fatalf("minio: %v", err)
	}
	bucket := "interop-" + strings.ReplaceAll(suffix, "_", "-")
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		objs := mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true})
		for e := range mc.RemoveObjects(ctx, bucket, objs, minio.RemoveObjectsOptions{}) {
			t.Logf("remove object %s: %v", e.ObjectName, e.Err)
		}
		if err := mc.RemoveBucket(ctx, bucket); err != nil {
			t.Logf("remove bucket %s: %v", bucket, err)
		}
	})

	cfg, err := json.Marshal(map[string]any{
		"index":   map[string]any{"driver": "postgres"},
		"objects": map[string]any{"driver": "s3", "endpoint": s3.Endpoint, "bucket": bucket},
	})
	if err != nil {
		t.Fatal(err)
	}
	return backend{
		config: cfg,
		env: []string{
			"XETCDN_POSTGRES_DSN=" + u.String(),
			"XETCDN_S3_ACCESS_KEY=" + s3.AccessKey,
			"XETCDN_S3_SECRET_KEY=" + s3.SecretKey,
		},
	}
}

// serverOptions are how the servers run: SIGTERM at cleanup, SIGKILL 20 s later.
func serverOptions(env []string, healthz string) testenv.Options {
	return testenv.Options{Env: env, Healthy: healthz, StartTimeout: startupTimeout, StopTimeout: 20 * time.Second}
}

type origin struct {
	bin, dataDir string
	url, admin   string
	env          []string // for the clients: their own cache dir for this server, fast retries
}

func startOrigin(t *testing.T, bin string, be backend) *origin {
	t.Helper()
	dir := t.TempDir()
	o := &origin{
		bin:     bin,
		dataDir: filepath.Join(dir, "data"),
		url:     "http://" + testenv.FreeAddr(t),
		admin:   "http://" + testenv.FreeAddr(t),
		env: []string{
			// hf_xet dedups against a local shard cache; one per server keeps a second server
			// from being sent shards that reference xorbs only the first one has.
			"HF_XET_CACHE=" + filepath.Join(dir, "hf-xet-cache"),
			"HF_XET_CLIENT_RETRY_MAX_ATTEMPTS=2",
			"HF_XET_CLIENT_RETRY_BASE_DELAY=300ms",
		},
	}
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", o.dataDir, "--listen", strings.TrimPrefix(o.url, "http://"),
		"--admin-listen", strings.TrimPrefix(o.admin, "http://")}
	if be.config != nil {
		cfg := filepath.Join(dir, "origin.json")
		if err := os.WriteFile(cfg, be.config, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", cfg)
	}
	testenv.Start(t, bin, args, serverOptions(be.env, o.url+"/healthz"))
	return o
}

// token mints a token with `xet-origin token`.
func (o *origin) token(t *testing.T, scope, access string) string {
	t.Helper()
	tok := testenv.Run(t, o.bin, "token", "--data-dir", o.dataDir, "--scope", scope, "--access", access)
	if tok == "" || strings.ContainsAny(tok, " \n") {
		t.Fatalf("xet-origin token printed %q, want one token", tok)
	}
	return tok
}

// writeAuth points an uploader at the origin, through the token route when viaHub.
func (o *origin) writeAuth(tok string, viaHub bool) auth {
	a := auth{endpoint: o.url, token: tok}
	if viaHub {
		a.hub, a.repo = o.url, scope
	}
	return a
}

// xorbIngestBytes reads the origin's counter of accepted xorb bytes (0 before the first xorb:
// a counter vector has no series until its first observation).
func (o *origin) xorbIngestBytes(t *testing.T) int64 {
	t.Helper()
	const name = "xet_origin_ingest_bytes_total{"
	var total float64
	scanMetrics(t, o.admin, func(line string) {
		if !strings.HasPrefix(line, name) || !strings.Contains(line, `kind="xorb"`) {
			return
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += v
	})
	return int64(total)
}

// requests reads the origin's request counter, summed over status codes, by route pattern.
func (o *origin) requests(t *testing.T) map[string]float64 {
	t.Helper()
	const name = "xet_origin_http_requests_total{"
	routeLabel := regexp.MustCompile(`route="([^"]*)"`)
	out := make(map[string]float64)
	scanMetrics(t, o.admin, func(line string) {
		if !strings.HasPrefix(line, name) {
			return
		}
		m := routeLabel.FindStringSubmatch(line)
		if m == nil {
			return
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[m[1]] += v
	})
	return out
}

// scanMetrics calls fn with every line of the admin listener's /metrics.
func scanMetrics(t *testing.T, admin string, fn func(line string)) {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fn(sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("metrics: %v", err)
	}
}

// endpoints is where downloads go: the origin itself, or an edge.
type endpoints struct {
	name, url, hub string
	caFile         string // self-signed certificate the clients must trust
}

func (e endpoints) readAuth(tok string, viaHub bool) auth {
	a := auth{endpoint: e.url, token: tok}
	if viaHub {
		a.hub, a.repo = e.hub, scope
	}
	return a
}

// env adds the certificate to both clients' trust: rustls-platform-verifier (hf_xet) reads
// SSL_CERT_FILE, node reads NODE_EXTRA_CA_CERTS.
func (e endpoints) env(base []string) []string {
	if e.caFile == "" {
		return base
	}
	return append(append([]string(nil), base...), "SSL_CERT_FILE="+e.caFile, "NODE_EXTRA_CA_CERTS="+e.caFile)
}

type edge struct {
	tlsURL, httpURL string
	caFile          string
}

// startEdge starts an edge in front of o. With plainURLs its public URL (the base of the transfer
// URLs it signs) is its plain HTTP listener; otherwise it keeps its default, the TLS listener. Its
// certificate is self-signed: the first PEM certificate found in its data dir is the one to trust.
func startEdge(t *testing.T, bin string, o *origin, plainURLs bool) *edge {
	t.Helper()
	dir := t.TempDir()
	tlsAddr, httpAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	e := &edge{tlsURL: "https://" + tlsAddr, httpURL: "http://" + httpAddr}
	args := []string{"--origin", o.url, "--origin-token", o.token(t, scope, "edge"),
		"--data-dir", dir, "--listen", tlsAddr, "--http-listen", httpAddr}
	if plainURLs {
		args = append(args, "--public-url", e.httpURL)
	}
	testenv.Start(t, bin, args, serverOptions(nil, e.httpURL+"/healthz"))
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || e.caFile != "" {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
			e.caFile = path
		}
		return nil
	})
	return e
}

// ---- fixtures and checks -------------------------------------------------------------------

// makeFixtures writes the files one client uploads; seed makes each client's content its own.
func makeFixtures(t *testing.T, dir string, seed uint64, big, base int64) []fixture {
	t.Helper()
	rng := mrand.NewChaCha8([32]byte{byte(seed)})
	var fx []fixture
	add := func(name string, size int64, patch func([]byte)) {
		buf := make([]byte, size)
		_, _ = rng.Read(buf)
		if patch != nil {
			patch(buf)
		}
		p := filepath.Join(dir, name+".bin")
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf)
		fx = append(fx, fixture{name: name, path: p, size: size, sha256: hex.EncodeToString(sum[:])})
	}
	add("empty", 0, nil)
	add("one", 1, nil)
	add("mib", 1<<20, nil)
	add("big", big, nil)
	var baseBytes []byte
	add("base", base, func(b []byte) { baseBytes = b })
	add("similar", base, func(b []byte) {
		copy(b, baseBytes)
		_, _ = rng.Read(b[base/2 : base/2+similarPatch])
	})
	return fx
}

func appendUploads(all []uploaded, rs []uploadResult) []uploaded {
	for _, r := range rs {
		all = append(all, r.uploaded)
	}
	return all
}

func pick(fx []fixture, names ...string) []fixture {
	var out []fixture
	for _, n := range names {
		for _, f := range fx {
			if f.name == n {
				out = append(out, f)
			}
		}
	}
	return out
}

func find(t *testing.T, all []uploaded, by, name string) uploaded {
	t.Helper()
	for _, f := range all {
		if f.by == by && f.name == name {
			return f
		}
	}
	t.Fatalf("no upload of %s by %s", name, by)
	return uploaded{}
}

// sameBytes checks that file got holds exactly bytes [off, off+n) of file want.
func sameBytes(t *testing.T, want string, off, n int64, got string) {
	t.Helper()
	wf, err := os.Open(want)
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	gf, err := os.Open(got)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	st, err := gf.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != n {
		t.Errorf("%s: %d bytes, want %d (bytes %d-%d of %s)", filepath.Base(got), st.Size(), n, off, off+n-1, filepath.Base(want))
		return
	}
	wr := io.NewSectionReader(wf, off, n)
	wb, gb := make([]byte, 1<<20), make([]byte, 1<<20)
	for pos := int64(0); pos < n; {
		k := min(int64(len(wb)), n-pos)
		if _, err := io.ReadFull(wr, wb[:k]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(gf, gb[:k]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wb[:k], gb[:k]) {
			i := 0
			for wb[i] == gb[i] {
				i++
			}
			t.Errorf("%s differs from %s at byte %d of the range starting at %d", filepath.Base(got), filepath.Base(want), pos+int64(i), off)
			return
		}
		pos += k
	}
}

// httpStatus GETs url with the bearer token (none when empty) and returns the status.
func httpStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// ---- small helpers -------------------------------------------------------------------------

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source")
	}
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	return root
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
