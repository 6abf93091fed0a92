package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sample is one Prometheus sample: name, label set text (with braces, "" when none), value.
type sample struct {
	name, labels string
	value        float64
}

// samples are the samples of every scraped server, by server ("origin", "edge0", ...).
type samples map[string][]sample

// parseExposition reads a Prometheus text exposition.
func parseExposition(r io.Reader) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		var s sample
		rest := line
		if i := strings.IndexAny(line, "{ "); i < 0 {
			continue
		} else if line[i] == '{' {
			end := labelsEnd(line[i:])
			if end < 0 {
				return nil, fmt.Errorf("metrics line %q: unterminated labels", line)
			}
			s.name, s.labels, rest = line[:i], line[i:i+end+1], line[i+end+1:]
		} else {
			s.name, rest = line[:i], line[i:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: value: %w", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// labelsEnd returns the index of the '}' closing the label set s starts with, or -1.
func labelsEnd(s string) int {
	quoted := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i
		}
	}
	return -1
}

// scrape reads every configured /metrics URL.
func (r *replayer) scrape(ctx context.Context) (samples, error) {
	out := samples{}
	urls := map[string]string{}
	if r.c.originMetrics != "" {
		urls["origin"] = r.c.originMetrics
	}
	for i, u := range r.c.edgeMetrics {
		urls[fmt.Sprintf("edge%d", i)] = u
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	for name, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", name, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("metrics of %s: GET %s: %d", name, u, resp.StatusCode)
		}
		ss, err := parseExposition(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", name, err)
		}
		out[name] = ss
	}
	return out, nil
}

// sum adds the samples called name on servers whose name starts with prefix and whose labels
// contain every one of labels.
func (s samples) sum(prefix, name string, labels ...string) (float64, bool) {
	var v float64
	found := false
	for server, ss := range s {
		if !strings.HasPrefix(server, prefix) {
			continue
		}
	next:
		for _, x := range ss {
			if x.name != name {
				continue
			}
			for _, l := range labels {
				if !strings.Contains(x.labels, l) {
					continue next
				}
			}
			v += x.value
			found = true
		}
	}
	return v, found
}

// delta is a counter's increase over the run; ok is false when neither scrape had it.
func delta(before, after samples, prefix, name string, labels ...string) (float64, bool) {
	b, _ := before.sum(prefix, name, labels...)
	a, ok := after.sum(prefix, name, labels...)
	return a - b, ok
}

// serverMetrics are the servers' own counts over the run (nil fields: not exported by the
// servers scraped).
type serverMetrics struct {
	// EdgeHitRatio is data-cache hits ÷ (hits + misses) over all edges.
	EdgeHitRatio *float64 `json:"edge_hit_ratio,omitempty"`
	// EdgeServedBytes and EdgePulledBytes: xorb bytes the edges served on their transfer route
	// and received from the origin. OriginOffload is 1 − pulled ÷ served: the share of the bytes
	// edges delivered that the origin did not have to send.
	EdgeServedBytes *float64 `json:"edge_served_bytes,omitempty"`
	EdgePulledBytes *float64 `json:"edge_pulled_bytes,omitempty"`
	OriginOffload   *float64 `json:"origin_offload,omitempty"`
	// ObjstoreReadBytes: bytes the origin opened for reading in the object store (Get,
	// GetRange). ReadAmplification is that ÷ the transfer bytes the replay's clients received.
	ObjstoreReadBytes *float64 `json:"objstore_read_bytes,omitempty"`
	ReadAmplification *float64 `json:"read_amplification,omitempty"`
	// ObjstoreCalls counts the origin's object store calls (MinIO requests with the s3 store)
	// by method.
	ObjstoreCalls map[string]float64 `json:"objstore_calls,omitempty"`
	// IngestXorbBytes is the xorb bytes the origin accepted; IngestDedup the file bytes the
	// replay uploaded ÷ that.
	IngestXorbBytes *float64 `json:"ingest_xorb_bytes,omitempty"`
	IngestDedup     *float64 `json:"ingest_dedup,omitempty"`
	// OriginTransferBytes: xorb bytes the origin served on its own transfer route.
	OriginTransferBytes *float64 `json:"origin_transfer_bytes,omitempty"`
}

