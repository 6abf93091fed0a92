package internalapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"time"
)

// EdgesPath: POST with an EdgeReport (JSON, at most MaxEdgeReport bytes) → 200 EdgeAck. An
// edge registers with its first report and stays registered by sending one every
// EdgeAck.HeartbeatSeconds (docs/protocol.md §16.3, docs/architecture.md §7).
const EdgesPath = "/internal/v1/edges"

// Limits of an edge report.
const (
	MaxEdgeReport  = 4 << 10
	MaxEdgeURL     = 1024
	MaxEdgeVersion = 128
	// MaxEdgePermits bounds the permits an edge may claim: far above any real edge (the
	// default is a few dozen), low enough that a forged report cannot dwarf every real one.
	MaxEdgePermits = 1 << 16
)

// regionRE is the form of a region name: what a Prometheus label, a DNS label and a config key
// all accept without quoting.
var regionRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidRegion reports whether s is a well-formed region name (lower-case letters, digits and
// inner hyphens, 1 to 63 characters).
func ValidRegion(s string) bool { return regionRE.MatchString(s) }

// EdgeReport is what an edge says about itself in each heartbeat.
type EdgeReport struct {
	// URL is the edge's public base URL: the casUrl clients are given. It identifies the edge.
	URL     string `json:"url"`
	Region  string `json:"region"`
	Version string `json:"version"`
	// Permits is the edge's reconstruction permit count; FreePermits how many were free when
	// the report was made (0: the edge would proxy new reconstructions to the origin).
	Permits     int `json:"permits"`
	FreePermits int `json:"free_permits"`
	// CacheFill is the data cache's used fraction of its capacity, HitRatio the fraction of
	// segment reads since the previous report answered from it (0 when there were none).
	CacheFill float64 `json:"cache_fill"`
	HitRatio  float64 `json:"hit_ratio"`
	// Ready is the edge's own /readyz verdict; a not-ready edge is not handed out.
	Ready bool `json:"ready"`
}

// EdgeAck answers a report: when to send the next one.
type EdgeAck struct {
	HeartbeatSeconds int `json:"heartbeat_seconds"`
}

// Validate rejects a report with a value no working edge sends. Every error wraps ErrMalformed.
func (r *EdgeReport) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: edge report: "+format, append([]any{ErrMalformed}, args...)...)
	}
	if len(r.URL) > MaxEdgeURL {
		return bad("url longer than %d bytes", MaxEdgeURL)
	}
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return bad("url %q is not an http(s) base URL", r.URL)
	}
	if !ValidRegion(r.Region) {
		return bad("region %q is not a region name", r.Region)
	}
	if len(r.Version) > MaxEdgeVersion {
		return bad("version longer than %d bytes", MaxEdgeVersion)
	}
	if r.Permits < 0 || r.Permits > MaxEdgePermits {
		return bad("permits %d outside 0..%d", r.Permits, MaxEdgePermits)
	}
	if r.FreePermits < 0 || r.FreePermits > r.Permits {
		return bad("free_permits %d outside 0..permits (%d)", r.FreePermits, r.Permits)
	}
	// NaN fails both comparisons' negation; JSON cannot carry it, but a caller in Go can.
	if !(r.CacheFill >= 0 && r.CacheFill <= 1) {
		return bad("cache_fill %v outside 0..1", r.CacheFill)
	}
	if !(r.HitRatio >= 0 && r.HitRatio <= 1) {
		return bad("hit_ratio %v outside 0..1", r.HitRatio)
	}
	return nil
}

// DecodeEdgeReport parses and validates a report body (at most MaxEdgeReport bytes; unknown
// fields are refused so that a typo is an error, not a silently missing value).
func DecodeEdgeReport(b []byte) (EdgeReport, error) {
	var r EdgeReport
	if len(b) > MaxEdgeReport {
		return r, fmt.Errorf("%w: edge report longer than %d bytes", ErrMalformed, MaxEdgeReport)
	}
	if err := strictJSON(b, &r); err != nil {
		return r, fmt.Errorf("%w: edge report: %v", ErrMalformed, err)
	}
	return r, r.Validate()
}

// HeartbeatInterval is the interval an EdgeAck asks for, bounded to 1 s..1 min so that a
// broken answer neither floods the origin nor silences the edge.
func (a EdgeAck) HeartbeatInterval() time.Duration {
	return time.Duration(min(max(a.HeartbeatSeconds, 1), 60)) * time.Second
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}
