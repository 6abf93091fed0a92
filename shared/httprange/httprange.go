// Package httprange parses HTTP Range request headers (RFC 9110 §14.1.2, "bytes" unit only) and
// resolves them against a representation size.
//
// Three forms are accepted in a comma-separated list: "S-E" (closed), "S-" (from S to the end)
// and "-N" (the last N bytes). Values are decimal, at most MaxValue; a list holds at most
// MaxRanges ranges. Parsing is pure: no I/O, no allocation beyond the returned slice, whose size
// is bounded by the header length and MaxRanges.
//
// Errors wrap ErrSyntax (the header is not a valid bytes range set; ErrTooMany is one case) or
// ErrUnsatisfiable (valid, but no byte of the representation is selected). Test with errors.Is.
// On the reconstruction route both map to 416 (docs/protocol.md §2.3).
package httprange

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Limits of a parsed header.
const (
	// MaxRanges bounds the number of ranges in one header.
	MaxRanges = 1024
	// MaxValue bounds every number in a header, so that ends fit an int64 (and E+1 a uint64).
	MaxValue = 1<<63 - 1
)

var (
	// ErrSyntax: the header is not a bytes range set this package accepts.
	ErrSyntax = errors.New("httprange: malformed Range header")
	// ErrTooMany: the header lists more than MaxRanges ranges. It wraps ErrSyntax.
	ErrTooMany = fmt.Errorf("%w: more than %d ranges", ErrSyntax, MaxRanges)
	// ErrUnsatisfiable: the range selects no byte of the representation.
	ErrUnsatisfiable = errors.New("httprange: range not satisfiable")
)

// Kind is the syntactic form of a Range.
type Kind uint8

const (
	// Closed is "S-E": bytes S through E inclusive.
	Closed Kind = iota
	// Open is "S-": bytes S through the end of the representation.
	Open
	// Suffix is "-N": the last N bytes.
	Suffix
)

// Range is one parsed range-spec. Start is the first byte (Closed, Open); End the last byte,
// inclusive (Closed only); N the suffix length (Suffix only). The zero value is "bytes=0-0".
type Range struct {
	Kind  Kind
	Start uint64
	End   uint64
	N     uint64
}

// ByteRange is a resolved, closed byte range [Start, End] (End inclusive), the form JSON answers
// and signed URLs carry. An empty ByteRange cannot be represented; callers use a nil slice.
type ByteRange struct {
	Start, End uint64
}

// Len is the number of bytes in r.
func (r ByteRange) Len() uint64 { return r.End - r.Start + 1 }

// Contains reports whether o lies inside r.
func (r ByteRange) Contains(o ByteRange) bool { return r.Start <= o.Start && o.End <= r.End }

// String renders r as a range-spec "S-E".
func (r ByteRange) String() string { return fmt.Sprintf("%d-%d", r.Start, r.End) }

// String renders r as a range-spec ("S-E", "S-" or "-N").
func (r Range) String() string {
	switch r.Kind {
	case Open:
		return fmt.Sprintf("%d-", r.Start)
	case Suffix:
		return fmt.Sprintf("-%d", r.N)
	default:
		return fmt.Sprintf("%d-%d", r.Start, r.End)
	}
}

// Closed returns r as a ByteRange when it is of kind Closed.
func (r Range) Closed() (ByteRange, bool) {
	if r.Kind != Closed {
		return ByteRange{}, false
	}
	return ByteRange{Start: r.Start, End: r.End}, true
}

// Resolve returns the bytes r selects of a representation of size bytes, clamping the end to the
// last byte. It fails with ErrUnsatisfiable when r selects nothing: Start >= size, or a suffix of
// zero length, or any range of an empty representation.
func (r Range) Resolve(size uint64) (ByteRange, error) {
	switch r.Kind {
	case Suffix:
		if r.N == 0 || size == 0 {
			return ByteRange{}, fmt.Errorf("%w: %s of %d bytes", ErrUnsatisfiable, r, size)
		}
		return ByteRange{Start: size - min(r.N, size), End: size - 1}, nil
	case Open, Closed:
		if r.Start >= size {
			return ByteRange{}, fmt.Errorf("%w: %s of %d bytes", ErrUnsatisfiable, r, size)
		}
		end := size - 1
		if r.Kind == Closed {
			end = min(r.End, end)
		}
		return ByteRange{Start: r.Start, End: end}, nil
	}
	return ByteRange{}, fmt.Errorf("%w: unknown kind %d", ErrSyntax, r.Kind)
}

// ResolveAll resolves every range of a list against size, dropping the unsatisfiable ones as
// RFC 9110 §14.1.2 requires; it fails with ErrUnsatisfiable only when none is left. The order of
// the list is kept and ranges are not coalesced.
func ResolveAll(rs []Range, size uint64) ([]ByteRange, error) {
	out := make([]ByteRange, 0, len(rs))
	for _, r := range rs {
		br, err := r.Resolve(size)
		if err != nil {
			continue
		}
		out = append(out, br)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: none of %d ranges overlaps %d bytes", ErrUnsatisfiable, len(rs), size)
	}
	return out, nil
}

