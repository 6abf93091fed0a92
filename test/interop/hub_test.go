package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// Sizes of the hub test's model folder: the 300 MiB safetensors file on both backends,
// 8 MiB with -short. The 1 %
// change of the second version is one contiguous run of bytes in the middle of the file.
const (
	hubBigSize      = 300 << 20
	hubBigSizeShort = 8 << 20
	hubTokenizer    = 2 << 20
)

// TestHubFlows runs the stock huggingface_hub 2.4.0 (the hf CLI and its Python API, with hf_xet
// 1.8.0) unmodified against the real xet-origin (HF_ENDPOINT) and an xet-edge (the casUrl of
// read tokens), on both backends: hf upload of a model folder, snapshot_download through the
// edge into an empty cache, a near-duplicate second version, revisions, branches, tags,
// deletion, a stale parent, private repositories and bad input (docs/hub.md).
func TestHubFlows(t *testing.T) {
	python := testenv.Require(t, testenv.Python)
	hfBin := filepath.Join(filepath.Dir(python), "hf")
	if _, err := os.Stat(hfBin); err != nil {
		t.Fatalf("the hf CLI of huggingface_hub is not next to %s (scripts/services.sh installs it): %v", python, err)
	}
	bins := buildBinaries(t)
	backends := []struct {
		name  string
		setup func(t *testing.T) backend
	}{
		{"embedded", func(*testing.T) backend { return backend{} }},
		{"postgres-minio", postgresMinIO},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			big := int64(hubBigSize)
			if testing.Short() {
				big = hubBigSizeShort
			}
			src := hubModelFolder(t, big)
			h := startHub(t, bins, be.setup(t), python, hfBin)
			hubScenarios(t, h, src, big)
		})
	}
}

// hubModelFolder writes the model folder the test uploads: a big random safetensors file, a
// 2 MiB tokenizer (above hub.inline_max: a Xet file), small JSON files.
func hubModelFolder(t *testing.T, big int64) string {
	src := t.TempDir()
	rng := mrand.NewChaCha8([32]byte{42})
	writeRandom(t, filepath.Join(src, "model.safetensors"), big, rng)
	writeRandom(t, filepath.Join(src, "tokenizer.json"), hubTokenizer, rng)
	writeFile(t, filepath.Join(src, "config.json"), []byte(`{"architectures":["Tiny"],"hidden_size":8}`+"\n"))
	writeFile(t, filepath.Join(src, "sub", "generation_config.json"), []byte(`{"max_length":16}`+"\n"))
	return src
}

// hubEnv is one origin + edge pair and the users and tokens of the test.
type hubEnv struct {
	o                    *origin
	edgeURL, caFile      string
	python, hf           string
	aliceW, aliceR, bobW string // hf_ tokens
	home                 string
	baseEnv              []string
	originArgs           []string
	originEnv            []string
	proc                 *testenv.Process
	// admin runs an xet-origin admin command on the origin's database ("tokens", "list", ...)
	// and returns its exit status and output.
	admin func(t *testing.T, a ...string) (int, string, string)
}

