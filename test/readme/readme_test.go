//go:build unix

// Package readme runs the README's client sections as a newcomer would: scripts/run.sh (what
// `make run` runs) on the real binaries, its printed exports pasted into a shell, then each
// section's files and commands, read from README.md: "Use it with the stock clients" with hf_xet
// and huggingface.js (issue 14), "Use it from huggingface_hub" with the hf CLI and
// snapshot_download (issue 16).
package readme

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

const (
	readmePath   = "../../README.md"
	stockSection = "## Use it with the stock clients"
	hubSection   = "## Use it from huggingface_hub"
	// exportsWait bounds run.sh's start (build excluded): the origin and the edge on loopback.
	exportsWait = 90 * time.Second
	// commandsWait bounds a section's commands: at most two uploads and six downloads of 3 MB.
	commandsWait = 4 * time.Minute
	// hubInlineMax is the origin's default hub.inline_max (docs/hub.md): larger files are Xet
	// files, downloaded from the edge.
	hubInlineMax = 1 << 20
)

// wantExports are the variables run.sh prints and the README's commands use.
var wantExports = []string{"XETCDN_ORIGIN", "XETCDN_EDGE", "XETCDN_EDGE_TLS", "XETCDN_CA", "XETCDN_REPO", "XETCDN_TOKEN"}

// block is a fenced code block of the README section with the marker comment before it:
// <!-- readme-test: KIND [ARG] -->. KIND is exports, install (versions checked), file (written
// as ARG), run (run in order, in one bash) or optional (not run: it needs the Python package ARG,
// which the test venv does not have).
type block struct {
	kind, arg, body string
}

// sectionBlocks returns the marked code blocks of the README section, in order.
func sectionBlocks(t *testing.T, readme, section string) []block {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n"+section+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", section)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	re := regexp.MustCompile("(?s)<!-- readme-test: ([a-z]+) ?([^ ]*) -->\n```[a-z]*\n(.*?)```")
	var out []block
	for _, m := range re.FindAllStringSubmatch(rest, -1) {
		out = append(out, block{kind: m[1], arg: m[2], body: m[3]})
	}
	if n := strings.Count(rest, "<!-- readme-test:"); n != len(out) {
		t.Fatalf("README section: %d readme-test markers, %d of them before a fenced block", n, len(out))
	}
	return out
}

func byKind(bs []block, kind string) []block {
	var out []block
	for _, b := range bs {
		if b.kind == kind {
			out = append(out, b)
		}
	}
	return out
}

// TestReadmeTop: the README still opens with its two commands.
func TestReadmeTop(t *testing.T) {
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "```sh\n")
	lines := strings.SplitN(rest, "\n", 3)
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "make run ") || !strings.HasPrefix(lines[1], "make test ") {
		t.Fatalf("the README's first code block does not start with `make run` and `make test`: %q", lines)
	}
}

// TestReadme starts scripts/run.sh once on the real binaries, checks the exports it prints
// (every variable the README names, a working token command, a certificate that the edge's TLS
// listener presents), then runs each client section of the README against it with those
// exports pasted.
func TestReadme(t *testing.T) {
	python := testenv.Require(t, testenv.Python)
	nodeDir := testenv.Require(t, testenv.NodeModules)
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	run := startRun(t)
	env := checkExports(t, run.exports)
	t.Run("stock_clients", func(t *testing.T) { testStockClients(t, readme, run, env, python, nodeDir) })
	t.Run("huggingface_hub", func(t *testing.T) { testHub(t, readme, run, env, python) })
}

