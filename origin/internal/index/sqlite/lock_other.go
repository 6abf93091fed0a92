//go:build !unix

package sqlite

import (
	"context"
	"sync"

	"github.com/xetcdn/xetcdn/origin/internal/index"
)

var collectorMu sync.Mutex

// LockCollector implements index.Lifecycle within this process only (no flock here).
func (db *DB) LockCollector(ctx context.Context) (func(), error) {
	if !collectorMu.TryLock() {
		return nil, index.ErrCollectorBusy
	}
	return collectorMu.Unlock, nil
}
