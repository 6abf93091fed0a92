package internalapi

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func goodReport() EdgeReport {
	return EdgeReport{URL: "https://edge-1.eu.example:8443", Region: "eu-west", Version: "v1.2.3",
		Permits: 64, FreePermits: 10, CacheFill: 0.5, HitRatio: 0.9, Ready: true}
}

// TestEdgeReportValidate: every absurd value of a heartbeat is refused with ErrMalformed, and a
// sane one passes (with 0 permits: an edge that proxies everything).
func TestEdgeReportValidate(t *testing.T) {
	ok := goodReport()
	if err := ok.Validate(); err != nil {
		t.Fatalf("good report: %v", err)
	}
	zero := goodReport()
	zero.Permits, zero.FreePermits = 0, 0
	if err := zero.Validate(); err != nil {
		t.Errorf("0 permits: %v", err)
	}
	for name, mut := range map[string]func(*EdgeReport){
		"no url":             func(r *EdgeReport) { r.URL = "" },
		"relative url":       func(r *EdgeReport) { r.URL = "/edge" },
		"ftp url":            func(r *EdgeReport) { r.URL = "ftp://edge" },
		"url with path":      func(r *EdgeReport) { r.URL = "https://edge/x" },
		"url with user":      func(r *EdgeReport) { r.URL = "https://u:p@edge" },
		"url with query":     func(r *EdgeReport) { r.URL = "https://edge?x=1" },
		"huge url":           func(r *EdgeReport) { r.URL = "https://" + strings.Repeat("a", MaxEdgeURL) },
		"empty region":       func(r *EdgeReport) { r.Region = "" },
		"upper region":       func(r *EdgeReport) { r.Region = "EU" },
		"region with space":  func(r *EdgeReport) { r.Region = "eu west" },
		"long region":        func(r *EdgeReport) { r.Region = strings.Repeat("a", 64) },
		"huge version":       func(r *EdgeReport) { r.Version = strings.Repeat("v", MaxEdgeVersion+1) },
		"negative permits":   func(r *EdgeReport) { r.Permits = -1 },
		"absurd permits":     func(r *EdgeReport) { r.Permits = MaxEdgePermits + 1 },
		"negative free":      func(r *EdgeReport) { r.FreePermits = -1 },
		"free above permits": func(r *EdgeReport) { r.FreePermits = r.Permits + 1 },
		"fill above 1":       func(r *EdgeReport) { r.CacheFill = 1.5 },
		"negative fill":      func(r *EdgeReport) { r.CacheFill = -0.1 },
		"NaN fill":           func(r *EdgeReport) { r.CacheFill = math.NaN() },
		"hit ratio above 1":  func(r *EdgeReport) { r.HitRatio = 2 },
		"NaN hit ratio":      func(r *EdgeReport) { r.HitRatio = math.NaN() },
		"infinite hit ratio": func(r *EdgeReport) { r.HitRatio = math.Inf(1) },
	} {
		r := goodReport()
		mut(&r)
		if err := r.Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Validate = %v, want ErrMalformed", name, err)
		}
	}
}

// TestDecodeEdgeReport: unknown fields, trailing data, wrong types and oversized bodies are
// refused; a good body round-trips.
func TestDecodeEdgeReport(t *testing.T) {
	good := `{"url":"https://e:1","region":"eu","version":"x","permits":4,"free_permits":4,"cache_fill":0,"hit_ratio":0,"ready":true}`
	r, err := DecodeEdgeReport([]byte(good))
	if err != nil || r.URL != "https://e:1" || r.Region != "eu" || r.Permits != 4 || !r.Ready {
		t.Fatalf("good body: %+v, %v", r, err)
	}
	for name, body := range map[string]string{
		"empty":         ``,
		"not json":      `hello`,
		"unknown field": strings.Replace(good, `"ready"`, `"readyy"`, 1),
		"trailing":      good + `{}`,
		"string permit": strings.Replace(good, `"permits":4`, `"permits":"4"`, 1),
		"huge permits":  strings.Replace(good, `"permits":4`, `"permits":1e30`, 1),
		"oversized":     good[:len(good)-1] + `,"x":"` + strings.Repeat("a", MaxEdgeReport) + `"}`,
	} {
		if _, err := DecodeEdgeReport([]byte(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func TestHeartbeatIntervalBounded(t *testing.T) {
	for secs, want := range map[int]time.Duration{-5: time.Second, 0: time.Second, 3: 3 * time.Second, 1 << 40: time.Minute} {
		if got := (EdgeAck{HeartbeatSeconds: secs}).HeartbeatInterval(); got != want {
			t.Errorf("HeartbeatSeconds %d: %v, want %v", secs, got, want)
		}
	}
}