func ptr(v float64) *float64 { return &v }

// derive computes the server metrics from the scrapes before and after the run.
func derive(before, after samples, res *results) *serverMetrics {
	m := &serverMetrics{}
	hits, okh := delta(before, after, "edge", "xet_edge_datacache_hits_total")
	miss, okm := delta(before, after, "edge", "xet_edge_datacache_misses_total")
	if okh && okm && hits+miss > 0 {
		m.EdgeHitRatio = ptr(hits / (hits + miss))
	}
	served, oks := delta(before, after, "edge", "xet_edge_transfer_served_bytes_total")
	pulled, okp := delta(before, after, "edge", "xet_edge_origin_xorb_bytes_total")
	if oks {
		m.EdgeServedBytes = ptr(served)
	}
	if okp {
		m.EdgePulledBytes = ptr(pulled)
	}
	if oks && okp && served > 0 {
		m.OriginOffload = ptr(1 - pulled/served)
	}
	get, okg := delta(before, after, "origin", "xet_origin_objstore_bytes_total", `method="Get"`)
	rng, okr := delta(before, after, "origin", "xet_origin_objstore_bytes_total", `method="GetRange"`)
	if okg || okr {
		m.ObjstoreReadBytes = ptr(get + rng)
		var clientBytes int64
		for op, o := range res.Ops {
			if op != "upload" {
				clientBytes += o.TransferBytes
			}
		}
		if clientBytes > 0 {
			m.ReadAmplification = ptr((get + rng) / float64(clientBytes))
		}
	}
	for _, ss := range after {
		for _, x := range ss {
			if x.name != "xet_origin_objstore_call_seconds_count" {
				continue
			}
			method := labelValue(x.labels, "method")
			if m.ObjstoreCalls == nil {
				m.ObjstoreCalls = map[string]float64{}
			}
			m.ObjstoreCalls[method] += x.value
		}
	}
	for _, ss := range before {
		for _, x := range ss {
			if x.name == "xet_origin_objstore_call_seconds_count" && m.ObjstoreCalls != nil {
				m.ObjstoreCalls[labelValue(x.labels, "method")] -= x.value
			}
		}
	}
	if xb, ok := delta(before, after, "origin", "xet_origin_ingest_bytes_total", `kind="xorb"`); ok {
		m.IngestXorbBytes = ptr(xb)
		if up := res.Ops["upload"]; up != nil && xb > 0 {
			m.IngestDedup = ptr(float64(up.Bytes) / xb)
		}
	}
	if ob, ok := delta(before, after, "origin", "xet_origin_transfer_bytes_total"); ok {
		m.OriginTransferBytes = ptr(ob)
	}
	return m
}

// labelValue returns the value of label name in a label set text.
func labelValue(labels, name string) string {
	i := strings.Index(labels, name+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(name)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return rest
}

func (m *serverMetrics) print(w io.Writer) {
	f := func(p *float64, format string) string {
		if p == nil {
			return "n/a"
		}
		return fmt.Sprintf(format, *p)
	}
	fmt.Fprintf(w, "server: edge hit ratio %s, origin offload %s (edges served %s B, pulled %s B), read amplification %s (object store read %s B)\n",
		f(m.EdgeHitRatio, "%.4f"), f(m.OriginOffload, "%.4f"), f(m.EdgeServedBytes, "%.0f"), f(m.EdgePulledBytes, "%.0f"),
		f(m.ReadAmplification, "%.3f"), f(m.ObjstoreReadBytes, "%.0f"))
	fmt.Fprintf(w, "server: origin transfer %s B, ingest xorb bytes %s (file bytes / ingested %s)\n",
		f(m.OriginTransferBytes, "%.0f"), f(m.IngestXorbBytes, "%.0f"), f(m.IngestDedup, "%.2f"))
	if len(m.ObjstoreCalls) > 0 {
		methods := make([]string, 0, len(m.ObjstoreCalls))
		for k := range m.ObjstoreCalls {
			methods = append(methods, k)
		}
		slices.Sort(methods)
		var parts []string
		for _, k := range methods {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, math.Round(m.ObjstoreCalls[k])))
		}
		fmt.Fprintf(w, "server: object store calls: %s\n", strings.Join(parts, ", "))
	}
}
