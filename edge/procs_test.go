package edge

import (
	"log/slog"
	"runtime"
	"testing"
)

// TestAtLeastTwoProcs: an edge given one processor runs Go code on two, unless GOMAXPROCS is
// set; more are left alone.
func TestAtLeastTwoProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	log := slog.New(slog.DiscardHandler)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMAXPROCS" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		before int
		env    string
		want   int
	}{{1, "", 2}, {1, "1", 1}, {3, "", 3}} {
		runtime.GOMAXPROCS(c.before)
		atLeastTwoProcs(log, env(c.env))
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("GOMAXPROCS %d, env %q: %d after, want %d", c.before, c.env, got, c.want)
		}
	}
}
