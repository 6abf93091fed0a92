// Package allocbudget is the allocation-budget regression guard of the hot paths (perf/README.md,
// "Allocation budgets"): a test measures the allocations and bytes allocated per call of a hot
// path and compares them with the budget committed in budgets.txt. Unlike time, these numbers are
// the same on a quiet laptop and on a CI machine shared by a dozen jobs, so the check can fail CI.
//
// Measurements are taken on one P with the garbage collector off (so a sync.Pool is never emptied
// in the middle of a run), after one warm-up call. They are meaningless under the race detector
// (it makes sync.Pool drop items on purpose), so Check skips itself there; `make test` runs the
// budget tests in a separate step without -race.
//
// A call may exceed its budget by Margin (5 %, rounded down: a budget under 20 allocations has no
// slack at all). Update the file with `make budgets` (or `go test -run AllocBudget PKG -args
// -allocbudget.update`), and commit it with the change that moved the numbers.
package allocbudget

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// File is the budget file's path relative to the module root.
const File = "perf/allocbudget/budgets.txt"

// MarginPercent is how far above its budget a measurement may go before Check fails.
const MarginPercent = 5

var update = flag.Bool("allocbudget.update", false, "write measured allocation budgets to "+File+" instead of checking them")

// Cost is what one call of a hot path allocates, on average over the measured runs.
type Cost struct {
	Allocs uint64 // heap allocations per call
	Bytes  uint64 // bytes allocated per call
}

// Measure calls fn once to warm up and then runs times, on one P and with the garbage collector
// off, and returns the allocations and bytes per call (rounded down). Memory allocated during the
// runs is only reclaimed afterwards: keep runs × bytes per call moderate.
func Measure(runs int, fn func()) Cost {
	if runs < 1 {
		runs = 1
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	runtime.GC() // start from a clean heap; pools filled by the warm-up stay filled
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	fn()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		fn()
	}
	runtime.ReadMemStats(&after)
	n := uint64(runs)
	return Cost{Allocs: (after.Mallocs - before.Mallocs) / n, Bytes: (after.TotalAlloc - before.TotalAlloc) / n}
}

// Limit is the largest value a budget of b allows.
func Limit(b uint64) uint64 { return b + b*MarginPercent/100 }

// Compare reports an error naming every figure of got above the limit of budget.
func Compare(name string, budget, got Cost) error {
	var errs []error
	if got.Allocs > Limit(budget.Allocs) {
		errs = append(errs, fmt.Errorf("%s: %d allocations per call, budget %d (limit %d with the %d %% margin)",
			name, got.Allocs, budget.Allocs, Limit(budget.Allocs), MarginPercent))
	}
	if got.Bytes > Limit(budget.Bytes) {
		errs = append(errs, fmt.Errorf("%s: %d bytes allocated per call, budget %d (limit %d with the %d %% margin)",
			name, got.Bytes, budget.Bytes, Limit(budget.Bytes), MarginPercent))
	}
	return errors.Join(errs...)
}

// Check measures fn (see Measure) and fails t when it allocates more than the budget called name
// in the budget file allows, or when the file has no such budget (t goes on: one run reports
// every budget exceeded). With -allocbudget.update it
// writes the measurement to the file instead. Under the race detector it skips t.
func Check(t testing.TB, name string, runs int, fn func()) {
	t.Helper()
	if raceEnabled {
		t.Skip("allocation budgets are not measured under -race (make test checks them in a separate step)")
	}
	got := Measure(runs, fn)
	path, err := budgetPath()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := record(path, name, got); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: recorded %d allocs/op, %d B/op", name, got.Allocs, got.Bytes)
		return
	}
	budgets, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := budgets[name]
	if !ok {
		t.Errorf("%s: no budget in %s (measured %d allocs/op, %d B/op); run `make budgets` and commit the file", name, File, got.Allocs, got.Bytes)
		return
	}
	if err := Compare(name, b, got); err != nil {
		t.Errorf("%v\nIf the increase is intended, run `make budgets` and commit %s with the change.", err, File)
		return
	}
	t.Logf("%s: %d allocs/op (budget %d), %d B/op (budget %d)", name, got.Allocs, b.Allocs, got.Bytes, b.Bytes)
}

// budgetPath finds the budget file from the working directory (a package directory of the
// module under go test) or XETCDN_ALLOC_BUDGETS.
func budgetPath() (string, error) {
	if p := os.Getenv("XETCDN_ALLOC_BUDGETS"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, File), nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("allocbudget: no go.mod above the working directory; set XETCDN_ALLOC_BUDGETS")
		}
		dir = up
	}
}

// Load reads a budget file: lines "name allocs bytes", blank lines and # comments ignored. A
// malformed line is an error naming the file and line.
func Load(path string) (map[string]Cost, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse parses the contents of a budget file; src names it in errors.
func Parse(src string, data []byte) (map[string]Cost, error) {
	out := make(map[string]Cost)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 3 (name allocs/op bytes/op)", src, n, len(f))
		}
		a, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: allocs/op %q is not a whole number", src, n, f[1])
		}
		by, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: bytes/op %q is not a whole number", src, n, f[2])
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("%s:%d: budget %s given twice", src, n, f[0])
		}
		out[f[0]] = Cost{Allocs: a, Bytes: by}
	}
	return out, sc.Err()
}

// header opens a budget file written by Format.
const header = `# Allocation budgets of the hot paths: allocations and bytes allocated per call, measured on one P
# with the GC off (perf/allocbudget). A measurement may exceed its budget by 5 %, rounded down.
# Written by ` + "`make budgets`" + `; commit it with the change that moved the numbers (perf/README.md).
#
# name	allocs/op	bytes/op
`

// Format returns the file contents for budgets, sorted by name.
func Format(budgets map[string]Cost) []byte {
	names := make([]string, 0, len(budgets))
	for n := range budgets {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.WriteString(header)
	for _, n := range names {
		fmt.Fprintf(&b, "%s\t%d\t%d\n", n, budgets[n].Allocs, budgets[n].Bytes)
	}
	return b.Bytes()
}

var recordMu sync.Mutex

// record writes one budget into the file (read, replace, write to a temporary file, rename).
// Test binaries of several packages must not record at once: `make budgets` runs them with -p 1.
func record(path, name string, c Cost) error {
	recordMu.Lock()
	defer recordMu.Unlock()
	budgets, err := Load(path)
	if errors.Is(err, os.ErrNotExist) {
		budgets, err = map[string]Cost{}, nil
	}
	if err != nil {
		return err
	}
	budgets[name] = c
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, Format(budgets), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