// testStockClients writes the README's files and runs its commands: hf_xet and huggingface.js,
// uploads to the origin, downloads through the edge over plain HTTP and over TLS, every byte
// compared.
func testStockClients(t *testing.T, readme string, run started, env []string, python, nodeDir string) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	blocks := sectionBlocks(t, readme, stockSection)
	for _, kind := range []string{"exports", "install", "file", "run"} {
		if len(byKind(blocks, kind)) == 0 {
			t.Fatalf("README section has no %q block", kind)
		}
	}
	checkInstallVersions(t, byKind(blocks, "install"), python, nodeDir)
	readmeExports := exportNames(byKind(blocks, "exports")[0].body)
	if !slices.Equal(readmeExports, wantExports) {
		t.Errorf("README exports %q, want %q", readmeExports, wantExports)
	}
	// The working directory a user would have: the README's files, the clients' modules, the
	// upload driver where the README says it is, and a file to send.
	work := t.TempDir()
	mods := filepath.Join(nodeDir, "node_modules")
	for _, b := range byKind(blocks, "file") {
		if err := os.WriteFile(filepath.Join(work, b.arg), []byte(b.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	driverDir := filepath.Join(work, "test", "interop")
	if err := os.MkdirAll(driverDir, 0o755); err != nil {
		t.Fatal(err)
	}
	driver, err := os.ReadFile("../interop/hfjs_driver.mjs")
	if err != nil {
		t.Fatal(err)
	}
	for dir, link := range map[string]string{work: mods, driverDir: mods} {
		if err := os.Symlink(link, filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(driverDir, "hfjs_driver.mjs"), driver, 0o644); err != nil {
		t.Fatal(err)
	}
	model := make([]byte, 3<<20+12345)
	for i := range model {
		model[i] = byte(i*7919 + i>>9) // several chunks, not all alike
	}
	if err := os.WriteFile(filepath.Join(work, "model.safetensors"), model, 0o644); err != nil {
		t.Fatal(err)
	}

	runBlocks(t, work, run.exports, byKind(blocks, "run"), append(env,
		"PATH="+filepath.Dir(python)+string(os.PathListSeparator)+filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+t.TempDir(),
		"HF_XET_CACHE="+t.TempDir()))
	for _, f := range []string{"model.safetensors.out", "js.out", "tls.out"} {
		got, err := os.ReadFile(filepath.Join(work, f))
		if err != nil || string(got) != string(model) {
			t.Errorf("%s: not the uploaded bytes (%v)", f, err)
		}
	}
}

// testHub runs the huggingface_hub section from the repository root a user would have (bin/ and
// .cache/run are run.sh's): a user and a token made by the admin commands, hf auth whoami, hf
// upload of a folder the section creates, hf download of it, snapshot_download. It checks the
// downloaded folder and the snapshot hold the uploaded bytes, the snapshot is the repository's
// head commit, and the Xet file came from the edge over plain HTTP (no certificate configured).
// The optional block (from_pretrained, which needs transformers) is not run.
func testHub(t *testing.T, readme string, run started, env []string, python string) {
	blocks := sectionBlocks(t, readme, hubSection)
	for _, kind := range []string{"install", "run", "optional"} {
		if len(byKind(blocks, kind)) == 0 {
			t.Fatalf("README section has no %q block", kind)
		}
	}
	checkPipVersions(t, byKind(blocks, "install")[0].body, python)
	for _, b := range byKind(blocks, "optional") {
		if b.arg == "" {
			t.Errorf("an optional block names no package:\n%s", b.body)
		}
		t.Logf("not run (optional, needs %s):\n%s", b.arg, b.body)
	}
	var text strings.Builder
	for _, b := range byKind(blocks, "run") {
		text.WriteString(b.body)
	}
	up := regexp.MustCompile(`(?m)^hf upload (\S+) (\S+) \.`).FindStringSubmatch(text.String())
	down := regexp.MustCompile(`(?m)^hf download (\S+) --local-dir (\S+)`).FindStringSubmatch(text.String())
	if up == nil || down == nil || down[1] != up[1] {
		t.Fatalf("the section has no `hf upload REPO FOLDER .` and `hf download REPO --local-dir DIR` of one REPO:\n%s", text.String())
	}
	repo, folder, copyDir := up[1], up[2], down[2]

	// The repository root: the binaries and the data directory run.sh uses, where the README's
	// relative paths (bin/xet-origin, .cache/run/origin) find them.
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin": run.bin, ".cache/run": run.data} {
		if err := os.Symlink(target, filepath.Join(work, link)); err != nil {
			t.Fatal(err)
		}
	}
	var hubEnv []string
	for _, kv := range env { // nothing of the caller's Hub or TLS set-up
		if !strings.HasPrefix(kv, "HF_") && !strings.HasPrefix(kv, "SSL_CERT_") &&
			!strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
			hubEnv = append(hubEnv, kv)
		}
	}
	home := t.TempDir()
	edgeBefore := dirBytes(t, filepath.Join(run.data, "edge", "xorbs"))
	out := runBlocks(t, work, run.exports, byKind(blocks, "run"), append(hubEnv,
		"PATH="+filepath.Dir(python)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home,
		// The harness's, not the README's: no calls to the public Hub or the package index.
		"HF_HUB_DISABLE_UPDATE_CHECK=1", "HF_HUB_DISABLE_TELEMETRY=1", "HF_HUB_DISABLE_PROGRESS_BARS=1"))

	uploaded := folderFiles(t, filepath.Join(work, folder))
	var xetBytes int64
	for _, b := range uploaded {
		if len(b) > hubInlineMax {
			xetBytes += int64(len(b))
		}
	}
	if len(uploaded) < 2 || xetBytes == 0 {
		t.Errorf("%s holds %d files, %d bytes of them in files above %d: want a few files and a Xet file", folder, len(uploaded), xetBytes, hubInlineMax)
	}
	sameFiles(t, "hf download --local-dir "+copyDir, folderFiles(t, filepath.Join(work, copyDir)), uploaded)

	// snapshot_download's folder: the one snapshot of the repository in the cache, named by the
	// head commit the origin reports, printed by the README's command.
	ns, name, _ := strings.Cut(repo, "/")
	snaps, err := filepath.Glob(filepath.Join(home, ".cache", "huggingface", "hub", "models--"+ns+"--"+name, "snapshots", "*"))
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots of %s in the cache: %q (%v), want one", repo, snaps, err)
	}
	if !strings.Contains(string(out), snaps[0]+"\n") {
		t.Errorf("the README's commands did not print the snapshot folder %s:\n%s", snaps[0], out)
	}
	var info struct{ Sha string }
	getJSON(t, run.origin+"/api/models/"+repo, &info)
	if info.Sha == "" || filepath.Base(snaps[0]) != info.Sha {
		t.Errorf("snapshot %s, want the head commit %q of %s", snaps[0], info.Sha, repo)
	}
	sameFiles(t, "snapshot_download", folderFiles(t, snaps[0]), uploaded)

	// The Xet file came through the edge: its cache grew by at least the file's bytes (the
	// README's file is random, so it does not compress), without SSL_CERT_FILE: plain HTTP.
	if grown := dirBytes(t, filepath.Join(run.data, "edge", "xorbs")) - edgeBefore; grown < xetBytes {
		t.Errorf("the edge's cache grew by %d bytes, want at least the %d of the Xet files", grown, xetBytes)
	}
}

