//go:build !unix

package testenv

import "os"

// lockFile cannot lock here; FreeAddr then uses the kernel's choice of port.
func lockFile(string) (*os.File, bool) { return nil, false }
