package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/perf/trace"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "z.jsonl")
	ft := filepath.Join(dir, "ft.jsonl")
	logf := filepath.Join(dir, "access.log")
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(logf, []byte("1 /acme/m/resolve/main/config.json 200 700\n2 /healthz 200 1\n"), 0o644)
	os.WriteFile(bad, []byte(`{"t":0,"op":"token","repo":"models/a/b","client":"c"}`+"\n"+`{"t":1,"op":"download","repo":"models/a/b","file":"f","client":"c"}`+"\n"), 0o644)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"-scenario", "zipf", "-duration", "5", "-scale", "0.001", "-regions", "eu,us", "-o", out}, 0, "lines over"},
		{[]string{"-check", out}, 0, "download_ranges"},
		{[]string{}, 2, "exactly one of"},
		{[]string{"-scenario", "zipf", "-check", out}, 2, "exactly one of"},
		{[]string{"-scenario", "nope"}, 2, `-scenario: "nope" is not one of zipf, whole-repo, finetune, burst`},
		{[]string{"-scenario", "zipf", "-rate", "0"}, 2, "-rate: 0 per second"},
		{[]string{"-scenario", "zipf", "-regions", "EU"}, 2, `-regions: "EU"`},
		{[]string{"-scenario", "zipf", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-scenario", "zipf", "-duration", "x"}, 2, "invalid value"},
		{[]string{"-from-log", logf, "-rate", "3"}, 2, "-rate only applies to -scenario"},
		{[]string{"-scenario", "finetune", "-duration", "120", "-repos", "20", "-scale", "0.001", "-change-span", "32", "-o", ft}, 0, "upload"},
		{[]string{"-check", ft}, 0, "lines over"},
		{[]string{"-scenario", "finetune", "-change-span", "0"}, 2, "-change-span: 0 MiB, want 1..1024"},
		{[]string{"-scenario", "finetune", "-change-span", "2048"}, 2, "-change-span: 2048 MiB, want 1..1024"},
		{[]string{"-scenario", "finetune", "-change-span", "1.5"}, 2, "invalid value"},
		{[]string{"-check", out, "-change-span", "32"}, 2, "-change-span only applies to -scenario"},
		{[]string{"-scenario", "finetune", "-head", "-1"}, 2, "-head: -1 KiB, want 0..65536"},
		{[]string{"-scenario", "finetune", "-head", "65537"}, 2, "-head: 65537 KiB, want 0..65536"},
		{[]string{"-check", out, "-head", "4"}, 2, "-head only applies to -scenario"},
		{[]string{"-check", bad}, 1, `trace line 2: field "size": missing`},
		{[]string{"-from-log", logf, "-o", filepath.Join(dir, "l.jsonl")}, 0, "skipped 1 lines: not a file or token path"},
		{[]string{"-from-log", bad, "-o", filepath.Join(dir, "b.jsonl")}, 1, "line 1:"},
	} {
		var so, se bytes.Buffer
		code := run(tc.args, &so, &se)
		if code != tc.code || !strings.Contains(se.String(), tc.stderr) {
			t.Errorf("tracegen %q = %d, stderr %q; want %d and %q", tc.args, code, se.String(), tc.code, tc.stderr)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := trace.ReadAll(f)
	if err != nil || len(recs) < 20 {
		t.Fatalf("generated trace: %d records, %v", len(recs), err)
	}
	// -change-span 32 puts 32 MiB spans on the weight files' lines, and only there.
	text, err := os.ReadFile(ft)
	if err != nil {
		t.Fatal(err)
	}
	recs, err = trace.ReadAll(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var spans int
	for _, r := range recs {
		if r.ChangeSpan != 0 {
			spans++
			if r.ChangeSpan != 32<<20 || !strings.HasSuffix(r.File, ".safetensors") {
				t.Fatalf("%s: change_span %d", r.File, r.ChangeSpan)
			}
		}
	}
	if spans == 0 {
		t.Errorf("-change-span 32: no line has a change span")
	}
	if _, err := os.Stat(filepath.Join(dir, "b.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a failed conversion left its output behind (%v)", err)
	}
}
