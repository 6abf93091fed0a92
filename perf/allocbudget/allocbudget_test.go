package allocbudget

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var sink []byte

func TestMeasureCountsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not deterministic under -race")
	}
	got := Measure(10, func() {
		sink = make([]byte, 1000)
		sink = make([]byte, 3000)
	})
	// 1000 and 3000 bytes round up to the 1024 and 3072 size classes.
	if got.Allocs != 2 || got.Bytes != 1024+3072 {
		t.Fatalf("Measure = %+v, want 2 allocations of 4096 bytes in all", got)
	}
	if got := Measure(10, func() {}); got.Allocs != 0 || got.Bytes != 0 {
		t.Fatalf("Measure(nothing) = %+v", got)
	}
}

func TestCompareMargin(t *testing.T) {
	for _, tc := range []struct {
		budget, got Cost
		fail        string
	}{
		{Cost{10, 1000}, Cost{10, 1000}, ""},
		{Cost{10, 1000}, Cost{3, 10}, ""},                  // under budget never fails
		{Cost{10, 1000}, Cost{11, 1000}, "11 allocations"}, // no slack below 20
		{Cost{100, 1000}, Cost{105, 1050}, ""},             // 5 % of 100 and 1000
		{Cost{100, 1000}, Cost{106, 1000}, "106 allocations"},
		{Cost{100, 1000}, Cost{100, 1051}, "1051 bytes"},
		{Cost{0, 0}, Cost{1, 16}, "1 allocations"},
	} {
		err := Compare("x", tc.budget, tc.got)
		switch {
		case tc.fail == "" && err != nil:
			t.Errorf("Compare(%+v, %+v) = %v, want nil", tc.budget, tc.got, err)
		case tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)):
			t.Errorf("Compare(%+v, %+v) = %v, want an error with %q", tc.budget, tc.got, err, tc.fail)
		}
	}
}

func TestParse(t *testing.T) {
	good := "# comment\n\nchunk/a\t3\t100\n  recon/b 0 0  \n"
	m, err := Parse("f", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["chunk/a"] != (Cost{3, 100}) || m["recon/b"] != (Cost{}) {
		t.Fatalf("Parse = %v", m)
	}
	if again, err := Parse("f", Format(m)); err != nil || len(again) != 2 || again["chunk/a"] != m["chunk/a"] {
		t.Fatalf("Parse(Format) = %v, %v", again, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"a 1\n", "f:1: 2 fields"},
		{"# x\na 1 2 3\n", "f:2: 4 fields"},
		{"a x 2\n", `f:1: allocs/op "x"`},
		{"a 1 -2\n", `f:1: bytes/op "-2"`},
		{"a 1 2\na 1 2\n", "f:2: budget a given twice"},
	} {
		if _, err := Parse("f", []byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestRecordReplaces(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.txt")
	if err := record(p, "b/x", Cost{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := record(p, "a/y", Cost{3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := record(p, "b/x", Cost{5, 6}); err != nil {
		t.Fatal(err)
	}
	m, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["b/x"] != (Cost{5, 6}) || m["a/y"] != (Cost{3, 4}) {
		t.Fatalf("after three records: %v", m)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
}

// TestBudgetFileParses keeps the committed file well-formed even in a -race run, which skips
// the measurements.
func TestBudgetFileParses(t *testing.T) {
	p, err := budgetPath()
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatalf("%s holds no budget", p)
	}
}
