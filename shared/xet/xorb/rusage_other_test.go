//go:build !unix

package xorb

import (
	"testing"
	"time"
)

// processCPU is not measured on this platform; the cpu-ms/op metric then reads 0.
func processCPU(*testing.B) time.Duration { return 0 }
