package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "replay-cold.json")
	os.WriteFile(good, []byte(`{"ops":{"download":{"cdf_ms":[[1.5,0.5],[20,0.99],[80,1]]},"token":{"cdf_ms":[[0.9,1]]}},
		"timeline":[{"done":3,"errors":0,"p99_ms":20},{"done":4,"errors":1,"p99_ms":80}],
		"metrics_timeline":[{"t":5,"edge_hit_ratio":0.5,"origin_offload":0.4},{"t":10,"edge_hit_ratio":0.7}]}`), 0o644)
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(`{"ops":{}}`), 0o644)
	notJSON := filepath.Join(dir, "x.json")
	os.WriteFile(notJSON, []byte(`nope`), 0o644)
	out := filepath.Join(dir, "plots")
	var se bytes.Buffer
	if code := run([]string{"-o", out, good}, &se); code != 0 {
		t.Fatalf("perfplot = %d: %s", code, se.String())
	}
	for _, f := range []string{"latency-cdf", "timeline", "hit-ratio"} {
		b, err := os.ReadFile(filepath.Join(out, "replay-cold-"+f+".png"))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: not a PNG (%v)", f, err)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"-o", out, empty}, 1, "no operations"},
		{[]string{"-o", out, notJSON}, 1, "not replay results"},
		{[]string{"-o", out, filepath.Join(dir, "missing.json")}, 1, "no such file"},
	} {
		se.Reset()
		if code := run(tc.args, &se); code != tc.code || !strings.Contains(se.String(), tc.want) {
			t.Errorf("perfplot %q = %d %q, want %d %q", tc.args, code, se.String(), tc.code, tc.want)
		}
	}
}
