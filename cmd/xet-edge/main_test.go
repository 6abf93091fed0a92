package main

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// startOrigin builds the origin binary and starts it on a fresh data directory; it returns the
// binary, the data directory and the address it serves on.
func startOrigin(t *testing.T) (bin, dir, addr string) {
	t.Helper()
	bin, dir, addr = testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin"), t.TempDir(), testenv.FreeAddr(t)
	testenv.Start(t, bin, []string{"--data-dir", dir, "--listen", addr},
		testenv.Options{Ready: `"msg":"xet-origin serving"`})
	return bin, dir, addr
}

// TestServeDrainRestart runs the real binary with the fixed command line: /healthz answers on
// every listener, the admin listener serves /metrics to anyone but pprof only to an admin token
// (an address without a host binds loopback), SIGTERM drains it to exit 0, and the self-signed
// certificate survives a restart.
func TestServeDrainRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	origin, odir, oaddr := startOrigin(t)
	edge, edir := testenv.Build(t, "."), t.TempDir()
	tok := testenv.Run(t, origin, "token", "--data-dir", odir, "--scope", "edge", "--access", "edge")
	listen, plain, admin := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	args := []string{"--origin", "http://" + oaddr, "--origin-token", tok,
		"--data-dir", edir, "--listen", listen, "--http-listen", plain, "--admin-listen", strings.TrimPrefix(admin, "127.0.0.1"),
		"--permits", "4"}
	adminTok := testenv.Run(t, origin, "token", "--data-dir", odir, "--access", "admin")
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var certs [2][]byte
	for run := 0; run < 2; run++ {
		p := testenv.Start(t, edge, args, testenv.Options{Ready: `"msg":"xet-edge serving"`})
		for _, u := range []string{"https://" + listen + "/healthz", "http://" + plain + "/healthz",
			"https://" + listen + "/readyz", "http://" + admin + "/metrics"} {
			resp, err := client.Get(u)
			if err != nil {
				t.Fatalf("run %d: %s: %v", run, u, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("run %d: %s: %d %s", run, u, resp.StatusCode, b)
			}
			if strings.HasSuffix(u, "/metrics") && !strings.Contains(string(b), `xet_edge_fallbacks_total{reason="no_permit"}`) {
				t.Errorf("run %d: /metrics has no fallback counter", run)
			}
			if strings.HasSuffix(u, "/metrics") && !strings.Contains(string(b), `xet_build_info{commit="`) {
				t.Errorf("run %d: /metrics has no xet_build_info gauge", run)
			}
		}
		for _, c := range []struct {
			tok    string
			status int
		}{{"", 401}, {tok, 403}, {adminTok, 200}} {
			req, _ := http.NewRequest("GET", "http://"+admin+"/debug/pprof/cmdline", nil)
			if c.tok != "" {
				req.Header.Set("Authorization", "Bearer "+c.tok)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("run %d: pprof: %v", run, err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Errorf("run %d: pprof with token %.10q: %d, want %d", run, c.tok, resp.StatusCode, c.status)
			}
		}
		var err error
		if certs[run], err = os.ReadFile(filepath.Join(edir, "tls", "cert.pem")); err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(); err != nil {
			t.Fatalf("run %d: exit after SIGTERM: %v", run, err)
		}
	}
	if string(certs[0]) != string(certs[1]) {
		t.Error("the self-signed certificate changed across a restart")
	}
}