// runBlocks runs the blocks' commands in one bash in dir, after the exports, with env, bounded
// by commandsWait, and returns their output; a failing command fails the test.
func runBlocks(t *testing.T, dir, exports string, blocks []block, env []string) []byte {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -euo pipefail\n" + exports + "\n")
	for _, b := range blocks {
		script.WriteString(b.body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), commandsWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = dir
	// A failure shows in seconds rather than after hf_xet's default retries (minutes).
	cmd.Env = append(env, "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS=2", "HF_XET_CLIENT_RETRY_BASE_DELAY=200ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands failed after %v: %v\n%s", time.Since(start).Round(time.Millisecond), err, out)
	}
	t.Logf("the README's commands took %v", time.Since(start).Round(time.Millisecond))
	return out
}

// folderFiles reads every file under dir (following symlinks, as the snapshot's point into the
// cache's blobs), by slash path, skipping the top-level .cache (hf download's bookkeeping).
func folderFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel == ".cache" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	return files
}

// sameFiles fails unless got holds exactly want's paths with want's bytes.
func sameFiles(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	for p, b := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: %s is missing", what, p)
		} else if string(g) != string(b) {
			t.Errorf("%s: %s differs (%d bytes, want %d)", what, p, len(g), len(b))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: %s was not uploaded", what, p)
		}
	}
}

// dirBytes is the size of the regular files under dir (0 if it does not exist yet).
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return n
}

// getJSON decodes the answer of an anonymous GET url (bounded to 10 s) into v; anything but a
// 200 with JSON fails the test.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d (%v)", url, resp.StatusCode, err)
	}
}

