package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// runBin runs bin with args (bounded to 30 s) and returns its exit status, stdout and stderr.
func runBin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{} // no XETCDN_EDGE_ORIGIN_TOKEN from the caller
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestCommandLine checks what a newcomer sees first (issue 14): --help on stdout with status 0,
// version, and configuration errors as plain lines on stderr with status 2.
func TestCommandLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := testenv.Build(t, ".")
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runBin(t, bin, args...)
		if code != 0 || errOut != "" {
			t.Errorf("%q: status %d, stderr %q; want 0 and nothing", args, code, errOut)
		}
		for _, want := range []string{"xet-edge version", "-origin-token", "-http-listen"} {
			if !strings.Contains(out, want) {
				t.Errorf("%q: stdout lacks %q:\n%s", args, want, out)
			}
		}
	}
	versionRE := regexp.MustCompile(`^xet-edge \S+ \(commit \S+, ` + regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
	for _, v := range []string{"version", "--version"} {
		if code, out, _ := runBin(t, bin, v); code != 0 || !versionRE.MatchString(out) {
			t.Errorf("%s: status %d, %q; want 0 and %s", v, code, out, versionRE)
		}
	}
	for _, c := range []struct {
		args []string
		want []string // the lines after the header, in any order
	}{
		{nil, []string{"data_dir (--data-dir) is required", "--origin-token (or XETCDN_EDGE_ORIGIN_TOKEN) is required",
			"origin (--origin) is required"}},
		{[]string{"--data-dir", t.TempDir(), "--origin-token", "x", "--origin", "ftp://o", "--permits", "-1"},
			[]string{`origin "ftp://o" is not an http(s) URL`, "permits must not be negative"}},
	} {
		code, out, errOut := runBin(t, bin, c.args...)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) < 2 || lines[0] != "xet-edge: configuration error:" ||
			lines[len(lines)-1] != "run 'xet-edge --help' for usage" {
			t.Errorf("%q: status %d, stdout %q, stderr:\n%s", c.args, code, out, errOut)
			continue
		}
		got := lines[1 : len(lines)-1]
		for i := range got {
			got[i] = strings.TrimPrefix(got[i], "  ")
		}
		slices.Sort(got)
		slices.Sort(c.want)
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: problems\n%s\nwant\n%s", c.args, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}
