package httprange

import (
	"errors"
	"reflect"
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
	})
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
