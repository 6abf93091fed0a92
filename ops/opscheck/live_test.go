package opscheck

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"go.yaml.in/yaml/v3"
)

// repoRoot is the module root seen from this package's directory (go test runs tests there).
const repoRoot = "../.."

// buildBinaries builds xet-origin, xet-edge and xet.
func buildBinaries(t *testing.T) (origin, edge, cli string) {
	t.Helper()
	return testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin"),
		testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-edge"),
		testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet")
}

// freeAddr is testenv.FreeAddr (deploy_test.go uses it too).
func freeAddr(t *testing.T) string { return testenv.FreeAddr(t) }

func request(t *testing.T, method, url, token string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func scrape(t *testing.T, admin string, into map[string]bool) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %s", admin, resp.Status)
	}
	names, err := ExposedNames(resp.Body)
	if err != nil {
		t.Fatalf("%s/metrics: %v", admin, err)
	}
	maps.Copy(into, names)
}

// liveNames runs an origin (on the embedded example configuration), an edge in front of it and
// an edge whose origin is down, drives enough traffic that every labelled metric has a series
// (upload, re-upload, telemetry, downloads through the edge, bad requests, unreachable origin),
// and returns the union of the metric names the three admin listeners expose.
func liveNames(t *testing.T) map[string]bool {
	originBin, edgeBin, cli := buildBinaries(t)
	odir, tmp := t.TempDir(), t.TempDir()
	cfg := relocateConfig(t, filepath.Join(repoRoot, "deploy/config/origin-embedded.json"), tmp)
	oaddr, oadmin := freeAddr(t), freeAddr(t)
	testenv.Start(t, originBin, []string{"--config", cfg, "--data-dir", odir,
		"--listen", oaddr, "--admin-listen", oadmin, "--public-url", "http://" + oaddr},
		testenv.Options{Ready: `"msg":"xet-origin serving"`})
	origin := "http://" + oaddr
	const scope = "models/opscheck/live"
	write := testenv.Run(t, originBin, "token", "--data-dir", odir, "--scope", scope, "--access", "write")
	read := testenv.Run(t, originBin, "token", "--data-dir", odir, "--scope", scope, "--access", "read")
	edgeTok := testenv.Run(t, originBin, "token", "--data-dir", odir, "--access", "edge")

	// Several chunks, two uploads: inserted and existing xorbs and shards, dedup queries.
	data := make([]byte, 3<<20)
	rand.Read(data)
	file := filepath.Join(tmp, "payload.bin")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var up struct {
		FileHash string `json:"file_hash"`
	}
	for range 2 {
		out := testenv.Run(t, cli, "upload", "--endpoint", origin, "--token", write, file)
		if err := json.Unmarshal([]byte(out), &up); err != nil || up.FileHash == "" {
			t.Fatalf("xet upload printed %q: %v", out, err)
		}
	}
	for _, ev := range []string{"xet_upload_summary", "something_else"} {
		body := fmt.Sprintf(`{"event":%q,"session_id":"s","time":"2025-01-01T00:00:00Z"}`, ev)
		if code := request(t, "POST", origin+"/v1/telemetry", read, []byte(body)); code != http.StatusOK {
			t.Fatalf("telemetry %s: %d", ev, code)
		}
	}
	request(t, "GET", origin+"/v1/reconstructions/"+up.FileHash, read, nil)
	request(t, "GET", origin+"/v2/reconstructions/"+up.FileHash, read, nil)
	request(t, "GET", origin+"/v1/reconstructions/not-a-hash", read, nil)

	// An edge in front of the origin, downloading through it (reconstruction, metadata and data
	// cache fills, transfers), and an edge that proxies everything (permits 0: fallbacks).
	edgeAdmin := startEdge(t, edgeBin, origin, edgeTok, "64")
	edgeHTTP := edgeAdmin.http
	out := filepath.Join(tmp, "download.bin")
	for range 2 {
		testenv.Run(t, cli, "download", "--endpoint", "http://"+edgeHTTP, "--token", read, "--hash", up.FileHash,
			"--size", fmt.Sprint(len(data)), "-o", out)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("download through the edge differs from the upload (err %v)", err)
	}
	request(t, "HEAD", "http://"+edgeHTTP+"/v1/files/"+up.FileHash, read, nil)
	proxy := startEdge(t, edgeBin, origin, edgeTok, "0")
	request(t, "GET", "http://"+proxy.http+"/v2/reconstructions/"+up.FileHash, read, nil)
	// An edge whose origin does not answer: origin errors and failed key fetches.
	down := startEdge(t, edgeBin, "http://"+freeAddr(t), edgeTok, "64")
	request(t, "GET", "http://"+down.http+"/v2/reconstructions/"+up.FileHash, read, nil)

	names := map[string]bool{}
	for _, admin := range []string{oadmin, edgeAdmin.admin, proxy.admin, down.admin} {
		scrape(t, admin, names)
	}
	return names
}

