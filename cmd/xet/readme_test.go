package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeFlags: every `bin/xet SUBCOMMAND` line of the README uses only flags that subcommand
// has, the upload comment says what upload prints, and the flags the README names in prose for
// xet download (--ca-file) exist (issue 14).
func TestReadmeFlags(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	flagRE := regexp.MustCompile(`(?:^|\s)(--?[a-z][a-z0-9-]*)`)
	lines := 0
	for line := range strings.SplitSeq(readme, "\n") {
		rest, ok := strings.CutPrefix(line, "bin/xet ")
		if !ok {
			continue
		}
		lines++
		cmd, _, _ := strings.Cut(rest, " ")
		code, _, usage := runXet(t, cmd, "-h")
		if code != 0 {
			t.Errorf("xet %s -h: status %d", cmd, code)
		}
		args, _, _ := strings.Cut(rest, "#")
		for _, m := range flagRE.FindAllStringSubmatch(args, -1) {
			name := "-" + strings.TrimLeft(m[1], "-")
			if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(name) + `\b`).MatchString(usage) {
				t.Errorf("README line %q: xet %s has no flag %s", line, cmd, m[1])
			}
		}
		if cmd == "upload" && !strings.Contains(line, "# prints a JSON line with file_hash") {
			t.Errorf("README upload line does not say it prints a JSON line: %q", line)
		}
	}
	if lines < 2 {
		t.Fatalf("README has %d bin/xet lines, want the upload and download examples", lines)
	}
	_, _, usage := runXet(t, "download", "-h")
	for _, name := range []string{"--ca-file", "--insecure", "--http3"} {
		if strings.Contains(readme, name) && !regexp.MustCompile(`(?m)^\s+`+regexp.QuoteMeta(name[1:])+`\b`).MatchString(usage) {
			t.Errorf("README names %s, xet download -h does not list it", name)
		}
	}
}
