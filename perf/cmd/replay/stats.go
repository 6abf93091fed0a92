package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/perf/fixture"
	"github.com/xetcdn/xetcdn/perf/hdr"
	"github.com/xetcdn/xetcdn/perf/trace"
)

// opStats aggregates one operation.
type opStats struct {
	hist     *hdr.Histogram // latency from the scheduled time, successful requests
	n, errs  int
	classes  map[string]int
	examples map[string]string // one error text per class
	bytes    int64
	transfer int64
	changed  int64
	newChunk int64
	waited   int
}

// second is one second of the run.
type second struct {
	Done   int     `json:"done"`
	Errors int     `json:"errors"`
	Bytes  int64   `json:"bytes"`
	P99ms  float64 `json:"p99_ms"`
	hist   *hdr.Histogram
}

type stats struct {
	mu        sync.Mutex
	ops       map[trace.Op]*opStats
	secs      []*second
	issued    int
	done      int
	errs      int
	maxLag    time.Duration
	notIssued int
	uploads   []UploadRow
	start     time.Time
	end       time.Time
}

func newStats() *stats { return &stats{ops: map[trace.Op]*opStats{}} }

func (s *stats) lag(d time.Duration) {
	s.mu.Lock()
	s.issued++
	s.maxLag = max(s.maxLag, d)
	s.mu.Unlock()
}

func (s *stats) snapshot() (done, errs, inflight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done, s.errs, s.issued - s.done
}

// add records the outcome of rec, scheduled at at.
func (s *stats) add(rec trace.Record, at time.Time, o outcome) {
	lat := time.Since(at)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.ops[rec.Op]
	if st == nil {
		st = &opStats{hist: hdr.New(), classes: map[string]int{}, examples: map[string]string{}}
		s.ops[rec.Op] = st
	}
	st.n++
	s.done++
	if o.waited {
		st.waited++
	}
	sec := int(time.Since(s.start) / time.Second)
	sec = max(sec, 0)
	for len(s.secs) <= sec {
		s.secs = append(s.secs, &second{hist: hdr.New()})
	}
	if o.err != nil {
		st.errs++
		s.errs++
		c := classify(o.err)
		st.classes[c]++
		if _, ok := st.examples[c]; !ok {
			st.examples[c] = o.err.Error()
		}
		s.secs[sec].Errors++
		return
	}
	st.hist.Record(lat)
	st.bytes += o.bytes
	st.transfer += o.transfer
	st.changed += o.changed
	st.newChunk += o.newChunks
	if rec.Op == trace.Upload {
		s.uploads = append(s.uploads, UploadRow{Line: lineOf(nil, o.index), File: trace.ContentOf(rec).String(), Size: o.bytes,
			Sent: o.transfer, Changed: o.changed, NewChunks: o.newChunks})
	}
	s.secs[sec].Done++
	s.secs[sec].Bytes += o.bytes
	s.secs[sec].hist.Record(lat)
}

