package main

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func build(t *testing.T, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command(goBinary(), "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startUntil runs bin and returns once its log has a line containing marker.
func startUntil(t *testing.T, marker, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), marker) {
			go io.Copy(io.Discard, stderr)
			return cmd
		}
	}
	t.Fatalf("%s exited before logging %q", bin, marker)
	return nil
}

// TestServeDrainRestart runs the real binary with the fixed command line: /healthz answers on
// every listener, SIGTERM drains it to exit 0, and the self-signed certificate survives a restart.
func TestServeDrainRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	origin := build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin", "xet-origin")
	edge := build(t, ".", "xet-edge")
	odir, edir := t.TempDir(), t.TempDir()
	oaddr := freeAddr(t)
	startUntil(t, `"msg":"xet-origin serving"`, origin, "--data-dir", odir, "--listen", oaddr)
	tok, err := exec.Command(origin, "token", "--data-dir", odir, "--scope", "edge", "--access", "edge").Output()
	if err != nil {
		t.Fatal(err)
	}
	listen, plain, admin := freeAddr(t), freeAddr(t), freeAddr(t)
	args := []string{"--origin", "http://" + oaddr, "--origin-token", strings.TrimSpace(string(tok)),
		"--data-dir", edir, "--listen", listen, "--http-listen", plain, "--admin-listen", admin, "--permits", "4"}
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var certs [2][]byte
	for run := 0; run < 2; run++ {
		cmd := startUntil(t, `"msg":"xet-edge serving"`, edge, args...)
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
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("run %d: exit after SIGTERM: %v", run, err)
		}
	}
	if string(certs[0]) != string(certs[1]) {
		t.Error("the self-signed certificate changed across a restart")
	}
}

// goBinary is the go command: the one on PATH, else the one under $GOROOT.
func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}
