// Package memtune applies a server's memory settings — limits.memory_limit and
// limits.gc_percent of the origin and the edge — to the Go runtime (docs/origin.md and
// docs/edge.md "Memory"). Each server computes its own memory budget; the rules for the two
// settings and their application are the same for both.
package memtune

import (
	"fmt"
	"log/slog"
	"runtime/debug"
)

// DefaultGCPercent is limits.gc_percent when 0. Both servers' live heaps are small next to
// their memory limits, and at Go's 100 % they collected far more often than the limit needs
// (the reasons per server: config.DefaultGCPercent of each); 400 collects about a quarter as
// often while the memory limit still caps the heap.
const DefaultGCPercent = 400

// GCPercent resolves a limits.gc_percent setting to the collector target to apply: 0 is
// DefaultGCPercent, and a negative setting (-1, the runtime's own: the GOGC environment
// variable, else 100) resolves to 0, meaning leave the runtime's setting alone.
func GCPercent(setting int) int {
	switch {
	case setting < 0:
		return 0
	case setting == 0:
		return DefaultGCPercent
	default:
		return setting
	}
}

// CheckGCPercent refuses a limits.gc_percent setting below -1.
func CheckGCPercent(setting int) error {
	if setting < -1 {
		return fmt.Errorf("limits.gc_percent %d: want a positive percentage, 0 (the default, %d) or -1 (the runtime's own)", setting, DefaultGCPercent)
	}
	return nil
}

// MemoryLimit resolves a limits.memory_limit setting against the server's memory budget: 0 is
// the budget, a negative setting means no limit (returned as is), any other is the limit.
func MemoryLimit(setting, budget int64) int64 {
	if setting == 0 {
		return budget
	}
	return setting
}

// Apply sets the runtime's soft memory limit when limit > 0 and its collector target when
// gcPercent > 0 (the resolved values of MemoryLimit and GCPercent), and logs what it set.
func Apply(log *slog.Logger, limit int64, gcPercent int) {
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		log.Info("memory limit set", "bytes", limit)
	}
	if gcPercent > 0 {
		debug.SetGCPercent(gcPercent)
		log.Info("collector target set", "gc_percent", gcPercent)
	}
}
