package trace

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LogStats says what ConvertLog did with each line of an access log.
type LogStats struct {
	Lines     int            // non-blank lines read
	Records   int            // trace lines written
	Skipped   map[string]int // lines not converted, by reason (never silently: the caller prints it)
	Approx206 int            // 206 answers converted to a range from byte 0 (the log has no offset)
}

// logLine is a parsed access-log line.
type logLine struct {
	n              int
	t              float64
	repo, file     string
	token          bool
	status         int
	bytes          int64
	client, region string
}

// ConvertLog converts a plain access log to a trace (perf/README.md, "Converting an access
// log"). Each line is `TIMESTAMP PATH STATUS BYTES [CLIENT [REGION]]`, whitespace-separated:
// TIMESTAMP in RFC 3339 or Unix seconds; PATH a Hub file URL (/{type}/{ns}/{name}/resolve/{rev}/
// {file}, or /{ns}/{name}/resolve/... for a model) or a token URL
// (/api/{type}/{ns}/{name}/xet-{read|write}-token/{rev}). 200 answers become whole-file
// downloads, 206 answers a range of BYTES bytes from 0, 2xx token answers token requests; other
// statuses and other paths are counted in LogStats.Skipped. A file's size is the largest BYTES
// of its 200 answers (of its 206 answers if it has none). Lines are sorted by time; offsets
// start at the first line. A malformed line is a *LineError naming the line and field.
func ConvertLog(r io.Reader, w *Writer) (LogStats, error) {
	st := LogStats{Skipped: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineSize)
	var lines []logLine
	full := map[[2]string]int64{}
	part := map[[2]string]int64{}
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		st.Lines++
		l, skip, err := parseLogLine(n, text)
		if err != nil {
			return st, err
		}
		if skip != "" {
			st.Skipped[skip]++
			continue
		}
		k := [2]string{l.repo, l.file}
		switch {
		case l.token:
		case l.status == 200:
			full[k] = max(full[k], l.bytes)
		case l.status == 206:
			part[k] = max(part[k], l.bytes)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return st, err
	}
	slices.SortStableFunc(lines, func(a, b logLine) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		}
		return 0
	})
	for _, l := range lines {
		if l.t-lines[0].t > MaxOffset {
			return st, &LineError{Line: l.n, Field: "timestamp", Msg: fmt.Sprintf("%.0f s after the earliest line (line %d); a trace spans at most %g s",
				l.t-lines[0].t, lines[0].n, float64(MaxOffset))}
		}
		rec := Record{T: l.t - lines[0].t, Repo: l.repo, Client: l.client, Region: l.region}
		switch {
		case l.token:
			rec.Op, rec.Access = Token, "read"
			if strings.Contains(l.file, "write") {
				rec.Access = "write"
			}
		default:
			k := [2]string{l.repo, l.file}
			size, ok := full[k]
			if !ok {
				size = part[k]
			}
			rec.File, rec.Size = l.file, size
			rec.Op = Download
			if l.status == 206 {
				if l.bytes == 0 {
					st.Skipped["206 of 0 bytes"]++
					continue
				}
				rec.Op, rec.Ranges = DownloadRanges, [][2]int64{{0, l.bytes - 1}}
				st.Approx206++
			}
		}
		if err := w.Write(rec); err != nil {
			return st, err
		}
		st.Records++
	}
	return st, w.Flush()
}

// parseLogLine parses one line; skip names why a well-formed line is not converted.
func parseLogLine(n int, text string) (l logLine, skip string, err error) {
	bad := func(field, format string, args ...any) (logLine, string, error) {
		return logLine{}, "", &LineError{Line: n, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	f := strings.Fields(text)
	if len(f) < 4 || len(f) > 6 {
		return bad("", "%d fields, want TIMESTAMP PATH STATUS BYTES [CLIENT [REGION]]", len(f))
	}
	l.n = n
	if ts, err := time.Parse(time.RFC3339Nano, f[0]); err == nil {
		l.t = float64(ts.UnixNano()) / 1e9
	} else if v, err := strconv.ParseFloat(f[0], 64); err == nil && v >= 0 && v < 1e11 {
		l.t = v
	} else {
		return bad("timestamp", "%q is neither RFC 3339 nor Unix seconds", f[0])
	}
	if l.status, err = strconv.Atoi(f[2]); err != nil || l.status < 100 || l.status > 599 {
		return bad("status", "%q is not an HTTP status", f[2])
	}
	if l.bytes, err = strconv.ParseInt(f[3], 10, 64); err != nil || l.bytes < 0 || l.bytes > MaxSize {
		if f[3] == "-" {
			l.bytes = 0
		} else {
			return bad("bytes", "%q is not a byte count in 0..%d", f[3], int64(MaxSize))
		}
	}
	l.client = "log"
	if len(f) > 4 {
		if err := checkText(f[4], maxClient); err != nil {
			return bad("client", "%v", err)
		}
		l.client = f[4]
	}
	if len(f) > 5 {
		if err := checkRegion(f[5]); err != nil {
			return bad("region", "%q: %v", f[5], err)
		}
		l.region = f[5]
	}
	path := f[1]
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if !strings.HasPrefix(path, "/") {
		return bad("path", "%q does not start with /", f[1])
	}
	seg := strings.Split(path[1:], "/")
	for i := range seg {
		if seg[i], err = url.PathUnescape(seg[i]); err != nil {
			return bad("path", "%q: %v", f[1], err)
		}
	}
	isType := func(s string) bool { return s == "models" || s == "datasets" || s == "spaces" }
	switch {
	case len(seg) == 6 && seg[0] == "api" && isType(seg[1]) && (seg[4] == "xet-read-token" || seg[4] == "xet-write-token"):
		l.repo, l.file, l.token = strings.Join(seg[1:4], "/"), seg[4], true
	case len(seg) >= 6 && isType(seg[0]) && seg[3] == "resolve":
		l.repo, l.file = strings.Join(seg[0:3], "/"), strings.Join(seg[5:], "/")
	case len(seg) >= 5 && seg[2] == "resolve" && !isType(seg[0]) && seg[0] != "api":
		l.repo, l.file = "models/"+seg[0]+"/"+seg[1], strings.Join(seg[4:], "/")
	default:
		return l, "not a file or token path", nil
	}
	if err := checkRepo(l.repo); err != nil {
		return bad("path", "repository %q: %v", l.repo, err)
	}
	if !l.token {
		if err := checkFile(l.file); err != nil {
			return bad("path", "file %q: %v", l.file, err)
		}
	}
	switch {
	case l.token && l.status/100 == 2:
	case !l.token && (l.status == 200 || l.status == 206):
	default:
		return l, fmt.Sprintf("status %d", l.status), nil
	}
	return l, "", nil
}
