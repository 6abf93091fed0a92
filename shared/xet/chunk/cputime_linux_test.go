package chunk

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the CPU time (user + system) the process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter reports throughput per CPU-second beside the wall-clock MB/s, so benchmarks on a
// shared, busy machine still say what one core does: "MB/cpu-s" = bytes processed divided by
// the process's CPU time. Call it before the loop and defer its result.
func cpuMeter(b *testing.B, bytesPerOp int64) func() {
	start := processCPU()
	return func() {
		if cpu := processCPU() - start; cpu > 0 {
			b.ReportMetric(float64(bytesPerOp)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
		}
	}
}
