// Package opscheck keeps ops/ and deploy/ honest. Its tests start the real xet-origin and
// xet-edge binaries, scrape the metric names they expose, and fail when a dashboard or an alert
// rule names a metric the code does not register, when an alert has no runbook, or when an
// example configuration (or a command line in a systemd unit, the compose file or a Kubernetes
// manifest) does not load through the binaries' own configuration loaders.
//
// The package itself holds only the pure text extractors the tests use; they do no I/O.
package opscheck

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// ErrExposition wraps every problem found in a metrics exposition.
var ErrExposition = errors.New("opscheck: bad exposition")

// maxLine bounds one exposition line; longer lines are an error rather than an allocation.
const maxLine = 1 << 20

// ExposedNames reads a Prometheus text exposition (what /metrics answers) and returns every
// series name a query may use: the family name for counters, gauges and untyped metrics, the
// _bucket, _sum and _count series of a histogram (not its bare name, which has no samples),
// and a summary's name with its _sum and _count. Families are taken from "# TYPE" lines; sample
// lines add their own names too, so an exposition without TYPE lines still counts. A family
// that has no samples (a labelled vector nothing has touched yet) is not exposed by the client
// library and so cannot appear here: callers must drive traffic first.
func ExposedNames(r io.Reader) (map[string]bool, error) {
	names := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "#"):
			f := strings.Fields(line)
			if len(f) < 2 || f[1] != "TYPE" {
				continue // HELP and comments
			}
			if len(f) != 4 || !validName(f[2]) {
				return nil, fmt.Errorf("%w: line %d: malformed TYPE line", ErrExposition, n)
			}
			name := f[2]
			switch f[3] {
			case "counter", "gauge", "untyped":
				names[name] = true
			case "histogram", "gaugehistogram":
				names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
			case "summary":
				names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
			default:
				return nil, fmt.Errorf("%w: line %d: unknown type %q", ErrExposition, n, f[3])
			}
		default:
			end := strings.IndexAny(line, "{ \t")
			if end < 0 {
				return nil, fmt.Errorf("%w: line %d: sample without a value", ErrExposition, n)
			}
			if !validName(line[:end]) {
				return nil, fmt.Errorf("%w: line %d: bad metric name %q", ErrExposition, n, line[:end])
			}
			names[line[:end]] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrExposition, err)
	}
	return names, nil
}

// validName reports whether s is a legacy Prometheus metric name: [a-zA-Z_:][a-zA-Z0-9_:]*.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// refPattern finds metric names of the families xetcdn exposes: its own xet_* metrics and the
// Go and process collectors. A name must not continue an identifier ("my_xet_foo" is not one).
var refPattern = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])((?:xet|go|process)_[a-zA-Z0-9_:]*[a-zA-Z0-9])`)

// MetricRefs returns the metric names that text (a PromQL expression, or any string of a
// dashboard) refers to, sorted and without duplicates. It is a lexical scan, deliberately
// generous: a name inside a label value or a legend is reported too, so such text must name
// only real metrics as well.
func MetricRefs(text string) []string {
	var out []string
	for _, m := range refPattern.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ErrRunbook is returned by RunbookPath for a URL that does not name a runbook.
var ErrRunbook = errors.New("opscheck: runbook_url does not point at ops/runbooks/<name>.md")

// runbookPattern is a runbook's place in the repository, at the end of its URL.
var runbookPattern = regexp.MustCompile(`(?:^|/)(ops/runbooks/[a-z0-9][a-z0-9-]*\.md)$`)

// RunbookPath returns the repository path (ops/runbooks/<name>.md) a runbook_url points at.
func RunbookPath(url string) (string, error) {
	m := runbookPattern.FindStringSubmatch(url)
	if m == nil {
		return "", fmt.Errorf("%w: %q", ErrRunbook, url)
	}
	return m[1], nil
}
