package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// startOrigin runs the real xet-origin binary without auth on a fresh data directory and returns
// its base URL.
func startOrigin(t *testing.T) string {
	u, _, _ := startOriginIn(t)
	return u
}

// startOriginIn is startOrigin that also returns the binary and the data directory.
func startOriginIn(t *testing.T) (url, bin, dir string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the origin binary")
	}
	bin, addr, dir := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin"), testenv.FreeAddr(t), t.TempDir()
	testenv.Start(t, bin, []string{"--data-dir", dir, "--listen", addr, "--dev-no-auth"},
		testenv.Options{Ready: `"msg":"xet-origin serving"`})
	return "http://" + addr, bin, dir
}

// TestDownloadSummary: `xet download` prints one JSON line on success (file hash, size, SHA-256,
// seconds, bytes received), to stderr when stdout carries the file; progress stays off a
// non-terminal stderr; a wrong --size is reported as a size mismatch, not as corruption, and
// leaves no output file behind (issue 14).
func TestDownloadSummary(t *testing.T) {
	endpoint := startOrigin(t)
	data := make([]byte, 3<<20+17)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.IntN(256))
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runXet(t, "upload", "--endpoint", endpoint, src)
	var up uploadOutput
	if code != 0 || json.Unmarshal([]byte(out), &up) != nil {
		t.Fatalf("upload: %d %q %q", code, out, errOut)
	}
	sum := sha256.Sum256(data)
	// check reads the summary line; the sha256 field is there exactly when --sha256 was given.
	check := func(name, line, path string, withSHA bool) {
		t.Helper()
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil || strings.Count(line, "\n") != 1 {
			t.Fatalf("%s: not one JSON line: %q (%v)", name, line, err)
		}
		if got["path"] != path || got["file_hash"] != up.FileHash.String() || got["size"] != float64(len(data)) {
			t.Errorf("%s: %s", name, line)
		}
		if sha, ok := got["sha256"]; withSHA && sha != hex.EncodeToString(sum[:]) || !withSHA && ok {
			t.Errorf("%s: sha256 %v (asked: %v), want %x", name, sha, withSHA, sum)
		}
		if s, ok := got["seconds"].(float64); !ok || s < 0 || s > 60 {
			t.Errorf("%s: seconds %v", name, got["seconds"])
		}
		// Random bytes do not compress: the transfer bodies are about the file's size.
		if b, ok := got["bytes_received"].(float64); !ok || b < float64(len(data)) || b > float64(len(data))*1.01 {
			t.Errorf("%s: bytes_received %v for %d bytes", name, got["bytes_received"], len(data))
		}
	}
	dst := filepath.Join(dir, "dst")
	code, out, errOut = runXet(t, "download", "--endpoint", endpoint, "--hash", up.FileHash.String(), "-o", dst)
	if code != 0 || errOut != "" {
		t.Fatalf("download: %d, stderr %q", code, errOut)
	}
	check("-o FILE", out, dst, false)
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("downloaded file differs (%v)", err)
	}
	code, out, errOut = runXet(t, "download", "--endpoint", endpoint, "--hash", up.FileHash.String(), "--sha256", "-o", dst)
	if code != 0 || errOut != "" {
		t.Fatalf("download --sha256: %d, stderr %q", code, errOut)
	}
	check("--sha256 -o FILE", out, dst, true)

	for _, withSHA := range []bool{false, true} {
		args := []string{"download", "--endpoint", endpoint, "--hash", up.FileHash.String(), "-o", "-"}
		if withSHA {
			args = append(args, "--sha256")
		}
		code, out, errOut = runXet(t, args...)
		if code != 0 || out != string(data) {
			t.Fatalf("download -o - (sha256 %v): %d, %d bytes on stdout, stderr %q", withSHA, code, len(out), errOut)
		}
		check("-o -", errOut, "-", withSHA)
	}

	// Not a regular file (a FIFO here, /dev/null in practice): written in place, in order; the
	// node itself stays what it was (a temp file renamed over it would replace it).
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	code, out, errOut = runXet(t, "download", "--endpoint", endpoint, "--hash", up.FileHash.String(), "-o", fifo)
	if code != 0 {
		t.Fatalf("download -o FIFO: %d, stderr %q", code, errOut)
	}
	check("-o FIFO", out, fifo, false)
	select {
	case b := <-got:
		if !bytes.Equal(b, data) {
			t.Errorf("FIFO read %d bytes, want the %d of the file", len(b), len(data))
		}
	case <-time.After(30 * time.Second):
		t.Error("nothing was written to the FIFO within 30 s")
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("after download -o FIFO the path is %v (%v), want the FIFO still", fi.Mode(), err)
	}
	if m, _ := filepath.Glob(fifo + ".*"); len(m) != 0 {
		t.Errorf("download -o FIFO left %v", m)
	}

	for _, size := range []int{len(data) + 1, len(data) - 1} {
		bad := filepath.Join(dir, "bad"+strconv.Itoa(size))
		code, out, errOut = runXet(t, "download", "--endpoint", endpoint, "--hash", up.FileHash.String(),
			"--size", strconv.Itoa(size), "-o", bad)
		if code != 1 || out != "" || !strings.Contains(errOut, "size mismatch") || strings.Contains(errOut, "corrupt") {
			t.Errorf("--size %d of %d: status %d, stdout %q, stderr %q", size, len(data), code, out, errOut)
		}
		if m, _ := filepath.Glob(bad + "*"); len(m) != 0 {
			t.Errorf("--size %d: left %v", size, m)
		}
	}
}
