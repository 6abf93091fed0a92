package opscheck

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestExposedNames(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
		err  bool
	}{
		{name: "empty", in: "", want: nil},
		{name: "counter and gauge", in: "# HELP a_total x\n# TYPE a_total counter\na_total 1\n# TYPE g gauge\ng 2\n",
			want: []string{"a_total", "g"}},
		{name: "histogram series, not the bare name",
			in:   "# TYPE h_seconds histogram\nh_seconds_bucket{le=\"+Inf\"} 1\nh_seconds_sum 0.1\nh_seconds_count 1\n",
			want: []string{"h_seconds_bucket", "h_seconds_count", "h_seconds_sum"}},
		{name: "summary", in: "# TYPE go_gc_duration_seconds summary\n",
			want: []string{"go_gc_duration_seconds", "go_gc_duration_seconds_count", "go_gc_duration_seconds_sum"}},
		{name: "samples without TYPE", in: "x_total{a=\"b c\"} 3\ny 4 1700000000\n", want: []string{"x_total", "y"}},
		{name: "comment lines ignored", in: "# just a comment\n#\n# EOF\n", want: nil},
		{name: "unknown type", in: "# TYPE a frobnicator\n", err: true},
		{name: "short TYPE", in: "# TYPE a\n", err: true},
		{name: "bad name in TYPE", in: "# TYPE 1a counter\n", err: true},
		{name: "bad sample name", in: "a-b 1\n", err: true},
		{name: "sample without value", in: "lonely\n", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExposedNames(strings.NewReader(tc.in))
			if tc.err {
				if !errors.Is(err, ErrExposition) {
					t.Fatalf("err = %v, want ErrExposition", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, tc.want) {
				t.Fatalf("names = %q, want %q", names, tc.want)
			}
		})
	}
}

func TestExposedNamesLongLine(t *testing.T) {
	_, err := ExposedNames(strings.NewReader("a{l=\"" + strings.Repeat("x", maxLine) + "\"} 1\n"))
	if !errors.Is(err, ErrExposition) {
		t.Fatalf("err = %v, want ErrExposition for a line over %d bytes", err, maxLine)
	}
}

func TestMetricRefs(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"sum by (route) (rate(xet_origin_http_requests_total{code=~\"5..\"}[5m]))", []string{"xet_origin_http_requests_total"}},
		{"histogram_quantile(0.99, sum by (le) (rate(xet_edge_recon_duration_seconds_bucket[5m])))",
			[]string{"xet_edge_recon_duration_seconds_bucket"}},
		{"rate(xet_a_total[1m]) / rate(xet_b_total[1m]) + rate(xet_a_total[1m])", []string{"xet_a_total", "xet_b_total"}},
		{"process_resident_memory_bytes and go_goroutines", []string{"go_goroutines", "process_resident_memory_bytes"}},
		{"my_xet_thing + other_go_x", nil},
		{"xetcdn origin (title)", nil},
		{"label_values(xet_origin_http_requests_total, instance)", []string{"xet_origin_http_requests_total"}},
		{"trailing underscore xet_foo_ is trimmed", []string{"xet_foo"}},
	}
	for _, tc := range tests {
		if got := MetricRefs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("MetricRefs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRunbookPath(t *testing.T) {
	tests := []struct {
		url, want string
	}{
		{"https://github.com/xetcdn/xetcdn/blob/main/ops/runbooks/origin-5xx-ratio.md", "ops/runbooks/origin-5xx-ratio.md"},
		{"ops/runbooks/edge-verify-failures.md", "ops/runbooks/edge-verify-failures.md"},
		{"https://example.com/ops/runbooks/", ""},
		{"https://example.com/ops/runbooks/x.md#anchor", ""},
		{"https://example.com/runbooks/x.md", ""},
		{"https://example.com/ops/runbooks/../secret.md", ""},
	}
	for _, tc := range tests {
		got, err := RunbookPath(tc.url)
		if tc.want == "" {
			if !errors.Is(err, ErrRunbook) {
				t.Errorf("RunbookPath(%q) = %q, %v; want ErrRunbook", tc.url, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("RunbookPath(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
}

func FuzzExposedNames(f *testing.F) {
	f.Add("# HELP a_total x\n# TYPE a_total counter\na_total 1\n")
	f.Add("# TYPE h histogram\nh_bucket{le=\"0.1\"} 0\nh_sum 0\nh_count 0\n")
	f.Add("x{a=\"}\"} 1\n# TYPE\n")
	f.Fuzz(func(t *testing.T, in string) {
		names, err := ExposedNames(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrExposition) {
				t.Fatalf("error %v does not wrap ErrExposition", err)
			}
			return
		}
		for n := range names {
			if !validName(n) {
				t.Fatalf("returned invalid name %q", n)
			}
		}
	})
}

func FuzzMetricRefs(f *testing.F) {
	f.Add("rate(xet_origin_http_requests_total[5m])")
	f.Add("go_goroutines+process_open_fds")
	f.Add("xet_")
	f.Fuzz(func(t *testing.T, in string) {
		refs := MetricRefs(in)
		for i, r := range refs {
			if !validName(r) || !strings.Contains(in, r) {
				t.Fatalf("ref %q is not a name taken from the input", r)
			}
			if i > 0 && refs[i-1] >= r {
				t.Fatalf("refs not sorted and unique: %q", refs)
			}
		}
	})
}
