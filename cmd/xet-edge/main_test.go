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

// TestServeDrainRestart runs the real binary with the fixed command line: /healthz answers on
// every listener, SIGTERM drains it to exit 0, and the self-signed certificate survives a restart.
func TestServeDrainRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	origin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	edge := testenv.Build(t, ".")
	odir, edir := t.TempDir(), t.TempDir()
	oaddr := testenv.FreeAddr(t)
	testenv.Start(t, origin, []string{"--data-dir", odir, "--listen", oaddr},
		testenv.Options{Ready: `"msg":"xet-origin serving"`})
	tok := testenv.Run(t, origin, "token", "--data-dir", odir, "--scope", "edge", "--access", "edge")
	listen, plain, admin := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	args := []string{"--origin", "http://" + oaddr, "--origin-token", tok,
		"--data-dir", edir, "--listen", listen, "--http-listen", plain, "--admin-listen", admin, "--permits", "4"}
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
