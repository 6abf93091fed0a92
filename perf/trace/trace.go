// Package trace is the replay trace of perf/ (perf/README.md, "Traces"): one JSON object per
// line, each a request a client makes at a time offset from the start of the trace. The
// generator (perf/cmd/tracegen) writes traces from named, seeded scenarios or converts a plain
// access log; the replayer (perf/cmd/replay) issues the requests on the trace's schedule.
//
// A file's bytes are not in the trace: they are a pure function of the file's identity (repo,
// file, version, size, change, change span, head; see Content), so the replayer generates what it
// uploads and checks what it downloads byte for byte without storing either.
package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Op is what a trace line asks for.
type Op string

// Operations.
const (
	// Upload uploads the file (chunking, dedup, xorbs, shard) with a write token.
	Upload Op = "upload"
	// Download downloads the whole file and checks every byte.
	Download Op = "download"
	// DownloadRanges downloads the byte ranges of the file one after the other, as hf_xet asks
	// for parts of a file (a reconstruction with a Range header per range), checking each.
	DownloadRanges Op = "download_ranges"
	// Token asks the Hub-compatible token route for a CAS token of the repository
	// (GET /api/{repo}/xet-{read|write}-token/main, docs/protocol.md §3.1).
	Token Op = "token"
)

// Limits of a trace line.
const (
	MaxOffset   = 1e8     // seconds (about three years)
	MaxSize     = 1 << 40 // bytes per file
	MaxVersion  = 1 << 20
	MaxRanges   = 1024
	MaxLineSize = 1 << 20
	maxFileLen  = 1024
	maxNameLen  = 96
	maxClient   = 128
	maxRegion   = 32
)

// Record is one trace line.
type Record struct {
	// T is the offset of the request from the start of the trace, in seconds (microsecond
	// precision). Offsets never decrease along a trace.
	T float64 `json:"t"`
	// Op is the operation.
	Op Op `json:"op"`
	// Repo is the repository, "{models|datasets|spaces}/{namespace}/{name}": the token scope.
	Repo string `json:"repo"`
	// File is the path of the file in the repository (not for token).
	File string `json:"file,omitempty"`
	// Version is the file's content revision: version v shares all but about Change of its
	// bytes with version v-1 (see Content).
	Version int `json:"version,omitempty"`
	// Size is the file's size in bytes (not for token).
	Size int64 `json:"size,omitempty"`
	// Change is the fraction of 1 MiB blocks that differ between consecutive versions, in
	// [0, 1]. It is part of the file's identity: every line naming a file gives the same value.
	Change float64 `json:"change,omitempty"`
	// ChangeSpan is the length in bytes of the aligned runs of blocks that change together
	// (Content.ChangeSpan): a positive multiple of 1 MiB, at most 1 GiB; 0 (absent) means
	// 1 MiB. Part of the file's identity like Change.
	ChangeSpan int64 `json:"change_span,omitempty"`
	// Head is the length in bytes of the version's own first bytes (Content.Head: new in every
	// version, the blocks after them), at most the size and MaxHead; 0 (absent): none. Every
	// line naming one file version gives the same value; versions may differ.
	Head int64 `json:"head,omitempty"`
	// Ranges are the inclusive byte ranges of download_ranges, each inside the file.
	Ranges [][2]int64 `json:"ranges,omitempty"`
	// Access is "read" (default) or "write", for token only.
	Access string `json:"access,omitempty"`
	// Region routes the request to that region's edge (replay -edge REGION=URL); empty: the
	// default endpoint.
	Region string `json:"region,omitempty"`
	// Client names the client that makes the request (one connection pool per client).
	Client string `json:"client"`
}

// MarshalJSON writes the line's fields; size is written on every file line, also when 0 (an
// empty file), and never on a token line.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record // no methods: no recursion
	out := struct {
		plain
		Size *int64 `json:"size,omitempty"`
	}{plain: plain(r)}
	if r.Op != Token {
		out.Size = &r.Size
	}
	return json.Marshal(out)
}

