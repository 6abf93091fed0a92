package main

import (
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// TestCommandLine checks what a newcomer sees first (issue 14): --help on stdout with status 0
// listing every subcommand, version, and configuration errors as plain lines on stderr, only
// their root causes, with status 2.
func TestCommandLine(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--listen", "x", "--help"}} {
		code, out, errOut := testenv.RunStatus(t, bin, nil, args...)
		if code != 0 || errOut != "" {
			t.Errorf("%q: status %d, stderr %q; want 0 and nothing", args, code, errOut)
		}
		for _, want := range []string{"xet-origin token", "xet-origin version", "-data-dir", "-admin-listen"} {
			if !strings.Contains(out, want) {
				t.Errorf("%q: stdout lacks %q:\n%s", args, want, out)
			}
		}
	}
	code, out, errOut := testenv.RunStatus(t, bin, nil, "token", "-h")
	if code != 0 || !strings.Contains(out, "-scope") || errOut != "" {
		t.Errorf("token -h: status %d, stdout %q, stderr %q", code, out, errOut)
	}
	versionRE := regexp.MustCompile(`^xet-origin \S+ \(commit \S+, ` + regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
	for _, v := range []string{"version", "--version"} {
		if code, out, _ := testenv.RunStatus(t, bin, nil, v); code != 0 || !versionRE.MatchString(out) {
			t.Errorf("%s: status %d, %q; want 0 and %s", v, code, out, versionRE)
		}
	}

	for _, c := range []struct {
		args []string
		want []string // the lines after the header, in any order
	}{
		{nil, []string{"data_dir (--data-dir) is required"}},
		{[]string{"--index", "bogus", "--listen", "nocolon"}, []string{"data_dir (--data-dir) is required",
			`index.driver "bogus" is not sqlite or postgres`,
			`listen "nocolon": address nocolon: missing port in address`}},
		{[]string{"--bogus"}, []string{"flag provided but not defined: -bogus"}},
	} {
		code, out, errOut := testenv.RunStatus(t, bin, nil, c.args...)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) < 2 || lines[0] != "xet-origin: configuration error:" ||
			lines[len(lines)-1] != "run 'xet-origin --help' for usage" {
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

// TestBuildInfoMetric: /metrics carries xet_build_info{version,commit,go_version} 1.
func TestBuildInfoMetric(t *testing.T) {
	o := newOrigin(t, buildBinary(t))
	admin := testenv.FreeAddr(t)
	o.args = []string{"--admin-listen", admin}
	o.start(t)
	st, body := call(t, "GET", "http://"+admin+"/metrics", "", nil)
	re := regexp.MustCompile(`(?m)^xet_build_info\{commit="[^"]+",go_version="` + regexp.QuoteMeta(runtime.Version()) + `",version="[^"]+"\} 1$`)
	if st != 200 || !re.Match(body) {
		t.Errorf("/metrics: %d, no line matching %s", st, re)
	}
}
