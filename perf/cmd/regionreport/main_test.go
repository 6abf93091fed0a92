package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const samples = `{"round":1,"case":"origin","client":"go","seconds":10,"bytes":1048576,"load1":3}
{"round":1,"case":"cold","client":"go","seconds":13,"bytes":1048576,"load1":3,"edge_cpu":0.5}
{"round":1,"case":"warm","client":"go","seconds":2,"bytes":1048576,"load1":3}
{"round":2,"case":"origin","client":"go","seconds":12,"bytes":1048576,"load1":3}
{"round":2,"case":"cold","client":"go","seconds":11,"bytes":1048576,"load1":3,"edge_cpu":0.5}
{"round":2,"case":"warm","client":"go","seconds":3,"bytes":1048576,"load1":3}
{"round":3,"case":"origin","client":"go","seconds":11,"bytes":1048576,"load1":3}
{"round":3,"case":"cold","client":"go","seconds":14,"bytes":1048576,"load1":3,"edge_cpu":0.5}
{"round":3,"case":"warm","client":"go","seconds":2.5,"bytes":1048576,"load1":3}
{"round":1,"case":"h1","client":"go","seconds":6,"bytes":1048576,"load1":3,"client_b_udp_drops":0}
{"round":1,"case":"h3","client":"go","seconds":4,"bytes":1048576,"load1":3,"client_b_udp_drops":7}
{"round":1,"case":"failover","client":"go","seconds":9,"bytes":524288,"killed":"e1","kill_at":1,"after_kill":8,"route_out":6.5,"resumed":6.9,"exit":0,"byte_exact":true,"load1":3}
{"round":2,"case":"failover","client":"go","seconds":9,"bytes":524288,"killed":"e2","kill_at":1,"after_kill":8,"route_out":null,"exit":0,"byte_exact":true,"load1":3}
`

func TestReport(t *testing.T) {
	dir := t.TempDir()
	runTxt := filepath.Join(dir, "run.txt")
	os.WriteFile(runTxt, []byte("date: 2026-12-01T21:00:00Z\ncommit: abc\nmachine: 2 cores, load average: 3\nmodel: m\nlinks: l\ntcp: bbr\n"), 0o644)
	in := filepath.Join(dir, "samples.jsonl")
	os.WriteFile(in, []byte(samples), 0o644)
	os.WriteFile(filepath.Join(dir, "failover-r1.tsv"), []byte("0.1\t0\n1.0\t262144\n9.0\t524288\n"), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{"-o", dir, "-command", "make regions", runTxt, in}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	md := out.String()
	for _, want := range []string{
		"## 2026-12-01 — simulated regions",
		"Command: `make regions`",
		// medians: origin 11, cold 13, warm 2.5
		"| warm local edge vs origin, Go client | ≥ 4× faster | 4.40× faster (2.5 s vs 11.0 s) | **met** |",
		"| cold local edge vs origin, Go client | ≤ 1.2× the origin's time | 1.18× (13.0 s vs 11.0 s) | **met** |",
		"HTTP/3 faster: 4.0 s vs 6.0 s (h1/h3 = 1.50) | **met** |",
		// a kill after which the route kept naming the edge for 60 s fails the target
		"route: worst +Inf s over 2 kills (6.5, -1.0); client fetching again 6.9 s and finished 8.0, 8.0 s after the kill",
		"0 failed downloads | **not met** |",
		"| not measured |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	for _, f := range []string{"results.json", "downloads.png", "protocols.png", "failover.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestReportRejectsBadSamples(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"round":1,"case":"origin","client":"go","seconds":0,"bytes":1}`, "line 1: want round"},
		{`{"round":0,"case":"origin","client":"go","seconds":1,"bytes":1}`, "line 1: want round"},
		{"\n" + `{"round":1,"case":"origin","client":"go","seconds":1,"bytes":1,"speed":2}`, `line 2: json: unknown field "speed"`},
		{`{"round":1,"case":"","client":"go","seconds":1,"bytes":1}`, "line 1"},
		{``, "no samples"},
		{`{`, "line 1"},
	} {
		_, err := readSamples(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestFailoverWithAFailedDownloadIsNotMet(t *testing.T) {
	s, err := readSamples(strings.NewReader(`{"round":1,"case":"failover","client":"go","seconds":9,"bytes":5,"after_kill":8,"route_out":3,"exit":1,"byte_exact":false,"load1":3}`))
	if err != nil {
		t.Fatal(err)
	}
	ts := judge(summarise(s))
	if len(ts) != 2 || ts[0].Met == nil || *ts[0].Met || !strings.Contains(ts[0].Measured, "1 failed downloads") {
		t.Fatalf("targets %+v", ts)
	}
}
