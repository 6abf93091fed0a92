package ingest

import (
	"context"
	"errors"
	"fmt"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ensureStored runs after PutXorb inserted the xorb's row: garbage collection may have deleted
// the object of the same hash between this upload's object write and that insert (the index
// refuses the insert while the deletion is pending, and allows it once the deletion is done;
// docs/decisions.md, "Data lifecycle"). A missing object is written again from this upload's
// bytes by rewrite, which the row describes when this upload wrote the object itself (own).
func (s *Service) ensureStored(ctx context.Context, h hash.Hash, own bool, rewrite func() error) error {
	_, err := s.objs.Stat(ctx, XorbKey(h))
	if err == nil {
		return nil
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("xorb %s: check stored object: %w", h, err)
	}
	if !own {
		// The row describes another upload's object, now deleted: it cannot be rebuilt from
		// these bytes. Documented limitation; the window is one upload racing a deletion.
		return fmt.Errorf("%w: xorb %s: stored object vanished during garbage collection", index.ErrUnavailable, h)
	}
	if err := rewrite(); err != nil {
		return fmt.Errorf("store xorb %s again: %w", h, err)
	}
	return nil
}
