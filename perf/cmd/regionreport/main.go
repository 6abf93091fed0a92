// Command regionreport summarises a perf/regions.sh run: medians per case and client, the
// ratios issue 12's targets ask for (each said met or not), results.json, PNG plots (gonum/plot)
// and a Markdown section for perf/BENCHMARKS.md on standard output.
//
//	regionreport -o DIR [-command CMD] run.txt samples.jsonl
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Sample is one line of samples.jsonl.
type Sample struct {
	Round     int      `json:"round"`
	Case      string   `json:"case"`
	Client    string   `json:"client"`
	Seconds   float64  `json:"seconds"`
	Bytes     int64    `json:"bytes"`
	Load1     float64  `json:"load1"`
	EdgeCPU   *float64 `json:"edge_cpu,omitempty"`
	UDPDrops  *int64   `json:"client_b_udp_drops,omitempty"` // client-b's stack: receive buffer full / errors
	Killed    string   `json:"killed,omitempty"`
	KillAt    *float64 `json:"kill_at,omitempty"`
	AfterKill *float64 `json:"after_kill,omitempty"`
	RouteOut  *float64 `json:"route_out,omitempty"`
	Resumed   *float64 `json:"resumed,omitempty"` // seconds from the kill until bytes flowed again
	Exit      *int     `json:"exit,omitempty"`
	ByteExact *bool    `json:"byte_exact,omitempty"`
}

// Summary is one (case, client) over the rounds.
type Summary struct {
	Case      string    `json:"case"`
	Client    string    `json:"client"`
	Seconds   []float64 `json:"seconds"`
	Median    float64   `json:"median_seconds"`
	MBps      float64   `json:"median_mb_per_s"` // MiB/s
	Load1     []float64 `json:"load1"`
	EdgeCPU   []float64 `json:"edge_cpu_seconds,omitempty"`
	UDPDrops  []float64 `json:"client_b_udp_drops,omitempty"`
	AfterKill []float64 `json:"after_kill_seconds,omitempty"`
	RouteOut  []float64 `json:"route_out_seconds,omitempty"` // -1: the route still named it after 60 s
	Resumed   []float64 `json:"resumed_seconds,omitempty"`   // from the kill until bytes flowed again
	Failures  int       `json:"failures,omitempty"`          // failover: non-zero exit or wrong bytes
}

