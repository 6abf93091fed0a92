package httprange

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func cl(s, e uint64) Range { return Range{Kind: Closed, Start: s, End: e} }

func TestParse(t *testing.T) {
	tests := []struct {
		header string
		want   []Range
		err    error
	}{
		{"bytes=0-0", []Range{cl(0, 0)}, nil},
		{"bytes=100-299", []Range{cl(100, 299)}, nil},
		{"bytes=5-", []Range{{Kind: Open, Start: 5}}, nil},
		{"bytes=-500", []Range{{Kind: Suffix, N: 500}}, nil},
		{"bytes=-0", []Range{{Kind: Suffix, N: 0}}, nil},
		{"Bytes=1-2", []Range{cl(1, 2)}, nil},
		{"bytes=0-1,5-9, 20-", []Range{cl(0, 1), cl(5, 9), {Kind: Open, Start: 20}}, nil},
		{"bytes= 0-1 ,\t2-3", []Range{cl(0, 1), cl(2, 3)}, nil},
		{"bytes=0-1,,2-3,", []Range{cl(0, 1), cl(2, 3)}, nil},
		{"bytes=0-9223372036854775807", []Range{cl(0, MaxValue)}, nil},
		{"bytes=0-9223372036854775808", nil, ErrSyntax},
		{"bytes=0-99999999999999999999999", nil, ErrSyntax},
		{"bytes=5-4", nil, ErrSyntax},
		{"bytes=", nil, ErrSyntax},
		{"bytes=,", nil, ErrSyntax},
		{"bytes=-", nil, ErrSyntax},
		{"bytes=1", nil, ErrSyntax},
		{"bytes=a-b", nil, ErrSyntax},
		{"bytes=+1-2", nil, ErrSyntax},
		{"bytes=1-2-3", nil, ErrSyntax},
		{"bytes=0x10-20", nil, ErrSyntax},
		{"items=0-1", nil, ErrSyntax},
		{"0-1", nil, ErrSyntax},
		{"", nil, ErrSyntax},
	}
	for _, tc := range tests {
		t.Run(tc.header, func(t *testing.T) {
			got, err := Parse(tc.header)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseTooMany(t *testing.T) {
	specs := make([]string, MaxRanges)
	for i := range specs {
		specs[i] = strconv.Itoa(2*i) + "-" + strconv.Itoa(2*i)
	}
	rs, err := Parse("bytes=" + strings.Join(specs, ","))
	if err != nil || len(rs) != MaxRanges {
		t.Fatalf("%d ranges: err %v, len %d", MaxRanges, err, len(rs))
	}
	_, err = Parse("bytes=" + strings.Join(specs, ",") + ",1-1")
	if !errors.Is(err, ErrTooMany) || !errors.Is(err, ErrSyntax) {
		t.Fatalf("err = %v, want ErrTooMany wrapping ErrSyntax", err)
	}
}

func TestParseOne(t *testing.T) {
	if r, err := ParseOne("bytes=3-4"); err != nil || r != cl(3, 4) {
		t.Fatalf("got %v %v", r, err)
	}
	if _, err := ParseOne("bytes=3-4,6-7"); !errors.Is(err, ErrSyntax) {
		t.Fatalf("err = %v, want ErrSyntax", err)
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		r    Range
		size uint64
		want ByteRange
		err  error
	}{
		{cl(0, 0), 10, ByteRange{0, 0}, nil},
		{cl(2, 5), 10, ByteRange{2, 5}, nil},
		{cl(2, 500), 10, ByteRange{2, 9}, nil},
		{cl(9, 9), 10, ByteRange{9, 9}, nil},
		{cl(10, 10), 10, ByteRange{}, ErrUnsatisfiable},
		{cl(0, 0), 0, ByteRange{}, ErrUnsatisfiable},
		{Range{Kind: Open, Start: 3}, 10, ByteRange{3, 9}, nil},
		{Range{Kind: Open, Start: 10}, 10, ByteRange{}, ErrUnsatisfiable},
		{Range{Kind: Suffix, N: 3}, 10, ByteRange{7, 9}, nil},
		{Range{Kind: Suffix, N: 30}, 10, ByteRange{0, 9}, nil},
		{Range{Kind: Suffix, N: 0}, 10, ByteRange{}, ErrUnsatisfiable},
		{Range{Kind: Suffix, N: 3}, 0, ByteRange{}, ErrUnsatisfiable},
		{Range{Kind: 9}, 10, ByteRange{}, ErrSyntax},
	}
	for _, tc := range tests {
		t.Run(tc.r.String()+"/"+strconv.FormatUint(tc.size, 10), func(t *testing.T) {
			got, err := tc.r.Resolve(tc.size)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v %v, want %v", got, err, tc.want)
			}
		})
	}
}

func TestResolveAll(t *testing.T) {
	rs, err := Parse("bytes=0-1,50-60,8-")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ResolveAll(rs, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []ByteRange{{0, 1}, {8, 9}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := ResolveAll(rs, 0); !errors.Is(err, ErrUnsatisfiable) {
		t.Fatalf("err = %v, want ErrUnsatisfiable", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"bytes=0-0", "bytes=1-2,3-,-4", "bytes=", "bytes=99999999999999999999-", "bytes=,,,1-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		rs, err := Parse(h)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v does not wrap ErrSyntax", err)
			}
			return
		}
		if len(rs) == 0 || len(rs) > MaxRanges {
			t.Fatalf("%d ranges accepted", len(rs))
		}
		// Re-rendering and re-parsing gives the same list.
		specs := make([]string, len(rs))
		for i, r := range rs {
			if r.Start > MaxValue || r.End > MaxValue || r.N > MaxValue || (r.Kind == Closed && r.End < r.Start) {
				t.Fatalf("bad range accepted: %+v", r)
			}
			specs[i] = r.String()
		}
		again, err := Parse("bytes=" + strings.Join(specs, ","))
		if err != nil || !reflect.DeepEqual(again, rs) {
			t.Fatalf("round trip of %q: %v %v", h, again, err)
		}
		for _, r := range rs {
			if br, err := r.Resolve(1000); err == nil && (br.End < br.Start || br.End >= 1000) {
				t.Fatalf("resolve %v gave %v", r, br)
			}
		}
		// Whatever was asked, the coalesced parts of the resolved ranges cover exactly the same
		// bytes, each once.
		if brs, err := ResolveAll(rs, 1000); err == nil {
			checkCoalesced(t, brs, Coalesce(brs))
		}
	})
}

// checkCoalesced fails unless parts is a valid coalescing of rs: the same bytes, no two parts
// overlapping or touching, each part in the place of the first range it absorbed, and rs itself
// when nothing merged.
func checkCoalesced(t *testing.T, rs, parts []ByteRange) {
	t.Helper()
	covers := func(list []ByteRange, b uint64) bool {
		for _, r := range list {
			if r.Start <= b && b <= r.End {
				return true
			}
		}
		return false
	}
	var edges []uint64 // enough points to compare two unions of closed ranges
	for _, r := range append(slices.Clone(rs), parts...) {
		edges = append(edges, r.Start, r.End)
		if r.Start > 0 {
			edges = append(edges, r.Start-1)
		}
		if r.End < MaxEnd {
			edges = append(edges, r.End+1)
		}
	}
	for _, b := range edges {
		if covers(rs, b) != covers(parts, b) {
			t.Fatalf("byte %d: in %v is %t, in the parts %v %t", b, rs, covers(rs, b), parts, covers(parts, b))
		}
	}
	for i := range parts {
		for j := i + 1; j < len(parts); j++ {
			a, b := parts[i], parts[j]
			if !(a.End+1 < b.Start || b.End+1 < a.Start) {
				t.Fatalf("parts %v and %v overlap or touch: %v", a, b, parts)
			}
		}
	}
	// Part order follows the first range of rs inside each part.
	first := func(p ByteRange) int {
		return slices.IndexFunc(rs, func(r ByteRange) bool { return p.Contains(r) })
	}
	for i := 1; i < len(parts); i++ {
		if first(parts[i-1]) >= first(parts[i]) {
			t.Fatalf("parts %v are not in the order of %v", parts, rs)
		}
	}
	if len(parts) == len(rs) && !reflect.DeepEqual(parts, rs) {
		t.Fatalf("nothing merged, yet %v became %v", rs, parts)
	}
}

func TestCoalesce(t *testing.T) {
	br := func(s, e uint64) ByteRange { return ByteRange{s, e} }
	many := make([]ByteRange, 200)
	for i := range many {
		many[i] = br(0, 3<<20-1)
	}
	ladder := make([]ByteRange, 40) // 40 ranges, overlapping pairwise, given in reverse
	for i := range ladder {
		ladder[i] = br(uint64(39-i)*10, uint64(39-i)*10+15)
	}
	tests := []struct {
		name string
		in   []ByteRange
		want []ByteRange
	}{
		{"one", []ByteRange{br(5, 9)}, []ByteRange{br(5, 9)}},
		{"disjoint in order", []ByteRange{br(0, 9), br(20, 29)}, []ByteRange{br(0, 9), br(20, 29)}},
		{"disjoint out of order kept", []ByteRange{br(20, 29), br(0, 9)}, []ByteRange{br(20, 29), br(0, 9)}},
		{"200 times the full span", many, []ByteRange{br(0, 3<<20-1)}},
		{"adjacent", []ByteRange{br(0, 9), br(10, 19)}, []ByteRange{br(0, 19)}},
		{"gap of one byte kept", []ByteRange{br(0, 9), br(11, 19)}, []ByteRange{br(0, 9), br(11, 19)}},
		{"contained", []ByteRange{br(0, 99), br(10, 19)}, []ByteRange{br(0, 99)}},
		{"merged part takes the first place", []ByteRange{br(50, 59), br(0, 9), br(55, 70)}, []ByteRange{br(50, 70), br(0, 9)}},
		{"chain out of order", []ByteRange{br(20, 29), br(40, 49), br(0, 9), br(10, 25), br(30, 39)}, []ByteRange{br(0, 49)}},
		{"ladder of 40 (sorted path)", ladder, []ByteRange{br(0, 405)}},
		{"max end", []ByteRange{br(10, MaxEnd), br(MaxEnd, MaxEnd)}, []ByteRange{br(10, MaxEnd)}},
		{"empty", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := Coalesce(tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Coalesce(%v) = %v, want %v", tc.in, got, tc.want)
			}
			if !reflect.DeepEqual(tc.in, in) {
				t.Fatalf("Coalesce changed its argument to %v", tc.in)
			}
			checkCoalesced(t, tc.in, got)
		})
	}
}

func BenchmarkParse(b *testing.B) {
	h := "bytes=0-131071,200000-299999,400000-"
	b.SetBytes(int64(len(h)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(h); err != nil {
			b.Fatal(err)
		}
	}
}
