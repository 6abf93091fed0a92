package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// regionsConfig is the origin's config for TestRegions: 127.0.0.1 is in eu, 127.0.0.3 in us,
// 127.0.0.2 is a trusted proxy, anything else is unmapped (default eu). Loopback answers on all
// of 127.0.0.0/8, so a client picks its region by the address it dials from.
const regionsConfig = `{"regions": {
	"order": ["eu", "us"],
	"networks": {"127.0.0.1": "eu", "127.0.0.3/32": "us"},
	"default": "eu",
	"trusted_proxies": ["127.0.0.2"]
}}`

// regionEdge is one started edge of TestRegions.
type regionEdge struct {
	url string
	p   *testenv.Process
}

// tokenFrom asks the origin's token route for a read token of scope, dialing from the local
// address from (and sending hdr), and returns the casUrl.
func tokenFrom(t *testing.T, origin, tok, scope, from string, hdr ...string) string {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest("GET", origin+"/api/"+scope+"/xet-read-token/main", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("token route from %s: %v", from, err)
	}
	defer resp.Body.Close()
	var a struct {
		CasURL string `json:"casUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 {
		t.Fatalf("token route from %s: status %d, %v", from, resp.StatusCode, err)
	}
	return a.CasURL
}

// TestRegions runs the real origin with a region map and three real edges (two in eu, one in
// us) and checks issue 12 items 1 and 2 end to end: the edges register and are listed by
// `xet-origin edges`; read tokens name the caller's region's edge chosen for the repository
// (write tokens the origin); a region header counts only from the trusted proxy; an unmapped
// caller gets the default region; a killed edge leaves the token route within the default
// timeout (≤ 10 s), a drained one at once; then other regions, then the origin. Bad heartbeats
// (no token, a client token, absurd values, an unknown region) are refused, counted, not listed.
// Before any edge registers, read tokens carry the static --edge-url.
func TestRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the origin and three edges")
	}
	originBin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	edgeBin := testenv.Build(t, ".")
	dir, addr, admin := t.TempDir(), testenv.FreeAddr(t), testenv.FreeAddr(t)
	cfg := filepath.Join(t.TempDir(), "origin.json")
	if err := os.WriteFile(cfg, []byte(regionsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	origin := "http://" + addr
	common := []string{"--data-dir", dir, "--config", cfg}
	testenv.Start(t, originBin, append([]string{"--listen", addr, "--admin-listen", admin,
		"--edge-url", "http://static.invalid"}, common...), testenv.Options{Ready: `"msg":"xet-origin serving"`})
	tok := func(scope, access string) string {
		return testenv.Run(t, originBin, "token", "--data-dir", dir, "--scope", scope, "--access", access)
	}
	const scope = "models/acme/llama"
	read, edgeTok := tok(scope, "read"), tok("edge", "edge")

	// No edge yet: the static edge_url.
	if u := tokenFrom(t, origin, read, scope, "127.0.0.1"); u != "http://static.invalid" {
		t.Errorf("before any edge registered: casUrl %q, want the static --edge-url", u)
	}

	// Bad heartbeats: refused, counted, never listed.
	good := func(url, region string) []byte {
		return fmt.Appendf(nil, `{"url":%q,"region":%q,"version":"x","permits":4,"free_permits":4,"cache_fill":0,"hit_ratio":0,"ready":true}`, url, region)
	}
	post := func(tok string, body []byte) int {
		req, _ := http.NewRequest("POST", origin+"/internal/v1/edges", bytes.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name string
		tok  string
		body []byte
		want int
	}{
		{"no token", "", good("http://evil-1", "eu"), 401},
		{"forged token", edgeTok[:len(edgeTok)-4] + "AAAA", good("http://evil-2", "eu"), 401},
		{"client token", read, good("http://evil-3", "eu"), 403},
		{"absurd permits", edgeTok, bytes.Replace(good("http://evil-4", "eu"), []byte(`"free_permits":4`), []byte(`"free_permits":5`), 1), 400},
		{"absurd hit ratio", edgeTok, bytes.Replace(good("http://evil-5", "eu"), []byte(`"hit_ratio":0`), []byte(`"hit_ratio":7`), 1), 400},
		{"unknown region", edgeTok, good("http://evil-6", "mars"), 400},
		{"unknown field", edgeTok, bytes.Replace(good("http://evil-7", "eu"), []byte(`"ready"`), []byte(`"admin":true,"ready"`), 1), 400},
	} {
		if st := post(c.tok, c.body); st != c.want {
			t.Errorf("heartbeat with %s: status %d, want %d", c.name, st, c.want)
		}
	}

	startEdge := func(region string) *regionEdge {
		tlsAddr, httpAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
		e := &regionEdge{url: "http://" + httpAddr}
		e.p = testenv.Start(t, edgeBin, []string{"--origin", origin, "--origin-token", edgeTok, "--data-dir", t.TempDir(),
			"--listen", tlsAddr, "--http-listen", httpAddr, "--public-url", e.url, "--region", region},
			testenv.Options{Ready: `"msg":"xet-edge serving"`})
		return e
	}
	eu1, eu2, us1 := startEdge("eu"), startEdge("eu"), startEdge("us")
	edges := func() string {
		code, out, errOut := testenv.RunStatus(t, originBin, nil, append([]string{"edges"}, common...)...)
		if code != 0 {
			t.Fatalf("xet-origin edges: status %d: %s", code, errOut)
		}
		return out
	}
	healthyIn := func(out string) int { return strings.Count(out, " healthy ") }
	if err := eventually(10*time.Second, func() error {
		if out := edges(); healthyIn(out) != 3 {
			return fmt.Errorf("xet-origin edges:\n%s", out)
		}
		return nil
	}); err != nil {
		t.Fatalf("three edges not healthy: %v", err)
	}
	out := edges()
	for _, e := range []*regionEdge{eu1, eu2, us1} {
		// Region, URL, state, age, free/total permits (idle edges: all free), fill, hit ratio.
		re := regexp.MustCompile(`(eu|us)\s+` + regexp.QuoteMeta(e.url) + `\s+healthy\s+[0-9.]+m?s ago\s+64/64\s+0\.00\s+0\.00\s`)
		if !re.MatchString(out) {
			t.Errorf("xet-origin edges does not list %s as a healthy idle edge:\n%s", e.url, out)
		}
	}
	if strings.Contains(out, "evil") {
		t.Errorf("a refused heartbeat is listed:\n%s", out)
	}

	// The repository's eu edge, the same for every eu caller and on every request (the token
	// route's view of the registry is at most a second old).
	var euURL string
	eventually(3*time.Second, func() error {
		if euURL = tokenFrom(t, origin, read, scope, "127.0.0.1"); euURL == "http://static.invalid" {
			return errNotYet
		}
		return nil
	})
	if euURL != eu1.url && euURL != eu2.url {
		t.Fatalf("eu caller: casUrl %s, want an eu edge", euURL)
	}
	for _, c := range []struct {
		name, from string
		hdr        []string
		want       string
	}{
		{"again", "127.0.0.1", nil, euURL},
		{"us network", "127.0.0.3", nil, us1.url},
		{"forged region header from an untrusted caller", "127.0.0.1", []string{"X-Xet-Region", "us"}, euURL},
		{"region header from the trusted proxy", "127.0.0.2", []string{"X-Xet-Region", "us"}, us1.url},
		{"X-Forwarded-For from the trusted proxy", "127.0.0.2", []string{"X-Forwarded-For", "127.0.0.3"}, us1.url},
		{"unmapped network: the default region", "127.0.0.4", nil, euURL},
	} {
		if u := tokenFrom(t, origin, read, scope, c.from, c.hdr...); u != c.want {
			t.Errorf("%s: casUrl %s, want %s", c.name, u, c.want)
		}
	}
	// A write token keeps the origin.
	{
		req, _ := http.NewRequest("GET", origin+"/api/"+scope+"/xet-write-token/main", nil)
		req.Header.Set("Authorization", "Bearer "+tok(scope, "write"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(b, []byte(`"casUrl":"`+origin+`"`)) {
			t.Errorf("write token: %s, want casUrl %s", b, origin)
		}
	}

	// Kill the repository's eu edge: within the default timeout the other eu edge takes it.
	dead, other := eu1, eu2
	if euURL == eu2.url {
		dead, other = eu2, eu1
	}
	dead.p.Kill() // reports "signal: killed", as it should
	killed := time.Now()
	if err := eventually(15*time.Second, func() error {
		if u := tokenFrom(t, origin, read, scope, "127.0.0.1"); u != other.url {
			return fmt.Errorf("casUrl %s", u)
		}
		return nil
	}); err != nil {
		t.Fatalf("killed edge still handed out: %v", err)
	}
	took := time.Since(killed)
	t.Logf("killed edge out of the token route after %v", took.Round(10*time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("killed edge out after %v, want <= 10 s", took)
	}
	// SIGTERM the other: it says "not ready" as it drains, and leaves at once.
	if err := other.p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termed := time.Now()
	if err := eventually(3*time.Second, func() error {
		if u := tokenFrom(t, origin, read, scope, "127.0.0.1"); u != us1.url {
			return fmt.Errorf("casUrl %s", u)
		}
		return nil
	}); err != nil {
		t.Fatalf("no eu edge left: want the us edge (other_region) within 3 s of SIGTERM: %v", err)
	}
	t.Logf("drained edge out of the token route after %v", time.Since(termed).Round(10*time.Millisecond))
	us1.p.Signal(syscall.SIGTERM)
	if err := eventually(3*time.Second, func() error {
		if u := tokenFrom(t, origin, read, scope, "127.0.0.1"); u != origin {
			return fmt.Errorf("casUrl %s", u)
		}
		return nil
	}); err != nil {
		t.Fatalf("no edge left: want the origin: %v", err)
	}
	out = edges()
	if !regexp.MustCompile(`eu\s+`+regexp.QuoteMeta(dead.url)+`\s+stale`).MatchString(out) ||
		!regexp.MustCompile(`us\s+`+regexp.QuoteMeta(us1.url)+`\s+(not_ready|stale)`).MatchString(out) {
		t.Errorf("xet-origin edges after the stops:\n%s", out)
	}

	// Metrics: choices by outcome, edges by region and state, refused heartbeats by status.
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metric := func(series string) float64 {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
		s := re.FindSubmatch(m)
		if s == nil {
			t.Errorf("no %s in /metrics", series)
			return 0
		}
		v, _ := strconv.ParseFloat(string(s[1]), 64)
		return v
	}
	for _, c := range []struct {
		series string
		min    float64
	}{
		{`xet_origin_token_edge_choices_total{outcome="static"}`, 1},
		{`xet_origin_token_edge_choices_total{outcome="local"}`, 7},
		{`xet_origin_token_edge_choices_total{outcome="other_region"}`, 1},
		{`xet_origin_token_edge_choices_total{outcome="origin"}`, 1},
		{`xet_origin_http_requests_total{code="401",route="POST /internal/v1/edges"}`, 2},
		{`xet_origin_http_requests_total{code="403",route="POST /internal/v1/edges"}`, 1},
		{`xet_origin_edge_reports_total{result="malformed"}`, 3},
		{`xet_origin_edge_reports_total{result="unknown_region"}`, 1},
		{`xet_origin_edges{region="eu",state="stale"}`, 1},
	} {
		if v := metric(c.series); v < c.min {
			t.Errorf("%s = %v, want >= %v", c.series, v, c.min)
		}
	}
}

// TestRegionsBadConfig: a malformed region map or trusted-proxy list stops the origin at start
// (status 2), naming each bad entry.
func TestRegionsBadConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the origin binary")
	}
	bin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	cfg := filepath.Join(t.TempDir(), "origin.json")
	if err := os.WriteFile(cfg, []byte(`{"regions": {"order": ["eu"], "networks": {"10.0.0.0/33": "eu", "10.1.0.0/16": "mars"},
		"trusted_proxies": ["proxy.example"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := testenv.RunStatus(t, bin, nil, "--data-dir", t.TempDir(), "--listen", testenv.FreeAddr(t), "--config", cfg)
	if code != 2 {
		t.Fatalf("origin with a bad region map: status %d, want 2:\n%s", code, errOut)
	}
	for _, want := range []string{`"10.0.0.0/33"`, `"mars"`, `"proxy.example"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("error does not name %s:\n%s", want, errOut)
		}
	}
}

var errNotYet = fmt.Errorf("not yet")

// eventually polls check every 100 ms until it returns nil or within has passed, and returns
// its last error.
func eventually(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRegistrySharedByReplicas: two origin processes on one Postgres index (one key set); an
// edge registers with the first, and the second's token route hands it out and its `xet-origin
// edges` lists it — the registry lives in the shared database, not in a process.
func TestRegistrySharedByReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two origins and an edge")
	}
	dsn := freshSchema(t)
	originBin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	edgeBin := testenv.Build(t, ".")
	dir := t.TempDir()
	env := []string{"XETCDN_POSTGRES_DSN=" + dsn}
	var urls []string
	for range 2 {
		addr := testenv.FreeAddr(t)
		testenv.Start(t, originBin, []string{"--data-dir", dir, "--listen", addr, "--index", "postgres"},
			testenv.Options{Env: env, Ready: `"msg":"xet-origin serving"`})
		urls = append(urls, "http://"+addr)
	}
	tok := func(scope, access string) string {
		return testenv.Run(t, originBin, "token", "--data-dir", dir, "--scope", scope, "--access", access)
	}
	httpAddr := testenv.FreeAddr(t)
	edgeURL := "http://" + httpAddr
	testenv.Start(t, edgeBin, []string{"--origin", urls[0], "--origin-token", tok("edge", "edge"), "--data-dir", t.TempDir(),
		"--listen", testenv.FreeAddr(t), "--http-listen", httpAddr, "--public-url", edgeURL},
		testenv.Options{Ready: `"msg":"xet-edge serving"`})
	read := tok("models/a/b", "read")
	if err := eventually(10*time.Second, func() error {
		if u := tokenFrom(t, urls[1], read, "models/a/b", "127.0.0.1"); u != edgeURL {
			return fmt.Errorf("second replica's casUrl %s", u)
		}
		return nil
	}); err != nil {
		t.Fatalf("edge registered with the first replica not handed out by the second: %v", err)
	}
	code, out, errOut := testenv.RunStatus(t, originBin, append(os.Environ(), env...), "edges", "--data-dir", dir, "--index", "postgres")
	if code != 0 || !strings.Contains(out, edgeURL) || !strings.Contains(out, "healthy") {
		t.Errorf("xet-origin edges on the shared index: status %d\n%s%s", code, out, errOut)
	}
}

// freshSchema is the test Postgres DSN with a new schema as search_path, dropped at the end.
func freshSchema(t *testing.T) string {
	t.Helper()
	dsn := testenv.Require(t, testenv.PostgresDSN)
	var b [6]byte
	rand.Read(b[:])
	schema := "xet_test_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if conn, err := pgx.Connect(ctx, dsn); err == nil {
			conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			conn.Close(ctx)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