// LineError is a bad trace line: its number (from 1), the field at fault ("" for the line as a
// whole) and what is wrong.
type LineError struct {
	Line  int
	Field string
	Msg   string
}

func (e *LineError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("trace line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("trace line %d: field %q: %s", e.Line, e.Field, e.Msg)
}

// raw mirrors Record with pointers, to tell a missing field from a zero one.
type raw struct {
	T       *float64  `json:"t"`
	Op      *string   `json:"op"`
	Repo    *string   `json:"repo"`
	File    *string   `json:"file"`
	Version *int64    `json:"version"`
	Size    *int64    `json:"size"`
	Change  *float64  `json:"change"`
	Span    *int64    `json:"change_span"`
	Head    *int64    `json:"head"`
	Ranges  [][]int64 `json:"ranges"`
	Access  *string   `json:"access"`
	Region  *string   `json:"region"`
	Client  *string   `json:"client"`
}

// ParseLine parses and checks one trace line (n is its number, for errors).
func ParseLine(n int, line []byte) (Record, error) {
	bad := func(field, format string, args ...any) (Record, error) {
		return Record{}, &LineError{Line: n, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	var r raw
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return bad(te.Field, "%s is not %s", te.Value, jsonType(te.Type.Kind().String()))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return bad(f, "unknown field")
		}
		return bad("", "not a JSON object: %v", err)
	}
	if d.More() {
		return bad("", "more than one JSON value on the line")
	}
	if _, err := d.Token(); err != io.EOF {
		return bad("", "text after the JSON object")
	}
	var rec Record
	if r.T == nil {
		return bad("t", "missing")
	}
	if rec.T = *r.T; !(rec.T >= 0 && rec.T <= MaxOffset) {
		return bad("t", "%v is outside 0..%g seconds", rec.T, float64(MaxOffset))
	}
	if r.Op == nil {
		return bad("op", "missing")
	}
	rec.Op = Op(*r.Op)
	switch rec.Op {
	case Upload, Download, DownloadRanges, Token:
	default:
		return bad("op", "%q is not upload, download, download_ranges or token", *r.Op)
	}
	if r.Repo == nil {
		return bad("repo", "missing")
	}
	if err := checkRepo(*r.Repo); err != nil {
		return bad("repo", "%q: %v", *r.Repo, err)
	}
	rec.Repo = *r.Repo
	if r.Client == nil || *r.Client == "" {
		return bad("client", "missing")
	}
	if err := checkText(*r.Client, maxClient); err != nil {
		return bad("client", "%v", err)
	}
	rec.Client = *r.Client
	if r.Region != nil {
		if err := checkRegion(*r.Region); err != nil {
			return bad("region", "%q: %v", *r.Region, err)
		}
		rec.Region = *r.Region
	}
	if rec.Op == Token {
		for _, f := range []struct {
			name string
			set  bool
		}{{"file", r.File != nil}, {"version", r.Version != nil}, {"size", r.Size != nil},
			{"change", r.Change != nil}, {"change_span", r.Span != nil}, {"head", r.Head != nil}, {"ranges", r.Ranges != nil}} {
			if f.set {
				return bad(f.name, "not allowed on a token line")
			}
		}
		rec.Access = "read"
		if r.Access != nil {
			if *r.Access != "read" && *r.Access != "write" {
				return bad("access", "%q is not read or write", *r.Access)
			}
			rec.Access = *r.Access
		}
		return rec, nil
	}
	if r.Access != nil {
		return bad("access", "only allowed on a token line")
	}
	if r.File == nil {
		return bad("file", "missing")
	}
	if err := checkFile(*r.File); err != nil {
		return bad("file", "%q: %v", *r.File, err)
	}
	rec.File = *r.File
	if r.Version != nil {
		if *r.Version < 0 || *r.Version > MaxVersion {
			return bad("version", "%d is outside 0..%d", *r.Version, MaxVersion)
		}
		rec.Version = int(*r.Version)
	}
	if r.Size == nil {
		return bad("size", "missing")
	}
	if rec.Size = *r.Size; rec.Size < 0 || rec.Size > MaxSize {
		return bad("size", "%d is outside 0..%d", rec.Size, int64(MaxSize))
	}
	if r.Change != nil {
		if rec.Change = *r.Change; !(rec.Change >= 0 && rec.Change <= 1) {
			return bad("change", "%v is outside 0..1", rec.Change)
		}
	}
	if r.Span != nil {
		if rec.ChangeSpan = *r.Span; rec.ChangeSpan < BlockSize || rec.ChangeSpan > MaxChangeSpan {
			return bad("change_span", "%d is outside %d..%d bytes (1 MiB..1 GiB)", rec.ChangeSpan, BlockSize, MaxChangeSpan)
		}
		if rec.ChangeSpan%BlockSize != 0 {
			return bad("change_span", "%d bytes is not a multiple of %d (1 MiB)", rec.ChangeSpan, BlockSize)
		}
	}
	if r.Head != nil {
		if rec.Head = *r.Head; rec.Head < 0 || rec.Head > MaxHead {
			return bad("head", "%d is outside 0..%d bytes (64 MiB)", rec.Head, int64(MaxHead))
		}
		if rec.Head > rec.Size {
			return bad("head", "%d bytes is more than the file's %d", rec.Head, rec.Size)
		}
	}
	if rec.Op != DownloadRanges {
		if r.Ranges != nil {
			return bad("ranges", "only allowed on a download_ranges line")
		}
		return rec, nil
	}
	if len(r.Ranges) == 0 {
		return bad("ranges", "missing or empty")
	}
	if len(r.Ranges) > MaxRanges {
		return bad("ranges", "%d ranges, at most %d", len(r.Ranges), MaxRanges)
	}
	rec.Ranges = make([][2]int64, len(r.Ranges))
	for i, g := range r.Ranges {
		if len(g) != 2 {
			return bad("ranges", "range %d has %d numbers, want [start, end]", i, len(g))
		}
		if g[0] < 0 || g[1] < g[0] || g[1] >= rec.Size {
			return bad("ranges", "range %d [%d, %d] is not inside the file's %d bytes (inclusive ends, start <= end)", i, g[0], g[1], rec.Size)
		}
		rec.Ranges[i] = [2]int64{g[0], g[1]}
	}
	return rec, nil
}

// jsonType names a Go kind as its JSON type.
func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "a whole number in range"
	case strings.HasPrefix(kind, "float"):
		return "a number in range"
	case kind == "string":
		return "a string"
	case kind == "slice", kind == "array":
		return "an array"
	}
	return "a " + kind
}

