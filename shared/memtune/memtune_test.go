package memtune

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

func TestGCPercent(t *testing.T) {
	for setting, want := range map[int]int{0: DefaultGCPercent, -1: 0, 150: 150, 1: 1} {
		if got := GCPercent(setting); got != want {
			t.Errorf("GCPercent(%d) = %d, want %d", setting, got, want)
		}
	}
}

func TestMemoryLimit(t *testing.T) {
	const budget = 1 << 30
	for setting, want := range map[int64]int64{0: budget, -1: -1, 5 << 20: 5 << 20} {
		if got := MemoryLimit(setting, budget); got != want {
			t.Errorf("MemoryLimit(%d, %d) = %d, want %d", setting, budget, got, want)
		}
	}
}

// TestApply: positive values are set; zero and negative ones leave the runtime's settings.
func TestApply(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	Apply(log, 3<<30, 250)
	if l := debug.SetMemoryLimit(-1); l != 3<<30 {
		t.Errorf("memory limit %d, want %d", l, int64(3<<30))
	}
	if p := debug.SetGCPercent(123); p != 250 {
		t.Errorf("gc percent %d, want 250", p)
	}

	Apply(log, -1, 0) // none: the runtime's settings stay
	if l := debug.SetMemoryLimit(-1); l != 3<<30 {
		t.Errorf("memory limit %d after a negative limit, want it unchanged (%d)", l, int64(3<<30))
	}
	if p := debug.SetGCPercent(100); p != 123 {
		t.Errorf("gc percent %d after 0, want it unchanged (123)", p)
	}
}

func TestCheckGCPercent(t *testing.T) {
	for setting, ok := range map[int]bool{-2: false, -100: false, -1: true, 0: true, 400: true} {
		if err := CheckGCPercent(setting); (err == nil) != ok {
			t.Errorf("CheckGCPercent(%d) = %v, want ok %v", setting, err, ok)
		}
	}
}
