//go:build unix

package sqlite

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/xetcdn/xetcdn/origin/internal/index"
)

// LockCollector implements index.Lifecycle with an exclusive flock on DATABASE-gc.lock, which
// every process opening this database (the origin, `xet-origin gc`) contends for; the kernel
// drops it when the holder dies.
func (db *DB) LockCollector(ctx context.Context) (func(), error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(db.path+"-gc.lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: collector lock: %w", index.ErrUnavailable, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("%w (lock file %s)", index.ErrCollectorBusy, f.Name())
		}
		return nil, fmt.Errorf("%w: collector lock: %w", index.ErrUnavailable, err)
	}
	return func() { f.Close() }, nil // closing the descriptor releases the lock
}