// checkPipVersions: the pinned pip packages of an install block are the versions python has.
func checkPipVersions(t *testing.T, text, python string) {
	t.Helper()
	pins := regexp.MustCompile(`([A-Za-z0-9_.-]+)==(\S+)`).FindAllStringSubmatch(text, -1)
	if len(pins) == 0 {
		t.Fatalf("README install block pins no version:\n%s", text)
	}
	for _, m := range pins {
		have := testenv.Run(t, python, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", m[1])
		if have != m[2] {
			t.Errorf("README installs %s %s, the tests run %s", m[1], m[2], have)
		}
	}
}

// checkInstallVersions: the versions the README installs are the ones this test runs.
func checkInstallVersions(t *testing.T, install []block, python, nodeDir string) {
	t.Helper()
	text := install[0].body
	m := regexp.MustCompile(`hf_xet==(\S+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("README install block pins no hf_xet version:\n%s", text)
	}
	have := testenv.Run(t, python, "-c", "import importlib.metadata as m; print(m.version('hf_xet'))")
	if have != m[1] {
		t.Errorf("README installs hf_xet %s, the tests run %s", m[1], have)
	}
	m = regexp.MustCompile(`@huggingface/hub@(\S+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("README install block pins no @huggingface/hub version:\n%s", text)
	}
	b, err := os.ReadFile(filepath.Join(nodeDir, "node_modules", "@huggingface", "hub", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct{ Version string }
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Version != m[1] {
		t.Errorf("README installs @huggingface/hub %s, the tests run %s", m[1], pkg.Version)
	}
}

// started is a running scripts/run.sh.
type started struct {
	exports   string // the export lines it printed
	bin, data string // XETCDN_BIN and XETCDN_RUN_DIR
	origin    string // the origin's URL
}

// startRun builds the origin and the edge, starts scripts/run.sh on free ports and returns once
// both answer and it has printed its export lines on stdout. The script and its servers stop
// when the test ends.
func startRun(t *testing.T) started {
	t.Helper()
	bin, data, origin := t.TempDir(), t.TempDir(), testenv.FreeAddr(t)
	for _, name := range []string{"xet-origin", "xet-edge"} {
		if err := os.Symlink(testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/"+name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "../../scripts/run.sh")
	cmd.Env = append(os.Environ(), "XETCDN_BIN="+bin, "XETCDN_RUN_DIR="+data,
		"ORIGIN_LISTEN="+origin, "ORIGIN_ADMIN_LISTEN="+testenv.FreeAddr(t),
		"EDGE_LISTEN="+testenv.FreeAddr(t), "EDGE_HTTP_LISTEN="+testenv.FreeAddr(t))
	var stderr testenv.SyncBuffer // read below while os/exec still copies into it
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		// run.sh stops its servers on SIGTERM; the group kill is for a script that hangs.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	lines := make(chan string, len(wantExports))
	go func() {
		sc := bufio.NewScanner(stdout)
		for n := 0; sc.Scan(); n++ {
			if n < len(wantExports) { // the rest of stdout is read and dropped
				lines <- sc.Text()
			}
		}
		close(lines)
		_ = cmd.Wait()
		close(done)
	}()
	var got []string
	timeout := time.After(exportsWait)
	for len(got) < len(wantExports) {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("run.sh stopped after printing %q\n%s", got, stderr.String())
			}
			got = append(got, l)
		case <-timeout:
			t.Fatalf("run.sh printed %q in %v, want %d export lines\n%s", got, exportsWait, len(wantExports), stderr.String())
		}
	}
	return started{exports: strings.Join(got, "\n"), bin: bin, data: data, origin: "http://" + origin}
}

// exportNames lists the variables of the `export NAME=…` lines of text, in order.
func exportNames(text string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^export ([A-Z_]+)=`).FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	return names
}

// checkExports evaluates the exports in bash and checks what each names: the endpoints answer,
// the certificate is the one the edge's TLS listener presents, the token command mints a token.
// It returns the exported variables as environment entries.
func checkExports(t *testing.T, exports string) []string {
	t.Helper()
	if names := exportNames(exports); !slices.Equal(names, wantExports) {
		t.Fatalf("run.sh exports %q, want %q:\n%s", names, wantExports, exports)
	}
	out, err := exec.Command("bash", "-c", "set -euo pipefail\n"+exports+"\nenv -0").Output()
	if err != nil {
		t.Fatalf("the exports do not run in bash: %v\n%s", err, exports)
	}
	vars := map[string]string{}
	for kv := range strings.SplitSeq(string(out), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "XETCDN_") {
			vars[k] = v
		}
	}
	if tok := vars["XETCDN_TOKEN"]; strings.Count(tok, ".") != 2 {
		t.Errorf("XETCDN_TOKEN=%q: the token command printed no token", tok)
	}
	for _, v := range []string{"XETCDN_ORIGIN", "XETCDN_EDGE"} {
		if code := get(t, http.DefaultClient, vars[v]+"/healthz"); code != http.StatusOK {
			t.Errorf("%s/healthz: status %d", vars[v], code)
		}
	}
	// The README's plain-HTTP downloads reach the edge because the read-token route names it.
	route := vars["XETCDN_ORIGIN"] + "/api/" + vars["XETCDN_REPO"] + "/xet-read-token/main"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, route, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+vars["XETCDN_TOKEN"])
	var answer struct {
		CasURL string `json:"casUrl"`
	}
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Errorf("GET %s: %v", route, err)
	} else {
		err := json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || answer.CasURL != vars["XETCDN_EDGE"] {
			t.Errorf("GET %s with XETCDN_TOKEN: status %d, casUrl %q (%v); want 200 and XETCDN_EDGE %s",
				route, resp.StatusCode, answer.CasURL, err, vars["XETCDN_EDGE"])
		}
	}
	pem, err := os.ReadFile(vars["XETCDN_CA"])
	if err != nil {
		t.Fatalf("XETCDN_CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("XETCDN_CA=%s holds no PEM certificate", vars["XETCDN_CA"])
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code := get(t, trusting, vars["XETCDN_EDGE_TLS"]+"/healthz"); code != http.StatusOK {
		t.Errorf("%s/healthz trusting only XETCDN_CA: status %d", vars["XETCDN_EDGE_TLS"], code)
	}
	env := os.Environ()
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// get returns the status of GET url, bounded to 10 s; a transport error fails the test.
func get(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