// OpResult is one operation's line of the results.
type OpResult struct {
	Requests     int               `json:"requests"`
	Errors       int               `json:"errors"`
	ErrorClasses map[string]int    `json:"error_classes,omitempty"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	PerSecond    float64           `json:"per_second"`
	P50ms        float64           `json:"p50_ms"`
	P90ms        float64           `json:"p90_ms"`
	P99ms        float64           `json:"p99_ms"`
	P999ms       float64           `json:"p999_ms"`
	MaxMs        float64           `json:"max_ms"`
	MeanMs       float64           `json:"mean_ms"`
	Bytes        int64             `json:"bytes"`
	// TransferBytes: downloads, bytes received from transfer URLs; uploads, body bytes sent.
	TransferBytes int64 `json:"transfer_bytes"`
	// ChangedBytes: uploads, bytes in the 1 MiB blocks that differ from the previous version
	// (trace.Content.ChangedBlocks: every block of a changed span).
	ChangedBytes int64 `json:"changed_bytes,omitempty"`
	// NewChunkBytes: uploads, bytes of the files' chunks that no file on the server had (the
	// lower bound of TransferBytes; perf/README.md, "new-chunk bytes").
	NewChunkBytes   int64      `json:"new_chunk_bytes,omitempty"`
	WaitedForUpload int        `json:"waited_for_upload,omitempty"`
	CDF             []cdfPoint `json:"cdf_ms,omitempty"`
}

type cdfPoint [2]float64 // latency ms, fraction at or below

// results is everything a run reports.
type results struct {
	Trace       string                 `json:"trace"`
	Started     time.Time              `json:"started"`
	Seconds     float64                `json:"seconds"`
	Speed       float64                `json:"speed"`
	Concurrency int                    `json:"concurrency"`
	Requests    int                    `json:"requests"`
	Errors      int                    `json:"errors"`
	NotIssued   int                    `json:"not_issued,omitempty"`
	Interrupted bool                   `json:"interrupted,omitempty"`
	MaxLagMs    float64                `json:"max_issue_lag_ms"`
	Ops         map[trace.Op]*OpResult `json:"ops"`
	Timeline    []*second              `json:"timeline"`
	Server      *serverMetrics         `json:"server,omitempty"`
	// MetricsTimeline: the servers' cumulative hit ratio and offload during the run.
	MetricsTimeline []metricsPoint     `json:"metrics_timeline,omitempty"`
	CPU             map[string]cpuCost `json:"cpu,omitempty"`
	// Uploads: every successful upload, in the order they ended.
	Uploads []UploadRow `json:"uploads,omitempty"`
}

// UploadRow is one upload: its bytes sent against the bytes it changed and its lower bound.
type UploadRow struct {
	Line      int    `json:"line"` // trace line
	File      string `json:"file"`
	Size      int64  `json:"size"`
	Sent      int64  `json:"sent"`
	Changed   int64  `json:"changed"`
	NewChunks int64  `json:"new_chunk_bytes"`
}

type cpuCost struct {
	Seconds      float64 `json:"seconds"`
	MsPerRequest float64 `json:"ms_per_request"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func (s *stats) results(c *config) *results {
	s.mu.Lock()
	defer s.mu.Unlock()
	secs := s.end.Sub(s.start).Seconds()
	res := &results{Trace: c.tracePath, Started: s.start.UTC(), Seconds: math.Round(secs*1000) / 1000, Speed: c.speed,
		Concurrency: c.concurrency, Requests: s.done, Errors: s.errs, NotIssued: s.notIssued, MaxLagMs: ms(s.maxLag),
		Ops: map[trace.Op]*OpResult{}, Timeline: s.secs, Uploads: s.uploads}
	for op, st := range s.ops {
		h := st.hist
		o := &OpResult{Requests: st.n, Errors: st.errs, PerSecond: math.Round(float64(st.n)/max(secs, 1e-9)*100) / 100,
			P50ms: ms(h.Quantile(0.5)), P90ms: ms(h.Quantile(0.9)), P99ms: ms(h.Quantile(0.99)), P999ms: ms(h.Quantile(0.999)),
			MaxMs: ms(h.Max()), MeanMs: ms(h.Mean()), Bytes: st.bytes, TransferBytes: st.transfer, ChangedBytes: st.changed,
			NewChunkBytes:   st.newChunk,
			WaitedForUpload: st.waited}
		if len(st.classes) > 0 {
			o.ErrorClasses, o.ErrorSamples = st.classes, st.examples
		}
		for _, p := range h.CDF() {
			o.CDF = append(o.CDF, cdfPoint{ms(p.Value), p.Fraction})
		}
		res.Ops[op] = o
	}
	for _, sec := range s.secs {
		sec.P99ms = ms(sec.hist.Quantile(0.99))
	}
	return res
}

// cpu sets the CPU cost per request of each -pid process between two readings.
func (res *results) cpu(before, after map[string]time.Duration) {
	for name, a := range after {
		b, ok := before[name]
		if !ok {
			continue
		}
		if res.CPU == nil {
			res.CPU = map[string]cpuCost{}
		}
		d := (a - b).Seconds()
		res.CPU[name] = cpuCost{Seconds: d, MsPerRequest: math.Round(d*1e3/float64(max(res.Requests, 1))*1e3) / 1e3}
	}
}

// cpu reads the CPU time of every -pid process.
func (r *replayer) cpu() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range r.c.pids {
		if d, err := fixture.ProcCPU(pid); err == nil {
			out[name] = d
		} else {
			fmt.Fprintf(r.log, "replay: CPU of %s (pid %d): %v\n", name, pid, err)
		}
	}
	return out
}

// print writes the human summary.
func (res *results) print(w io.Writer) {
	fmt.Fprintf(w, "replay: %d requests in %.1f s (speed %gx, concurrency %d), %d errors, max issue lag %.1f ms",
		res.Requests, res.Seconds, res.Speed, res.Concurrency, res.Errors, res.MaxLagMs)
	if res.Interrupted {
		fmt.Fprintf(w, ", INTERRUPTED (%d requests not issued)", res.NotIssued)
	}
	fmt.Fprintln(w)
	ops := make([]string, 0, len(res.Ops))
	for op := range res.Ops {
		ops = append(ops, string(op))
	}
	slices.Sort(ops)
	fmt.Fprintf(w, "%-16s %8s %7s %8s %9s %9s %9s %9s %9s %12s\n", "op", "requests", "errors", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "bytes")
	for _, op := range ops {
		o := res.Ops[trace.Op(op)]
		fmt.Fprintf(w, "%-16s %8d %7d %8.2f %9.2f %9.2f %9.2f %9.2f %9.2f %12d\n", op, o.Requests, o.Errors, o.PerSecond,
			o.P50ms, o.P90ms, o.P99ms, o.P999ms, o.MaxMs, o.Bytes)
		for c, n := range o.ErrorClasses {
			fmt.Fprintf(w, "    error %s: %d (e.g. %s)\n", c, n, o.ErrorSamples[c])
		}
		if o.WaitedForUpload > 0 {
			fmt.Fprintf(w, "    %d waited for the upload of the file (downloads) or of its previous version (uploads)\n", o.WaitedForUpload)
		}
	}
	if up := res.Ops[trace.Upload]; up != nil && up.TransferBytes > 0 {
		fmt.Fprintf(w, "uploads: %d file bytes, %d sent (dedup %.2fx), %d in changed blocks: sent/changed %.3f\n",
			up.Bytes, up.TransferBytes, float64(up.Bytes)/float64(up.TransferBytes), up.ChangedBytes,
			float64(up.TransferBytes)/math.Max(1, float64(up.ChangedBytes)))
		if up.NewChunkBytes > 0 {
			fmt.Fprintf(w, "uploads: new-chunk bytes %d (lower bound): sent/new-chunks %.3f, new-chunks/changed %.3f\n",
				up.NewChunkBytes, float64(up.TransferBytes)/math.Max(1, float64(up.NewChunkBytes)),
				float64(up.NewChunkBytes)/math.Max(1, float64(up.ChangedBytes)))
		}
	}
	if m := res.Server; m != nil {
		m.print(w)
	}
	names := make([]string, 0, len(res.CPU))
	for n := range res.CPU {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "cpu %s: %.2f s, %.3f ms per request\n", n, res.CPU[n].Seconds, res.CPU[n].MsPerRequest)
	}
}

func (res *results) writeJSON(path string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
