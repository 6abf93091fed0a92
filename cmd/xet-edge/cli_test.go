package main

import (
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// noEnv runs the binary with no XETCDN_EDGE_ORIGIN_TOKEN (or anything else) from the caller.
var noEnv = []string{}

// TestCommandLine checks what a newcomer sees first (issue 14): --help on stdout with status 0,
// version, and configuration errors as plain lines on stderr with status 2.
func TestCommandLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := testenv.Build(t, ".")
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := testenv.RunStatus(t, bin, noEnv, args...)
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
		if code, out, _ := testenv.RunStatus(t, bin, noEnv, v); code != 0 || !versionRE.MatchString(out) {
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
		code, out, errOut := testenv.RunStatus(t, bin, noEnv, c.args...)
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
