package chunk

import (
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// cpuMeter reports throughput per CPU-second beside the wall-clock MB/s, so benchmarks on a
// shared, busy machine still say what one core does: "MB/cpu-s" = bytes processed divided by
// the process's CPU time. Call it before the loop and defer its result.
func cpuMeter(b *testing.B, bytesPerOp int64) func() {
	start := testenv.CPUTime()
	return func() {
		if cpu := testenv.CPUTime() - start; cpu > 0 {
			b.ReportMetric(float64(bytesPerOp)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
		}
	}
}
