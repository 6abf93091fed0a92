//go:build unix

// Package readme runs the README's "Use it with the stock clients" section as a newcomer would:
// scripts/run.sh (what `make run` runs) on the real binaries, its printed exports pasted into a
// shell, then the section's files and commands, read from README.md, with the stock clients
// hf_xet and huggingface.js (issue 14).
package readme

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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
	readmePath = "../../README.md"
	section    = "## Use it with the stock clients"
	// exportsWait bounds run.sh's start (build excluded): the origin and the edge on loopback.
	exportsWait = 90 * time.Second
	// commandsWait bounds the section's commands: two uploads and six downloads of 3 MB.
	commandsWait = 4 * time.Minute
)

// wantExports are the variables run.sh prints and the README's commands use.
var wantExports = []string{"XETCDN_ORIGIN", "XETCDN_EDGE", "XETCDN_EDGE_TLS", "XETCDN_CA", "XETCDN_REPO", "XETCDN_TOKEN"}

// block is a fenced code block of the README section with the marker comment before it:
// <!-- readme-test: KIND [ARG] -->.
type block struct {
	kind, arg, body string
}

// sectionBlocks returns the marked code blocks of the README section, in order.
func sectionBlocks(t *testing.T, readme string) []block {
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

// TestReadmeStockClients starts scripts/run.sh on the real binaries, checks the exports it
// prints (every variable the README names, a working token command, a certificate that the edge's
// TLS listener presents), then writes the README's files and runs its commands with those
// exports: hf_xet and huggingface.js, uploads to the origin, downloads through the edge over
// plain HTTP and over TLS, every byte compared.
func TestReadmeStockClients(t *testing.T) {
	python := testenv.Require(t, testenv.Python)
	nodeDir := testenv.Require(t, testenv.NodeModules)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	blocks := sectionBlocks(t, string(raw))
	for _, kind := range []string{"exports", "install", "file", "run"} {
		if len(byKind(blocks, kind)) == 0 {
			t.Fatalf("README section has no %q block", kind)
		}
	}
	checkInstallVersions(t, byKind(blocks, "install"), python, nodeDir)

	exports := startRun(t)
	readmeExports := exportNames(byKind(blocks, "exports")[0].body)
	if !slices.Equal(readmeExports, wantExports) {
		t.Errorf("README exports %q, want %q", readmeExports, wantExports)
	}
	env := checkExports(t, exports)

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

	var script strings.Builder
	script.WriteString("set -euo pipefail\n" + exports + "\n")
	for _, b := range byKind(blocks, "run") {
		script.WriteString(b.body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), commandsWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(env,
		"PATH="+filepath.Dir(python)+string(os.PathListSeparator)+filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+t.TempDir(),
		"HF_XET_CACHE="+t.TempDir(),
		// A failure shows in seconds rather than after hf_xet's default retries (minutes).
		"HF_XET_CLIENT_RETRY_MAX_ATTEMPTS=2", "HF_XET_CLIENT_RETRY_BASE_DELAY=200ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands failed after %v: %v\n%s", time.Since(start).Round(time.Millisecond), err, out)
	}
	t.Logf("the README's commands took %v", time.Since(start).Round(time.Millisecond))
	for _, f := range []string{"model.safetensors.out", "js.out", "tls.out"} {
		got, err := os.ReadFile(filepath.Join(work, f))
		if err != nil || string(got) != string(model) {
			t.Errorf("%s: not the uploaded bytes (%v)", f, err)
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

// startRun builds the origin and the edge, starts scripts/run.sh on free ports and returns the
// export lines it prints on stdout once both answer. The script and its servers stop when the
// test ends.
func startRun(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, name := range []string{"xet-origin", "xet-edge"} {
		if err := os.Symlink(testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/"+name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "../../scripts/run.sh")
	cmd.Env = append(os.Environ(), "XETCDN_BIN="+bin, "XETCDN_RUN_DIR="+t.TempDir(),
		"ORIGIN_LISTEN="+testenv.FreeAddr(t), "ORIGIN_ADMIN_LISTEN="+testenv.FreeAddr(t),
		"EDGE_LISTEN="+testenv.FreeAddr(t), "EDGE_HTTP_LISTEN="+testenv.FreeAddr(t))
	var stderr strings.Builder
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
	return strings.Join(got, "\n")
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
