//go:build !unix

package testenv

import "time"

// CPUTime is not measured on this platform: it reads 0.
func CPUTime() time.Duration { return 0 }
