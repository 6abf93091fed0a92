// Package testenv tells integration tests where the real services of the test environment are.
//
// The services (PostgreSQL, MinIO, the stock clients) are started by the test scripts, which
// export their addresses in environment variables. A test that needs one calls the matching
// function: when the variable is unset, the test is skipped on a developer machine, but fails
// when CI is set — in CI every integration test must run.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Environment variables exported by the test scripts.
const (
	PostgresDSN = "XETCDN_TEST_POSTGRES_DSN" // e.g. postgres://xet@127.0.0.1:55432/postgres?sslmode=disable
	S3Endpoint  = "XETCDN_TEST_S3_ENDPOINT"  // host:port of MinIO, plain HTTP
	S3AccessKey = "XETCDN_TEST_S3_ACCESS_KEY"
	S3SecretKey = "XETCDN_TEST_S3_SECRET_KEY"
	Python      = "XETCDN_TEST_PYTHON"   // a python3 that can import hf_xet
	NodeModules = "XETCDN_TEST_NODE_DIR" // a folder whose node_modules has @huggingface/hub
)

// InCI reports whether the tests run under CI (the CI variable is set and not "false").
func InCI() bool {
	v, ok := os.LookupEnv("CI")
	return ok && v != "" && v != "false" && v != "0"
}

// Require returns the value of the environment variable name. When it is unset the test is
// skipped, or failed under CI.
func Require(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if InCI() {
			t.Fatalf("%s is not set: CI must provide this service", name)
		}
		t.Skipf("%s is not set: integration service not available (set it, or run `make test`)", name)
	}
	return v
}

// S3 holds the MinIO connection details.
type S3 struct{ Endpoint, AccessKey, SecretKey string }

// RequireS3 returns the MinIO connection details, skipping or failing like Require.
func RequireS3(t testing.TB) S3 {
	t.Helper()
	return S3{
		Endpoint:  Require(t, S3Endpoint),
		AccessKey: Require(t, S3AccessKey),
		SecretKey: Require(t, S3SecretKey),
	}
}

// GoTool is the go command the tests build binaries with: the one on PATH, else the one under
// $GOROOT, else plain "go" (so exec reports a clear error).
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

// ReportCPU adds a cpu-ms/op metric to b for a loop that started when CPUTime returned start.
func ReportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(CPUTime()-start)/float64(time.Millisecond)/float64(max(b.N, 1)), "cpu-ms/op")
}