func startHub(t *testing.T, bins binaries, be backend, python, hfBin string) *hubEnv {
	t.Helper()
	dir := t.TempDir()
	edgeTLS, edgeHTTP := testenv.FreeAddr(t), testenv.FreeAddr(t)
	o := &origin{bin: bins.origin, dataDir: filepath.Join(dir, "data"),
		url: "http://" + testenv.FreeAddr(t), admin: "http://" + testenv.FreeAddr(t)}
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", o.dataDir, "--listen", strings.TrimPrefix(o.url, "http://"),
		"--admin-listen", strings.TrimPrefix(o.admin, "http://"), "--edge-url", "https://" + edgeTLS}
	cfgArgs := []string{"--data-dir", o.dataDir}
	if be.config != nil {
		cfg := filepath.Join(dir, "origin.json")
		writeFile(t, cfg, be.config)
		args = append(args, "--config", cfg)
		cfgArgs = append(cfgArgs, "--config", cfg)
	}
	// Users and tokens first: the admin commands need no running origin.
	admin := func(a ...string) string {
		code, stdout, stderr := testenv.RunStatus(t, o.bin, be.env, slices.Concat(a[:2], cfgArgs, a[2:])...)
		if code != 0 {
			t.Fatalf("xet-origin %v: exit %d: %s", a, code, stderr)
		}
		return strings.TrimSpace(stdout)
	}
	admin("users", "add", "alice")
	admin("users", "add", "bob")
	h := &hubEnv{o: o, python: python, hf: hfBin, home: filepath.Join(dir, "hf-home"),
		aliceW: admin("tokens", "create", "--user", "alice", "--grant", "models/alice/*:write", "--grant", "datasets/alice/*:write"),
		aliceR: admin("tokens", "create", "--user", "alice", "--grant", "models/alice/*:read"),
		bobW:   admin("tokens", "create", "--user", "bob", "--grant", "models/bob/*:write"),
	}
	// Bad admin input: exit status 2, nothing printed on stdout, nothing created.
	for _, a := range [][]string{
		{"tokens", "create", "--user", "nobody", "--grant", "models/x/*:read"},
		{"tokens", "create", "--user", "alice", "--grant", "models/x/*:admin"},
		{"tokens", "create", "--user", "alice", "--grant", "models/*"},
		{"tokens", "create", "--user", "alice"},
		{"users", "add", "alice"},
		{"users", "add", "../evil"},
	} {
		code, stdout, stderr := testenv.RunStatus(t, o.bin, be.env, slices.Concat(a[:2], cfgArgs, a[2:])...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("xet-origin %v: exit %d, stdout %q, stderr %q; want 2, nothing, an error", a, code, stdout, stderr)
		}
	}
	for _, tok := range []string{h.aliceW, h.aliceR, h.bobW} {
		if !strings.HasPrefix(tok, "hf_") || strings.ContainsAny(tok, " \n") {
			t.Fatalf("tokens create printed %q, want one hf_ token", tok)
		}
	}
	h.originArgs, h.originEnv = args, be.env
	h.admin = func(t *testing.T, a ...string) (int, string, string) {
		return testenv.RunStatus(t, o.bin, be.env, slices.Concat(a[:2], cfgArgs, a[2:])...)
	}
	h.proc = testenv.Start(t, o.bin, args, serverOptions(be.env, o.url+"/healthz"))

	edgeDir := t.TempDir()
	h.edgeURL = "https://" + edgeTLS
	testenv.Start(t, bins.edge, []string{"--origin", o.url, "--origin-token", o.token(t, "", "edge"),
		"--data-dir", edgeDir, "--listen", edgeTLS, "--http-listen", edgeHTTP},
		serverOptions(nil, "http://"+edgeHTTP+"/healthz"))
	_ = filepath.WalkDir(edgeDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || h.caFile != "" {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
			h.caFile = path
		}
		return nil
	})
	if h.caFile == "" {
		t.Fatal("no edge certificate found")
	}
	h.baseEnv = []string{"HF_ENDPOINT=" + o.url, "HF_HOME=" + h.home, "HF_HUB_DISABLE_TELEMETRY=1",
		"HF_HUB_DISABLE_PROGRESS_BARS=1", "HF_XET_CACHE=" + filepath.Join(dir, "hf-xet-cache"),
		"SSL_CERT_FILE=" + h.caFile, "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS=2", "HF_XET_CLIENT_RETRY_BASE_DELAY=300ms",
		"NO_COLOR=1"}
	return h
}

// run runs the hf CLI or python with a token ("" = anonymous); it returns the combined output
// and the error.
func (h *hubEnv) run(t *testing.T, token string, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), h.baseEnv...), "HF_TOKEN="+token)
	if token == "" {
		cmd.Env = append(cmd.Env, "HF_HUB_DISABLE_IMPLICIT_TOKEN=1")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	timer := time.AfterFunc(driverTimeout, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Run()
	return out.String(), err
}

func (h *hubEnv) mustRun(t *testing.T, token string, argv ...string) string {
	t.Helper()
	out, err := h.run(t, token, argv...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, tail(out, 30))
	}
	return out
}