func checkName(s string) error {
	if s == "" || len(s) > maxNameLen {
		return fmt.Errorf("a name must have 1..%d characters", maxNameLen)
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("character %q is not allowed in a name (letters, digits, - _ .)", c)
		}
	}
	if s == "." || s == ".." {
		return errors.New(". and .. are not names")
	}
	return nil
}

func checkRepo(s string) error {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return errors.New(`want "{models|datasets|spaces}/{namespace}/{name}"`)
	}
	switch parts[0] {
	case "models", "datasets", "spaces":
	default:
		return fmt.Errorf("type %q is not models, datasets or spaces", parts[0])
	}
	for _, p := range parts[1:] {
		if err := checkName(p); err != nil {
			return err
		}
	}
	return nil
}

func checkFile(s string) error {
	if s == "" || len(s) > maxFileLen {
		return fmt.Errorf("a path must have 1..%d bytes", maxFileLen)
	}
	if err := checkText(s, maxFileLen); err != nil {
		return err
	}
	for _, p := range strings.Split(s, "/") {
		if p == "" || p == "." || p == ".." {
			return errors.New("a path is relative, without empty, . or .. segments")
		}
	}
	return nil
}

func checkText(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%d bytes, at most %d", len(s), max)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == '\uFFFD' {
			return fmt.Errorf("control or invalid character %q", c)
		}
	}
	return nil
}

