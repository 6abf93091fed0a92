//go:build unix

package testenv

import (
	"os"
	"syscall"
)

// lockFile opens path (creating it) and takes an exclusive lock on it without waiting; the lock
// holds while the returned file stays open and ends when it is closed or the process exits.
func lockFile(path string) (*os.File, bool) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}
