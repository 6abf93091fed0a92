//go:build unix

package objstore

import (
	"errors"
	"os"
	"syscall"
)

// lockTemp marks f, a temporary file just created, as the file of a write in flight: an
// exclusive flock held until the descriptor is closed (Staged.Close), which RemoveTemps does
// not take from a live process (the kernel drops it when the writer dies). It reports false
// when a collector took the file first (its flock is held, or the file is already removed):
// the caller creates another.
func lockTemp(f *os.File) (bool, error) {
	if ok, err := tryLockTemp(f); err != nil || !ok {
		return false, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false, err
	}
	return st.Nlink > 0, nil // 0: removed between its creation and the lock
}

// tryLockTemp takes f's flock without waiting; false when a write in flight holds it.
func tryLockTemp(f *os.File) (bool, error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