// Target is one row of issue 12's table.
type Target struct {
	What     string `json:"what"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      *bool  `json:"met"` // nil: not measured in this run
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("regionreport", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", ".", "directory for results.json and the PNG plots")
	command := fs.String("command", "perf/regions.sh", "the command line to quote in the report")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "usage: regionreport -o DIR [-command CMD] run.txt samples.jsonl")
		return 2
	}
	runTxt, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "regionreport: %v\n", err)
		return 1
	}
	f, err := os.Open(fs.Arg(1))
	if err != nil {
		fmt.Fprintf(stderr, "regionreport: %v\n", err)
		return 1
	}
	samples, err := readSamples(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "regionreport: %s: %v\n", fs.Arg(1), err)
		return 2
	}
	sums := summarise(samples)
	targets := judge(sums)
	res := map[string]any{"run": parseRun(runTxt), "summaries": sums, "targets": targets, "samples": samples}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "results.json"), append(b, '\n'), 0o644); err != nil {
		fmt.Fprintf(stderr, "regionreport: %v\n", err)
		return 1
	}
	if err := plots(*out, sums); err != nil {
		fmt.Fprintf(stderr, "regionreport: plots: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, markdown(*command, parseRun(runTxt), sums, targets))
	return 0
}

func readSamples(r io.Reader) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var s Sample
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if s.Case == "" || s.Client == "" || s.Round < 1 || !(s.Seconds > 0) || math.IsInf(s.Seconds, 0) || s.Bytes <= 0 {
			return nil, fmt.Errorf("line %d: want round ≥ 1, case, client, seconds > 0, bytes > 0", n)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no samples")
	}
	return out, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// caseOrder is the order of the report's rows.
var caseOrder = []string{"origin", "cold", "warm", "h1", "h3", "h1reno", "failover"}

func summarise(samples []Sample) []*Summary {
	by := map[[2]string]*Summary{}
	var keys [][2]string
	for _, s := range samples {
		k := [2]string{s.Case, s.Client}
		sum := by[k]
		if sum == nil {
			sum = &Summary{Case: s.Case, Client: s.Client}
			by[k] = sum
			keys = append(keys, k)
		}
		sum.Seconds = append(sum.Seconds, s.Seconds)
		sum.Load1 = append(sum.Load1, s.Load1)
		if s.EdgeCPU != nil {
			sum.EdgeCPU = append(sum.EdgeCPU, *s.EdgeCPU)
		}
		if s.UDPDrops != nil && (s.Case == "h1" || s.Case == "h3" || s.Case == "h1reno") {
			sum.UDPDrops = append(sum.UDPDrops, float64(*s.UDPDrops))
		}
		if s.AfterKill != nil {
			sum.AfterKill = append(sum.AfterKill, *s.AfterKill)
		}
		if s.Resumed != nil {
			sum.Resumed = append(sum.Resumed, *s.Resumed)
		}
		if s.Case == "failover" {
			ro := -1.0
			if s.RouteOut != nil {
				ro = *s.RouteOut
			}
			sum.RouteOut = append(sum.RouteOut, ro)
			if s.Exit == nil || *s.Exit != 0 || s.ByteExact == nil || !*s.ByteExact {
				sum.Failures++
			}
		}
		sum.MBps = float64(s.Bytes) / (1 << 20) // per-sample bytes; divided by the median below
	}
	rank := func(c string) int {
		if i := slices.Index(caseOrder, c); i >= 0 {
			return i
		}
		return len(caseOrder)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		if rank(keys[i][0]) != rank(keys[j][0]) {
			return rank(keys[i][0]) < rank(keys[j][0])
		}
		return keys[i][1] < keys[j][1]
	})
	out := make([]*Summary, 0, len(keys))
	for _, k := range keys {
		s := by[k]
		s.Median = median(s.Seconds)
		s.MBps /= s.Median
		out = append(out, s)
	}
	return out
}

func find(sums []*Summary, c, client string) *Summary {
	for _, s := range sums {
		if s.Case == c && s.Client == client {
			return s
		}
	}
	return nil
}

func judge(sums []*Summary) []Target {
	var ts []Target
	met := func(b bool) *bool { return &b }
	for _, client := range []string{"go", "hf"} {
		name := map[string]string{"go": "Go client", "hf": "hf_xet"}[client]
		o, w, c := find(sums, "origin", client), find(sums, "warm", client), find(sums, "cold", client)
		if o != nil && w != nil {
			r := o.Median / w.Median
			ts = append(ts, Target{What: "warm local edge vs origin, " + name, Target: "≥ 4× faster",
				Measured: fmt.Sprintf("%.2f× faster (%.1f s vs %.1f s)", r, w.Median, o.Median), Met: met(r >= 4)})
		}
		if o != nil && c != nil {
			r := c.Median / o.Median
			ts = append(ts, Target{What: "cold local edge vs origin, " + name, Target: "≤ 1.2× the origin's time",
				Measured: fmt.Sprintf("%.2f× (%.1f s vs %.1f s)", r, c.Median, o.Median), Met: met(r <= 1.2)})
		}
	}
	if h1, h3 := find(sums, "h1", "go"), find(sums, "h3", "go"); h1 != nil && h3 != nil {
		r := h1.Median / h3.Median
		word := "faster"
		if r < 1 {
			word = "slower"
		}
		ts = append(ts, Target{What: "HTTP/3 vs HTTP/1.1+TLS through a warm edge on the lossy path, Go client", Target: "HTTP/3 faster; by how much",
			Measured: fmt.Sprintf("HTTP/3 %s: %.1f s vs %.1f s (h1/h3 = %.2f)", word, h3.Median, h1.Median, r), Met: met(r > 1)})
	}
	if h1, h3 := find(sums, "h1reno", "go"), find(sums, "h3", "go"); h1 != nil && h3 != nil {
		r := h1.Median / h3.Median
		ts = append(ts, Target{What: "(context) HTTP/3 vs HTTP/1.1+TLS with the edge's TCP on Reno (loss-based, as quic-go's congestion control)", Target: "—",
			Measured: fmt.Sprintf("%.1f s vs %.1f s (h1/h3 = %.2f)", h3.Median, h1.Median, r)})
	}
	if f := find(sums, "failover", "go"); f != nil {
		worst := 0.0
		for _, ro := range f.RouteOut {
			if ro < 0 {
				worst = math.Inf(1)
			}
			worst = max(worst, ro)
		}
		ts = append(ts, Target{What: "dead edge taken out of the token route; Go client (--token-url) finishes", Target: "≤ 10 s; zero errors",
			Measured: fmt.Sprintf("route: worst %.1f s over %d kills (%s); client fetching again %s s and finished %s s after the kill; %d failed downloads",
				worst, len(f.RouteOut), list(f.RouteOut), list(f.Resumed), list(f.AfterKill), f.Failures),
			Met: met(worst <= 10 && f.Failures == 0)})
	}
	ts = append(ts, Target{What: "origin replica killed during uploads", Target: "zero acknowledged uploads lost",
		Measured: "not measured here (issue 12 item 4, its own test)"})
	return ts
}

func list(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, ", ")
}

// parseRun reads run.txt's "key: value" lines.
func parseRun(b []byte) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			m[k] = v
		}
	}
	return m
}

func markdown(command string, runInfo map[string]string, sums []*Summary, ts []Target) string {
	var b strings.Builder
	date, _, _ := strings.Cut(runInfo["date"], "T")
	fmt.Fprintf(&b, "## %s — simulated regions (issue 12 item 5)\n\n", date)
	fmt.Fprintf(&b, "Command: `%s` (perf/README.md, \"Simulated regions\"). Commit %s. %s.\n\n", command, runInfo["commit"], runInfo["machine"])
	fmt.Fprintf(&b, "Model: %s. Links (user-space emulator, perf/linkemu): %s. TCP: %s.\n\n", runInfo["model"], runInfo["links"], runInfo["tcp"])
	b.WriteString("| Case | Client | Median s | MiB/s | Rounds (s) | Load (1 min) | Cold edge CPU s | Client UDP drops |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.1f | %s | %s | %s | %s |\n", label(s.Case), s.Client, s.Median, s.MBps, list2(s.Seconds), list(s.Load1), list2(s.EdgeCPU), list0(s.UDPDrops))
	}
	b.WriteString("\n| Target (issue 12) | Wanted | Measured | Met |\n|---|---|---|---|\n")
	for _, t := range ts {
		m := "not measured"
		if t.Target == "—" {
			m = "—"
		} else if t.Met != nil {
			m = map[bool]string{true: "**met**", false: "**not met**"}[*t.Met]
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.What, t.Target, t.Measured, m)
	}
	return b.String()
}

func list2(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}

func list0(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(s, ", ")
}

func label(c string) string {
	return map[string]string{
		"origin": "origin directly (across 100 ms)", "cold": "cold local edge", "warm": "warm local edge",
		"h1": "HTTP/1.1+TLS, warm edge, lossy path", "h3": "HTTP/3, warm edge, lossy path",
		"h1reno":   "HTTP/1.1+TLS, edge's TCP on Reno, lossy path",
		"failover": "edge killed at 50 % (one shard)",
	}[c] + " (`" + c + "`)"
}

// plots draws the medians (downloads.png: origin, cold, warm per client; protocols.png: h1 vs
// h3) and every failover round's progress (failover.png, from failover-rN.tsv in dir).
func plots(dir string, sums []*Summary) error {
	var clients []string
	for _, s := range sums {
		if !slices.Contains(clients, s.Client) && (s.Case == "origin" || s.Case == "cold" || s.Case == "warm") {
			clients = append(clients, s.Client)
		}
	}
	if len(clients) > 0 {
		p := plot.New()
		p.Title.Text = "Whole model, median of rounds"
		p.Y.Label.Text = "seconds"
		w := vg.Points(18)
		for i, c := range clients {
			vals := plotter.Values{}
			for _, k := range []string{"origin", "cold", "warm"} {
				v := 0.0
				if s := find(sums, k, c); s != nil {
					v = s.Median
				}
				vals = append(vals, v)
			}
			bars, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return err
			}
			bars.Color = plotutil.Color(i)
			bars.Offset = w * vg.Length(float64(i)-float64(len(clients)-1)/2)
			p.Add(bars)
			p.Legend.Add(c, bars)
		}
		p.Legend.Top = true
		p.NominalX("origin", "cold edge", "warm edge")
		if err := p.Save(6*vg.Inch, 4*vg.Inch, filepath.Join(dir, "downloads.png")); err != nil {
			return err
		}
	}
	if h1, h3 := find(sums, "h1", "go"), find(sums, "h3", "go"); h1 != nil && h3 != nil {
		p := plot.New()
		p.Title.Text = "Warm edge over the lossy path (Go client), median"
		p.Y.Label.Text = "seconds"
		bars, err := plotter.NewBarChart(plotter.Values{h1.Median, h3.Median}, vg.Points(30))
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(0)
		p.Add(bars)
		p.NominalX("HTTP/1.1+TLS", "HTTP/3")
		if err := p.Save(4*vg.Inch, 4*vg.Inch, filepath.Join(dir, "protocols.png")); err != nil {
			return err
		}
	}
	tsvs, _ := filepath.Glob(filepath.Join(dir, "failover-r*.tsv"))
	if len(tsvs) > 0 {
		p := plot.New()
		p.Title.Text = "Edge killed at 50 %: bytes received (Go client, --token-url)"
		p.X.Label.Text = "seconds"
		p.Y.Label.Text = "MiB"
		for i, f := range tsvs {
			pts, err := readTSV(f)
			if err != nil {
				return err
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(i)
			p.Add(l)
			p.Legend.Add(strings.TrimSuffix(filepath.Base(f), ".tsv"), l)
		}
		p.Legend.Top = true
		p.Legend.Left = true
		if err := p.Save(6*vg.Inch, 4*vg.Inch, filepath.Join(dir, "failover.png")); err != nil {
			return err
		}
	}
	return nil
}

func readTSV(path string) (plotter.XYs, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pts plotter.XYs
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		a, c, ok := strings.Cut(l, "\t")
		x, e1 := strconv.ParseFloat(a, 64)
		y, e2 := strconv.ParseFloat(c, 64)
		if !ok || e1 != nil || e2 != nil {
			return nil, fmt.Errorf("%s line %d: want SECONDS<tab>BYTES", path, i+1)
		}
		pts = append(pts, plotter.XY{X: x, Y: y / (1 << 20)})
	}
	return pts, nil
}