// Coalesce merges the ranges of rs that overlap or touch (RFC 9110 §14.6 lets a server
// coalesce them), so that no byte is sent twice. Each merged range takes the place of the first
// range of rs it absorbed; ranges merged with none keep their order, as a client that asked
// for disjoint ranges expects one part per range, in request order. When nothing merges, rs
// itself is returned; otherwise a new slice, rs unchanged. O(n log n).
func Coalesce(rs []ByteRange) []ByteRange {
	if disjoint(rs) {
		return rs
	}
	// Sort positions by start, merge runs that overlap or touch, and remember for each merged
	// range the first position it absorbed.
	type group struct {
		r     ByteRange
		first int
	}
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(rs[a].Start, rs[b].Start) })
	gs := make([]group, 0, len(rs))
	for _, i := range idx {
		r := rs[i]
		if n := len(gs); n > 0 && (gs[n-1].r.End == MaxEnd || r.Start <= gs[n-1].r.End+1) {
			g := &gs[n-1]
			g.r.End = max(g.r.End, r.End)
			g.first = min(g.first, i)
			continue
		}
		gs = append(gs, group{r: r, first: i})
	}
	slices.SortFunc(gs, func(a, b group) int { return cmp.Compare(a.first, b.first) })
	out := make([]ByteRange, len(gs))
	for i, g := range gs {
		out[i] = g.r
	}
	return out
}

// MaxEnd is the largest End a ByteRange can have.
const MaxEnd = ^uint64(0)

// disjoint reports whether no two ranges of rs overlap or touch. Lists of up to 16 ranges are
// compared pairwise (no allocation); longer ones are sorted first.
func disjoint(rs []ByteRange) bool {
	apart := func(a, b ByteRange) bool {
		return (a.End != MaxEnd && a.End+1 < b.Start) || (b.End != MaxEnd && b.End+1 < a.Start)
	}
	if len(rs) <= 16 {
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				if !apart(rs[i], rs[j]) {
					return false
				}
			}
		}
		return true
	}
	s := slices.SortedFunc(slices.Values(rs), func(a, b ByteRange) int { return cmp.Compare(a.Start, b.Start) })
	for i := 1; i < len(s); i++ {
		if !apart(s[i-1], s[i]) {
			return false
		}
	}
	return true
}

// Parse parses a Range header value such as "bytes=0-99,200-". Whitespace around range-specs
// is allowed; empty list elements (",,") are skipped as RFC 9110 §5.6.1 allows, but at least one
// range is required. A closed range with E < S is a syntax error.
func Parse(header string) ([]Range, error) {
	rest, ok := cutUnit(header)
	if !ok {
		return nil, fmt.Errorf("%w: %q does not start with %q", ErrSyntax, clip(header), "bytes=")
	}
	// Count first so the result is allocated once and never beyond MaxRanges.
	n := strings.Count(rest, ",") + 1
	out := make([]Range, 0, min(n, MaxRanges))
	for len(rest) > 0 || len(out) == 0 {
		var spec string
		spec, rest, _ = strings.Cut(rest, ",")
		spec = strings.Trim(spec, " \t")
		if spec == "" {
			if len(rest) == 0 && len(out) == 0 {
				return nil, fmt.Errorf("%w: no ranges in %q", ErrSyntax, clip(header))
			}
			continue
		}
		if len(out) == MaxRanges {
			return nil, ErrTooMany
		}
		r, err := parseSpec(spec)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseOne parses a header that must hold exactly one range, as on the reconstruction route.
// A list of several ranges is a syntax error.
func ParseOne(header string) (Range, error) {
	rs, err := Parse(header)
	if err != nil {
		return Range{}, err
	}
	if len(rs) != 1 {
		return Range{}, fmt.Errorf("%w: want one range, got %d", ErrSyntax, len(rs))
	}
	return rs[0], nil
}

// cutUnit strips "bytes=" (unit case-insensitive, as RFC 9110 says units are) from h.
func cutUnit(h string) (string, bool) {
	h = strings.TrimLeft(h, " \t")
	const unit = "bytes="
	if len(h) < len(unit) || !strings.EqualFold(h[:len(unit)], unit) {
		return "", false
	}
	return h[len(unit):], true
}

func parseSpec(spec string) (Range, error) {
	first, last, ok := strings.Cut(spec, "-")
	if !ok {
		return Range{}, fmt.Errorf("%w: %q has no '-'", ErrSyntax, clip(spec))
	}
	if first == "" {
		n, err := parseUint(last)
		if err != nil {
			return Range{}, err
		}
		return Range{Kind: Suffix, N: n}, nil
	}
	s, err := parseUint(first)
	if err != nil {
		return Range{}, err
	}
	if last == "" {
		return Range{Kind: Open, Start: s}, nil
	}
	e, err := parseUint(last)
	if err != nil {
		return Range{}, err
	}
	if e < s {
		return Range{}, fmt.Errorf("%w: %q ends before it starts", ErrSyntax, clip(spec))
	}
	return Range{Kind: Closed, Start: s, End: e}, nil
}

// parseUint reads 1..19 decimal digits with value at most MaxValue.
func parseUint(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: missing number", ErrSyntax)
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q is not a number", ErrSyntax, clip(s))
		}
		d := uint64(c - '0')
		if v > (MaxValue-d)/10 {
			return 0, fmt.Errorf("%w: %q overflows", ErrSyntax, clip(s))
		}
		v = v*10 + d
	}
	return v, nil
}

// clip bounds the untrusted text quoted in error messages.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
