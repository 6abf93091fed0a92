package origin

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/config"
)

// TestRunSetsCollector: Run applies limits.gc_percent and limits.memory_limit to the runtime
// before anything else (docs/origin.md "Memory"): 400 % and the memory budget by default, the
// runtime's own with -1 and a negative limit.
func TestRunSetsCollector(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	free := func() string { return testenv.FreeAddr(t) }
	run := func(js string) {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "c.json")
		if err := os.WriteFile(cfg, []byte(js), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the configuration is applied, then Run stops
		_ = Run(ctx, []string{"--data-dir", filepath.Join(dir, "d"), "--config", cfg, "--listen", free(), "--admin-listen", free()},
			func(string) string { return "" }, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	}
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(1 << 62)
	run(`{}`)
	if p := debug.SetGCPercent(100); p != config.DefaultGCPercent {
		t.Errorf("defaults: gc percent %d, want %d", p, config.DefaultGCPercent)
	}
	if l, want := debug.SetMemoryLimit(-1), int64(256<<20+512<<20+config.WorkingSetBytes); l != want {
		t.Errorf("defaults: memory limit %d, want %d", l, want)
	}
	debug.SetGCPercent(123)
	debug.SetMemoryLimit(1 << 62)
	run(`{"limits": {"gc_percent": -1, "memory_limit": -1}}`)
	if p := debug.SetGCPercent(100); p != 123 {
		t.Errorf("gc_percent -1: gc percent %d, want the runtime's own (123)", p)
	}
	if l := debug.SetMemoryLimit(-1); l != 1<<62 {
		t.Errorf("memory_limit -1: memory limit %d, want none set", l)
	}
}
