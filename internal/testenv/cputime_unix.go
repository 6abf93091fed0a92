//go:build unix

package testenv

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time (user + system, all threads) this process has used so far, or 0 where
// it cannot be read. On a shared benchmark machine wall-clock ns/op mostly measures the wait for
// a core; a CPU time difference around the loop does not.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