type edgeAddrs struct{ http, admin string }

func startEdge(t *testing.T, bin, origin, token, permits string) edgeAddrs {
	t.Helper()
	a := edgeAddrs{http: freeAddr(t), admin: freeAddr(t)}
	testenv.Start(t, bin, []string{"--origin", origin, "--data-dir", t.TempDir(), "--listen", freeAddr(t),
		"--http-listen", a.http, "--admin-listen", a.admin, "--public-url", "http://" + a.http, "--permits", permits},
		testenv.Options{Env: []string{"XETCDN_EDGE_ORIGIN_TOKEN=" + token}, Ready: `"msg":"xet-edge serving"`})
	return a
}

// TestOpsMetricsExist fails when a dashboard or an alert rule refers to a metric that the real
// binaries do not expose, or when an alert lacks a runbook.
func TestOpsMetricsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	exposed := liveNames(t)
	for _, must := range []string{"xet_origin_http_requests_total", "xet_edge_http_requests_total"} {
		if !exposed[must] {
			t.Fatalf("scrape found no %s; the traffic driver is broken", must)
		}
	}
	used := map[string][]string{} // metric -> files using it
	check := func(file string, refs []string) {
		if len(refs) == 0 {
			t.Errorf("%s names no metric at all", file)
		}
		for _, r := range refs {
			used[r] = append(used[r], file)
			if !exposed[r] {
				t.Errorf("%s refers to %s, which neither binary exposes", file, r)
			}
		}
	}
	dashboards, _ := filepath.Glob(filepath.Join(repoRoot, "ops/dashboards/*.json"))
	if len(dashboards) == 0 {
		t.Fatal("no dashboards found")
	}
	for _, f := range dashboards {
		check(rel(f), dashboardRefs(t, f))
	}
	rules, _ := filepath.Glob(filepath.Join(repoRoot, "ops/alerts/*.yml"))
	if len(rules) == 0 {
		t.Fatal("no alert rules found")
	}
	for _, f := range rules {
		var refs []string
		for _, r := range loadRules(t, f) {
			refs = append(refs, MetricRefs(r.Expr)...)
		}
		check(rel(f), refs)
	}
	var unused []string
	for n := range exposed {
		if strings.HasPrefix(n, "xet_") && used[n] == nil && !strings.HasSuffix(n, "_sum") {
			unused = append(unused, n)
		}
	}
	slices.Sort(unused)
	t.Logf("%d exposed xet_* series names are on no dashboard or alert: %s", len(unused), strings.Join(unused, " "))
}

func rel(path string) string {
	r, err := filepath.Rel(repoRoot, path)
	if err != nil {
		return path
	}
	return r
}

// dashboardRefs parses a Grafana dashboard, checks its shape (a Prometheus datasource on every
// query) and returns the metric names in every string of it.
func dashboardRefs(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string           `json:"uid"`
		Title         string           `json:"title"`
		SchemaVersion int              `json:"schemaVersion"`
		Panels        []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", rel(file), err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Errorf("%s: want uid, title, schemaVersion >= 30 and panels", rel(file))
	}
	var all any
	json.Unmarshal(b, &all)
	var refs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			refs = append(refs, MetricRefs(v)...)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(all)
	return refs
}

// rule is one Prometheus alerting rule.
type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// loadRules parses a Prometheus rules file strictly and checks every rule's metadata: a name,
// an expression, a severity, a summary and a runbook_url whose runbook exists.
func loadRules(t *testing.T, file string) []rule {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: %v", rel(file), err)
	}
	var out []rule
	seen := map[string]bool{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			where := fmt.Sprintf("%s: group %q rule %q", rel(file), g.Name, r.Alert)
			if r.Alert == "" || r.Expr == "" || seen[r.Alert] {
				t.Errorf("%s: every rule needs a unique alert name and an expr", where)
			}
			seen[r.Alert] = true
			if _, err := time.ParseDuration(r.For); r.For != "" && err != nil {
				t.Errorf("%s: for %q: %v", where, r.For, err)
			}
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("%s: severity %q, want page or ticket", where, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary annotation", where)
			}
			p, err := RunbookPath(r.Annotations["runbook_url"])
			if err != nil {
				t.Errorf("%s: %v", where, err)
			} else if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("%s: runbook: %v", where, err)
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Errorf("%s: no rules", rel(file))
	}
	return out
}