func checkRegion(s string) error {
	if len(s) > maxRegion {
		return fmt.Errorf("%d bytes, at most %d", len(s), maxRegion)
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("character %q is not allowed (a-z, 0-9, -)", c)
		}
	}
	return nil
}

// FileKey identifies a file's content: repo, path and version.
type FileKey struct {
	Repo, File string
	Version    int
}

func (k FileKey) String() string { return fmt.Sprintf("%s/%s@%d", k.Repo, k.File, k.Version) }

// Reader reads a trace line by line and checks it as a whole: offsets never decrease, and all
// lines naming one file version agree on its size, change, change span and head.
type Reader struct {
	sc    *bufio.Scanner
	n     int
	last  float64
	files map[FileKey]fileSeen
}

type fileSeen struct {
	size   int64
	change float64
	span   int64 // blocks per span: an absent change_span and 1 MiB are the same
	head   int64
	line   int
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineSize)
	return &Reader{sc: sc, files: make(map[FileKey]fileSeen)}
}

// Next returns the next record; io.EOF after the last. Blank lines are skipped; every other
// problem is a *LineError (or the reader's error) and ends the trace.
func (r *Reader) Next() (Record, error) {
	for r.sc.Scan() {
		r.n++
		line := bytes.TrimSpace(r.sc.Bytes())
		if len(line) == 0 {
			continue
		}
		rec, err := ParseLine(r.n, line)
		if err != nil {
			return Record{}, err
		}
		if rec.T < r.last {
			return Record{}, &LineError{Line: r.n, Field: "t", Msg: fmt.Sprintf("%v is before the previous line's %v (offsets never decrease)", rec.T, r.last)}
		}
		r.last = rec.T
		if rec.Op != Token {
			k := FileKey{rec.Repo, rec.File, rec.Version}
			span := spanBlocks(rec.ChangeSpan)
			if s, ok := r.files[k]; !ok {
				r.files[k] = fileSeen{rec.Size, rec.Change, span, rec.Head, r.n}
			} else if s.size != rec.Size {
				return Record{}, &LineError{Line: r.n, Field: "size", Msg: fmt.Sprintf("%d, but line %d gave %s %d bytes", rec.Size, s.line, k, s.size)}
			} else if s.change != rec.Change {
				return Record{}, &LineError{Line: r.n, Field: "change", Msg: fmt.Sprintf("%v, but line %d gave %s change %v", rec.Change, s.line, k, s.change)}
			} else if s.span != span {
				return Record{}, &LineError{Line: r.n, Field: "change_span", Msg: fmt.Sprintf("%d MiB, but line %d gave %s change_span %d MiB", span, s.line, k, s.span)}
			} else if s.head != rec.Head {
				return Record{}, &LineError{Line: r.n, Field: "head", Msg: fmt.Sprintf("%d, but line %d gave %s head %d", rec.Head, s.line, k, s.head)}
			}
		}
		return rec, nil
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Record{}, &LineError{Line: r.n + 1, Msg: fmt.Sprintf("longer than %d bytes", MaxLineSize)}
		}
		return Record{}, err
	}
	return Record{}, io.EOF
}

// ReadAll reads and checks a whole trace.
func ReadAll(rd io.Reader) ([]Record, error) {
	r := NewReader(rd)
	var out []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
}

// Writer writes records as trace lines.
type Writer struct {
	w *bufio.Writer
}

// NewWriter returns a Writer to w; call Flush at the end.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Write writes rec as one line, its offset rounded to the microsecond.
func (w *Writer) Write(rec Record) error {
	rec.T = math.Round(rec.T*1e6) / 1e6
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.w.Write(b)
	return err
}

// Flush writes buffered lines out.
func (w *Writer) Flush() error { return w.w.Flush() }
