//go:build !linux

package datacache

import "os"

// preallocate is a no-op where fallocate(2) is not available (see prealloc_linux.go).
func preallocate(*os.File, int64) {}
