// Command perfplot draws the results of perf/cmd/replay (its -out JSON) as PNG files: the
// latency CDF of every operation (log scale), requests and errors per second with the p99 of
// each second, and the servers' hit ratio and origin offload over the run.
//
//	perfplot -o perf/results/run1 replay-cold.json replay-warm.json
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// result is the part of replay's JSON drawn here.
type result struct {
	Ops map[string]struct {
		CDF [][2]float64 `json:"cdf_ms"`
	} `json:"ops"`
	Timeline []struct {
		Done   int     `json:"done"`
		Errors int     `json:"errors"`
		P99ms  float64 `json:"p99_ms"`
	} `json:"timeline"`
	MetricsTimeline []struct {
		T             float64  `json:"t"`
		EdgeHitRatio  *float64 `json:"edge_hit_ratio"`
		OriginOffload *float64 `json:"origin_offload"`
	} `json:"metrics_timeline"`
}

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("perfplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", ".", "directory for the PNG files (created)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: perfplot [-o DIR] RESULT.json...")
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "perfplot: %v\n", err)
		return 1
	}
	for _, in := range fs.Args() {
		b, err := os.ReadFile(in)
		if err != nil {
			fmt.Fprintf(stderr, "perfplot: %v\n", err)
			return 1
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			fmt.Fprintf(stderr, "perfplot: %s: not replay results: %v\n", in, err)
			return 1
		}
		if len(r.Ops) == 0 {
			fmt.Fprintf(stderr, "perfplot: %s: no operations (is it replay -out JSON?)\n", in)
			return 1
		}
		base := filepath.Join(*out, strings.TrimSuffix(filepath.Base(in), ".json"))
		files, err := draw(r, base)
		if err != nil {
			fmt.Fprintf(stderr, "perfplot: %s: %v\n", in, err)
			return 1
		}
		for _, f := range files {
			fmt.Fprintln(stderr, "perfplot: wrote", f)
		}
	}
	return 0
}

// draw writes the plots of r to base-*.png and returns their paths.
func draw(r result, base string) ([]string, error) {
	var files []string
	save := func(p *plot.Plot, suffix string) error {
		f := base + "-" + suffix + ".png"
		if err := p.Save(7*vg.Inch, 4*vg.Inch, f); err != nil {
			return err
		}
		files = append(files, f)
		return nil
	}
	// Latency CDFs.
	p := plot.New()
	p.Title.Text = "latency from the scheduled time (CDF)"
	p.X.Label.Text, p.Y.Label.Text = "ms (log)", "fraction of requests"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	ops := make([]string, 0, len(r.Ops))
	for op := range r.Ops {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	var lines []any
	for _, op := range ops {
		var xy plotter.XYs
		for _, pt := range r.Ops[op].CDF {
			xy = append(xy, plotter.XY{X: max(pt[0], 0.001), Y: pt[1]})
		}
		if len(xy) > 0 {
			lines = append(lines, op, xy)
		}
	}
	if len(lines) == 0 {
		return nil, errors.New("no latencies to draw")
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, err
	}
	if err := save(p, "latency-cdf"); err != nil {
		return nil, err
	}
	// Throughput, errors and p99 per second.
	p = plot.New()
	p.Title.Text = "requests per second (done, errors) and p99 of each second (ms)"
	p.X.Label.Text = "second of the run"
	var done, errs, p99 plotter.XYs
	for i, s := range r.Timeline {
		done = append(done, plotter.XY{X: float64(i), Y: float64(s.Done)})
		errs = append(errs, plotter.XY{X: float64(i), Y: float64(s.Errors)})
		p99 = append(p99, plotter.XY{X: float64(i), Y: s.P99ms})
	}
	if len(done) > 0 {
		if err := plotutil.AddLines(p, "done/s", done, "errors/s", errs, "p99 ms", p99); err != nil {
			return nil, err
		}
	}
	if err := save(p, "timeline"); err != nil {
		return nil, err
	}
	// Hit ratio and offload.
	if len(r.MetricsTimeline) > 0 {
		p = plot.New()
		p.Title.Text = "edge hit ratio and origin offload since the start"
		p.X.Label.Text = "second of the run"
		p.Y.Min, p.Y.Max = 0, 1
		var hit, off plotter.XYs
		for _, m := range r.MetricsTimeline {
			if m.EdgeHitRatio != nil {
				hit = append(hit, plotter.XY{X: m.T, Y: *m.EdgeHitRatio})
			}
			if m.OriginOffload != nil {
				off = append(off, plotter.XY{X: m.T, Y: *m.OriginOffload})
			}
		}
		for _, l := range []struct {
			name string
			xy   plotter.XYs
			c    color.Color
		}{{"edge hit ratio", hit, color.RGBA{B: 200, A: 255}}, {"origin offload", off, color.RGBA{R: 200, A: 255}}} {
			if len(l.xy) == 0 {
				continue
			}
			ln, err := plotter.NewLine(l.xy)
			if err != nil {
				return nil, err
			}
			ln.Color = l.c
			p.Add(ln)
			p.Legend.Add(l.name, ln)
		}
		if err := save(p, "hit-ratio"); err != nil {
			return nil, err
		}
	}
	return files, nil
}