// py runs a Python snippet with huggingface_hub; the last line it prints is returned.
func (h *hubEnv) py(t *testing.T, token, script string, args ...string) (string, error) {
	t.Helper()
	out, err := h.run(t, token, append([]string{h.python, "-c", script}, args...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil {
		return out, err
	}
	return lines[len(lines)-1], nil
}

func (h *hubEnv) mustPy(t *testing.T, token, script string, args ...string) string {
	t.Helper()
	out, err := h.py(t, token, script, args...)
	if err != nil {
		t.Fatalf("python: %v\n%s", err, tail(out, 30))
	}
	return out
}

const pyRepoSHA = `import sys, huggingface_hub as h
print(h.HfApi().repo_info(sys.argv[1], revision=sys.argv[2] if len(sys.argv) > 2 else None).sha)`

// pySnapshot downloads a snapshot into an empty cache and prints the snapshot folder.
const pySnapshot = `import sys, huggingface_hub as h
print(h.snapshot_download(sys.argv[1], revision=sys.argv[2], cache_dir=sys.argv[3]))`

func hubScenarios(t *testing.T, h *hubEnv, src string, big int64) {
	o := h.o
	// 1. hf upload of a folder to a new repository (created by the upload).
	before := o.xorbIngestBytes(t)
	h.mustRun(t, h.aliceW, h.hf, "upload", "alice/tiny", src, ".", "--commit-message", "v1")
	sent1 := o.xorbIngestBytes(t) - before
	rev1 := h.mustPy(t, h.aliceR, pyRepoSHA, "alice/tiny")
	if len(rev1) != 40 {
		t.Fatalf("repo_info sha %q", rev1)
	}
	t.Logf("first upload: %d xorb bytes sent for a %d-byte model file and a %d-byte tokenizer", sent1, big, hubTokenizer)

	// An acknowledged commit is durable: SIGKILL the origin and start it again on the same
	// state; main still points at the commit (downloaded below, through the edge).
	if err := h.proc.Kill(); err == nil {
		t.Fatal("the origin exited cleanly on SIGKILL")
	}
	h.proc = testenv.Start(t, o.bin, h.originArgs, serverOptions(h.originEnv, o.url+"/healthz"))
	if got := h.mustPy(t, h.aliceR, pyRepoSHA, "alice/tiny"); got != rev1 {
		t.Fatalf("after kill -9, main is %q, want the acknowledged %s", got, rev1)
	}

	// 2. snapshot_download through the edge, into an empty cache, anonymously (public repo).
	reconBefore := reconRequests(t, o)
	snap := h.mustPy(t, "", pySnapshot, "alice/tiny", "main", t.TempDir())
	if filepath.Base(snap) != rev1 {
		t.Fatalf("snapshot folder %s, want revision %s", snap, rev1)
	}
	sameTree(t, src, snap)
	if got := reconRequests(t, o); got != reconBefore {
		t.Fatalf("the origin answered %v reconstructions during the download: it did not go through the edge", got-reconBefore)
	}

	// The edge's casUrl is HTTPS with a self-signed certificate, trusted the way the README
	// says: SSL_CERT_FILE (hf_xet also reads SSL_CERT_DIR; huggingface_hub's HTTP client the
	// same two). REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE are not read by hf_xet: with the
	// certificate only there (and an empty Xet chunk cache) the download fails, so the download
	// above did verify the edge's certificate.
	h.tlsNotTrusted(t)

	// 3. A second version changing 1 % of the large file uploads little.
	v2 := t.TempDir()
	copyTree(t, src, v2)
	patch := make([]byte, big/100)
	mrand.NewChaCha8([32]byte{7}).Read(patch)
	f, err := os.OpenFile(filepath.Join(v2, "model.safetensors"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(patch, big/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before = o.xorbIngestBytes(t)
	h.mustRun(t, h.aliceW, h.hf, "upload", "alice/tiny", v2, ".", "--commit-message", "v2")
	sent2 := o.xorbIngestBytes(t) - before
	t.Logf("second version (1 %% of %d bytes changed): %d xorb bytes sent (first upload: %d)", big, sent2, sent1)
	if sent2 > big/10 {
		t.Fatalf("the near-duplicate version sent %d xorb bytes, more than 10 %% of %d", sent2, big)
	}
	rev2 := h.mustPy(t, h.aliceR, pyRepoSHA, "alice/tiny")
	if rev2 == rev1 {
		t.Fatal("the second upload did not move main")
	}
	for _, c := range []struct{ rev, want string }{{rev1, src}, {rev2, v2}} {
		dst := t.TempDir()
		h.mustRun(t, "", h.hf, "download", "alice/tiny", "--revision", c.rev, "--local-dir", dst)
		os.RemoveAll(filepath.Join(dst, ".cache"))
		sameTree(t, c.want, dst)
	}

	// 4. Tags and branches pin revisions; deleting a path in a later commit.
	h.mustPy(t, h.aliceW, `import huggingface_hub as h
a = h.HfApi()
import sys
a.create_tag("alice/tiny", tag="v1", revision=sys.argv[1])
a.create_branch("alice/tiny", branch="dev", revision=sys.argv[1])
a.upload_file(path_or_fileobj=b"dev only\n", path_in_repo="DEV.txt", repo_id="alice/tiny", revision="dev")
a.delete_file("config.json", "alice/tiny", commit_message="drop config")
print("ok")`, rev1)
	if got := h.mustPy(t, "", pyRepoSHA, "alice/tiny", "v1"); got != rev1 {
		t.Fatalf("tag v1 resolves to %s, want %s", got, rev1)
	}
	listing := h.mustPy(t, "", `import sys, json, huggingface_hub as h
print(json.dumps({r: sorted(h.list_repo_files("alice/tiny", revision=r)) for r in sys.argv[1:]}))`, "main", "v1", "dev")
	var files map[string][]string
	if err := json.Unmarshal([]byte(listing), &files); err != nil {
		t.Fatalf("listing %q: %v", listing, err)
	}
	all := []string{"config.json", "model.safetensors", "sub/generation_config.json", "tokenizer.json"}
	for rev, want := range map[string][]string{
		"main": {"model.safetensors", "sub/generation_config.json", "tokenizer.json"},
		"v1":   all,
		"dev":  append([]string{"DEV.txt"}, all...),
	} {
		if !slices.Equal(files[rev], want) {
			t.Errorf("files at %s = %v, want %v", rev, files[rev], want)
		}
	}
	out, err := h.py(t, "", `import huggingface_hub as h
h.hf_hub_download("alice/tiny", "config.json", cache_dir=__import__("sys").argv[1])`, t.TempDir())
	if err == nil || !strings.Contains(out, "EntryNotFound") {
		t.Fatalf("config.json after its deletion: err %v, output %s", err, tail(out, 5))
	}

	// 5. hf_hub_download of each file (what from_pretrained does per file; transformers itself
	// is not installed in the test venv, see docs/hub.md).
	for _, name := range all {
		p := h.mustPy(t, "", `import sys, huggingface_hub as h
print(h.hf_hub_download("alice/tiny", sys.argv[1], revision="v1", cache_dir=sys.argv[2]))`, name, t.TempDir())
		sameFile(t, filepath.Join(src, name), p)
	}

	// A client without hf_xet (HF_HUB_DISABLE_XET) gets a Xet file's bytes from a plain GET.
	noXet := h.baseEnv
	h.baseEnv = append(append([]string(nil), noXet...), "HF_HUB_DISABLE_XET=1")
	p := h.mustPy(t, "", `import sys, huggingface_hub as h
print(h.hf_hub_download("alice/tiny", "model.safetensors", revision=sys.argv[1], cache_dir=sys.argv[2]))`, rev2, t.TempDir())
	h.baseEnv = noXet
	sameFile(t, filepath.Join(v2, "model.safetensors"), p)

	// 6. A commit on a stale parent is refused with 412 and changes nothing.
	head := h.mustPy(t, "", pyRepoSHA, "alice/tiny")
	out, err = h.py(t, h.aliceW, `import sys, huggingface_hub as h
h.HfApi().create_commit("alice/tiny", [h.CommitOperationAdd("late.txt", b"late\n")], commit_message="late", parent_commit=sys.argv[1])`, rev1)
	if err == nil || !strings.Contains(out, "412") {
		t.Fatalf("stale-parent commit: err %v, output %s", err, tail(out, 5))
	}
	if got := h.mustPy(t, "", pyRepoSHA, "alice/tiny"); got != head {
		t.Fatalf("main moved from %s to %s after a refused commit", head, got)
	}

	// hf auth (whoami-v2) and a dataset repository.
	if out := h.mustRun(t, h.aliceW, h.hf, "auth", "whoami"); !strings.Contains(out, "alice") {
		t.Fatalf("hf auth whoami: %s", out)
	}
	h.mustRun(t, h.aliceW, h.hf, "upload", "--repo-type", "dataset", "alice/corpus", filepath.Join(src, "tokenizer.json"), "data/train.json")
	p = h.mustPy(t, "", `import sys, huggingface_hub as h
print(h.hf_hub_download("alice/corpus", "data/train.json", repo_type="dataset", cache_dir=sys.argv[1]))`, t.TempDir())
	sameFile(t, filepath.Join(src, "tokenizer.json"), p)

	// Each its own subtest: one failing does not hide the others.
	t.Run("history", func(t *testing.T) { hubHistory(t, h, rev1, rev2) })
	t.Run("ranges", func(t *testing.T) { hubRanges(t, h, v2, rev2) })
	t.Run("lfs", func(t *testing.T) { hubLFS(t, h) })
	t.Run("hfjs", func(t *testing.T) { hubHFJS(t, h) })
	t.Run("transformers", func(t *testing.T) { hubTransformers(t, h) })
	hubPrivate(t, h, src)
	t.Run("revoke", func(t *testing.T) { hubRevoke(t, h) })
	hubBadInput(t, h, head)
}

// tlsNotTrusted downloads a Xet file with the edge's certificate in REQUESTS_CA_BUNDLE and
// CURL_CA_BUNDLE instead of SSL_CERT_FILE: it must fail on the certificate.
func (h *hubEnv) tlsNotTrusted(t *testing.T) {
	t.Helper()
	if !strings.HasPrefix(h.edgeURL, "https://") {
		t.Fatalf("the edge URL %s is not HTTPS", h.edgeURL)
	}
	saved := h.baseEnv
	defer func() { h.baseEnv = saved }()
	var env []string
	for _, kv := range saved {
		if !strings.HasPrefix(kv, "SSL_CERT_FILE=") && !strings.HasPrefix(kv, "HF_XET_CACHE=") {
			env = append(env, kv)
		}
	}
	h.baseEnv = append(env, "REQUESTS_CA_BUNDLE="+h.caFile, "CURL_CA_BUNDLE="+h.caFile,
		"HF_XET_CACHE="+t.TempDir())
	dir := t.TempDir()
	out, err := h.py(t, "", `import sys, huggingface_hub as h
print(h.hf_hub_download("alice/tiny", "tokenizer.json", cache_dir=sys.argv[1]))`, dir)
	if err == nil {
		t.Fatalf("hf_xet downloaded from %s without SSL_CERT_FILE: the certificate was not checked (%s)", h.edgeURL, tail(out, 3))
	}
	// hf_xet reports the failed TLS handshake as a failed request to the edge (the edge logs
	// "unknown certificate authority").
	if !strings.Contains(out, "error sending request for url ("+h.edgeURL+"/") {
		t.Fatalf("the untrusted download failed, but not on its request to the edge %s:\n%s", h.edgeURL, tail(out, 15))
	}
}

// hubPrivate: a private repository reveals nothing to anonymous and foreign tokens, and a read
// token cannot write.
func hubPrivate(t *testing.T, h *hubEnv, src string) {
	h.mustRun(t, h.aliceW, h.hf, "upload", "alice/secret", filepath.Join(src, "config.json"), "config.json", "--private")
	for _, u := range []string{"/api/models/alice/secret", "/api/models/alice/secret/revision/main",
		"/api/models/alice/secret/tree/main", "/alice/secret/resolve/main/config.json",
		"/api/models/alice/secret/xet-read-token/main"} {
		for _, tok := range []string{"", h.bobW} {
			code, body, hdr := httpDo(t, "GET", h.o.url+u, tok, nil)
			ghostCode, ghostBody, _ := httpDo(t, "GET", h.o.url+strings.Replace(u, "secret", "ghost", 1), tok, nil)
			if (code != http.StatusNotFound && code != http.StatusUnauthorized && code != http.StatusForbidden) ||
				ghostCode != code || body != ghostBody {
				t.Errorf("GET %s with token %v: %d %s; a missing repository: %d %s", u, tok != "", code, body, ghostCode, ghostBody)
			}
			if hdr.Get("X-Repo-Commit") != "" {
				t.Errorf("GET %s leaks X-Repo-Commit", u)
			}
		}
	}
	if code, _, _ := httpDo(t, "GET", h.o.url+"/api/models/alice/secret", h.aliceR, nil); code != http.StatusOK {
		t.Fatalf("alice's read token cannot read her private repository: %d", code)
	}
	// Read tokens cannot commit, nor obtain a write token.
	out, err := h.run(t, h.aliceR, h.hf, "upload", "alice/secret", filepath.Join(src, "config.json"), "again.json")
	if err == nil {
		t.Fatalf("a read token committed: %s", tail(out, 5))
	}
	if code, _, _ := httpDo(t, "GET", h.o.url+"/api/models/alice/secret/xet-write-token/main", h.aliceR, nil); code != http.StatusForbidden {
		t.Fatalf("a read token got a write CAS token: %d", code)
	}
	if code, _, _ := httpDo(t, "GET", h.o.url+"/api/models/alice/tiny/xet-write-token/main", h.bobW, nil); code != http.StatusForbidden {
		t.Fatalf("bob got a write CAS token for alice's repository: %d", code)
	}
	if code, _, _ := httpDo(t, "GET", h.o.url+"/api/models/alice/tiny/xet-write-token/main", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("anonymous write CAS token: %d", code)
	}
	// The read token's casUrl is the edge, the write token's the origin.
	_, _, hdr := httpDo(t, "GET", h.o.url+"/api/models/alice/tiny/xet-read-token/main", "", nil)
	if hdr.Get("X-Xet-Cas-Url") != h.edgeURL {
		t.Fatalf("read casUrl %q, want the edge %s", hdr.Get("X-Xet-Cas-Url"), h.edgeURL)
	}
	_, _, hdr = httpDo(t, "GET", h.o.url+"/api/models/alice/tiny/xet-write-token/main", h.aliceW, nil)
	if hdr.Get("X-Xet-Cas-Url") != h.o.url {
		t.Fatalf("write casUrl %q, want the origin %s", hdr.Get("X-Xet-Cas-Url"), h.o.url)
	}
}

// hubBadInput: malformed input gets a 4xx in the Hub's error shape and changes nothing.
func hubBadInput(t *testing.T, h *hubEnv, head string) {
	u := h.o.url
	ndjson := func(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }
	hdr := `{"key":"header","value":{"summary":"bad"}}`
	file := func(path string) string {
		b, _ := json.Marshal(map[string]any{"key": "file", "value": map[string]any{"path": path, "content": "eA==", "encoding": "base64"}})
		return string(b)
	}
	big := bytes.Repeat([]byte("A"), (1<<20)+10)
	bigLine, _ := json.Marshal(map[string]any{"key": "file", "value": map[string]any{"path": "big.bin", "content": string(big), "encoding": "utf-8"}})
	commit := u + "/api/models/alice/tiny/commit/main"
	cases := []struct {
		name, method, url string
		body              []byte
		want              int
	}{
		{"repo id with three parts", "GET", u + "/api/models/a/b/c/revision/main", nil, 404},
		{"repo id with ..", "POST", u + "/api/repos/create", []byte(`{"name":"..","organization":"alice"}`), 400},
		{"repo id with a space", "POST", u + "/api/repos/create", []byte(`{"name":"a b","organization":"alice"}`), 400},
		{"repo id too long", "POST", u + "/api/repos/create", []byte(`{"name":"` + strings.Repeat("a", 200) + `","organization":"alice"}`), 400},
		{"create body not JSON", "POST", u + "/api/repos/create", []byte(`{name`), 400},
		{"unknown revision", "GET", u + "/api/models/alice/tiny/revision/nope", nil, 404},
		{"unknown revision resolve", "HEAD", u + "/alice/tiny/resolve/nope/config.json", nil, 404},
		{"resolve ..", "GET", u + "/alice/tiny/resolve/main/sub/%2E%2E/tokenizer.json", nil, 400},
		{"path with ..", "POST", commit, ndjson(hdr, file("a/../b")), 400},
		{"absolute path", "POST", commit, ndjson(hdr, file("/etc/passwd")), 400},
		{"path with NUL", "POST", commit, ndjson(hdr, file("a\x00b")), 400},
		{"file inside a file", "POST", commit, ndjson(hdr, file("tokenizer.json/x")), 400},
		{"not NDJSON", "POST", commit, []byte("this is not json\n"), 400},
		{"JSON array body", "POST", commit, []byte(`[{"key":"header"}]`), 400},
		{"no header first", "POST", commit, ndjson(file("x.txt"), hdr), 400},
		{"empty body", "POST", commit, nil, 400},
		{"unknown operation", "POST", commit, ndjson(hdr, `{"key":"rm -rf","value":{"path":"x"}}`), 400},
		{"unknown sha256", "POST", commit, ndjson(hdr, `{"key":"lfsFile","value":{"path":"w.bin","algo":"sha256","oid":"`+strings.Repeat("ab", 32)+`","size":5}}`), 400},
		{"bad sha256", "POST", commit, ndjson(hdr, `{"key":"lfsFile","value":{"path":"w.bin","algo":"sha256","oid":"xyz"}}`), 400},
		{"oversized inline file", "POST", commit, ndjson(hdr, string(bigLine)), 413},
		{"delete a missing file", "POST", commit, ndjson(hdr, `{"key":"deletedFile","value":{"path":"nope.txt"}}`), 404},
		{"commit to a tag", "POST", u + "/api/models/alice/tiny/commit/v1", ndjson(hdr, file("x.txt")), 404},
		{"bad tree cursor", "GET", u + "/api/models/alice/tiny/tree/main?cursor=-4", nil, 400},
		{"bad tag name", "POST", u + "/api/models/alice/tiny/tag/main", []byte(`{"tag":"../x"}`), 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body, hd := httpDo(t, c.method, c.url, h.aliceW, c.body)
			if code != c.want {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.url, code, body, c.want)
			}
			if c.method != "HEAD" {
				var e struct {
					Error string `json:"error"`
				}
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
					t.Fatalf("body %q is not the Hub's {\"error\": ...}", body)
				}
			}
			if hd.Get("X-Error-Message") == "" {
				t.Fatalf("no X-Error-Message")
			}
		})
	}
	if got := h.mustPy(t, "", pyRepoSHA, "alice/tiny"); got != head {
		t.Fatalf("main moved from %s to %s after refused commits", head, got)
	}

	// A large tree is listed in pages (Link rel="next"); the client follows them.
	var lines []string
	lines = append(lines, hdr)
	const n = 2345
	for i := range n {
		lines = append(lines, file(fmt.Sprintf("many/f%05d.txt", i)))
	}
	if code, body, _ := httpDo(t, "POST", commit, h.aliceW, ndjson(lines...)); code != 200 {
		t.Fatalf("commit of %d files: %d %s", n, code, body)
	}
	_, _, hd := httpDo(t, "GET", u+"/api/models/alice/tiny/tree/main/many", "", nil)
	if !strings.Contains(hd.Get("Link"), `rel="next"`) {
		t.Fatalf("no next page for %d entries: Link %q", n, hd.Get("Link"))
	}
	got := h.mustPy(t, "", `import huggingface_hub as h
print(sum(1 for f in h.HfApi().list_repo_tree("alice/tiny", path_in_repo="many", recursive=True)))`)
	if got != fmt.Sprint(n) {
		t.Fatalf("list_repo_tree listed %s entries, want %d", got, n)
	}
}

// httpDo sends one request; body nil = none.
func httpDo(t *testing.T, method, url, token string, body []byte) (int, string, http.Header) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// reconRequests counts the origin's reconstruction answers (all versions and batch).
func reconRequests(t *testing.T, o *origin) float64 {
	var n float64
	for route, v := range o.requests(t) {
		if strings.Contains(route, "reconstructions") {
			n += v
		}
	}
	return n
}

// writeRandom writes n random bytes to path, 1 MiB at a time.
func writeRandom(t *testing.T, path string, n int64, rng *mrand.ChaCha8) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rng, n); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// files lists the regular files under dir (following symlinks, as the HF cache uses them).
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func sameTree(t *testing.T, want, got string) {
	t.Helper()
	wf, gf := files(t, want), files(t, got)
	if !slices.Equal(wf, gf) {
		t.Fatalf("files %v, want %v", gf, wf)
	}
	for _, f := range wf {
		sameFile(t, filepath.Join(want, f), filepath.Join(got, f))
	}
}

// sameFile compares two files 1 MiB at a time (the model file is 300 MiB).
func sameFile(t *testing.T, want, got string) {
	t.Helper()
	a, err := os.Open(want)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Open(got)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; {
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			t.Fatalf("%s differs from %s in the MiB at offset %d (%d vs %d bytes read)", got, want, off, nb, na)
		}
		off += int64(na)
		if ea != nil || eb != nil {
			if (ea == io.EOF || ea == io.ErrUnexpectedEOF) && (eb == io.EOF || eb == io.ErrUnexpectedEOF) {
				return
			}
			t.Fatalf("comparing %s with %s: %v / %v", got, want, ea, eb)
		}
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	for _, f := range files(t, src) {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dst, f), b)
	}
}
