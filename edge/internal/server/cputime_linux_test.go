package server

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time (user + system, all threads) the process has used so far. On the
// shared benchmark machine wall-clock ns/op mostly measures the wait for a core; cpu-ms/op
// does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ms/op for a loop that started at start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(time.Millisecond)/float64(max(b.N, 1)), "cpu-ms/op")
}
