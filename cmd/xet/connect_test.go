package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// TestHTTP3ClosedPortFailsFast: --http3 to a port nobody answers on fails within the QUIC
// handshake bound (10 s), not after minutes of retries, and says what to check (issue 14).
func TestHTTP3ClosedPortFailsFast(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the QUIC handshake timeout")
	}
	addr := testenv.FreeAddr(t) // nothing listens on its UDP port either
	h := strings.Repeat("0", 64)
	t0 := time.Now()
	code, out, errOut := runXet(t, "download", "--http3", "--endpoint", "https://"+addr, "--hash", h,
		"-o", filepath.Join(t.TempDir(), "o"))
	took := time.Since(t0)
	if code != 1 || out != "" || !strings.Contains(errOut, "no HTTP/3 (QUIC over UDP) answer within 10s") {
		t.Errorf("status %d, stdout %q, stderr %q", code, out, errOut)
	}
	if took > 20*time.Second {
		t.Errorf("took %v, want about 10 s", took)
	}
	t.Logf("failed after %v", took)
}

// TestTLSTrust: against the real edge's self-signed certificate, an untrusted certificate fails
// at once (no retries) with a hint naming --ca-file, SSL_CERT_FILE and the plain listener;
// --ca-file DATA-DIR/tls/cert.pem and SSL_CERT_FILE both make it trusted; a file outside the
// token's scope is "not found" with no internal route or scope in the message (issue 14).
func TestTLSTrust(t *testing.T) {
	originURL, origin, odir := startOriginIn(t)
	data := bytes.Repeat([]byte("tls trust "), 10000)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runXet(t, "upload", "--endpoint", originURL, src)
	if code != 0 {
		t.Fatalf("upload: %d %q", code, errOut)
	}
	fileHash := out[strings.Index(out, `"file_hash":"`)+13:][:64]

	edgeBin, edir, listen := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-edge"), t.TempDir(), testenv.FreeAddr(t)
	edgeTok := testenv.Run(t, origin, "token", "--data-dir", odir, "--scope", "edge", "--access", "edge")
	testenv.Start(t, edgeBin, []string{"--origin", originURL, "--origin-token", edgeTok, "--data-dir", edir,
		"--listen", listen}, testenv.Options{Ready: `"msg":"xet-edge serving"`})
	cert := filepath.Join(edir, "tls", "cert.pem")
	readTok := testenv.Run(t, origin, "token", "--data-dir", odir, "--scope", "models/other/repo", "--access", "read")
	dl := []string{"download", "--endpoint", "https://" + listen, "--token", readTok, "--hash", fileHash,
		"-o", filepath.Join(t.TempDir(), "o")}

	t0 := time.Now()
	code, out, errOut = runXet(t, dl...)
	if code != 1 || out != "" || !strings.Contains(errOut, "x509:") || !strings.Contains(errOut, "--ca-file") ||
		!strings.Contains(errOut, "SSL_CERT_FILE") || !strings.Contains(errOut, "--http-listen") {
		t.Errorf("untrusted: status %d, stdout %q, stderr %q", code, out, errOut)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("untrusted certificate took %v to report (retried?)", took)
	}

	// Trusted: the download reaches the edge, which does not show the file to another scope.
	notFound := func(how, errOut string, code int) {
		t.Helper()
		if code != 1 || strings.Contains(errOut, "x509") || !strings.Contains(errOut, "file "+fileHash+" not found") ||
			strings.Contains(errOut, "/internal/") || strings.Contains(errOut, "scope") {
			t.Errorf("%s: status %d, stderr %q", how, code, errOut)
		}
	}
	code, _, errOut = runXet(t, append(dl, "--ca-file", cert)...)
	notFound("--ca-file", errOut, code)

	bin := testenv.Build(t, ".")
	cmd := exec.CommandContext(context.Background(), bin, dl...)
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+cert)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	_ = cmd.Run()
	notFound("SSL_CERT_FILE", stderr.String(), cmd.ProcessState.ExitCode())

	code, _, errOut = runXet(t, append(dl[:len(dl)-2:len(dl)-2], "--ca-file", filepath.Join(edir, "missing.pem"), "-o", "x")...)
	if code != 1 || !strings.Contains(errOut, "--ca-file") {
		t.Errorf("missing --ca-file: status %d, stderr %q", code, errOut)
	}
}
