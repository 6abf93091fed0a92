package ingest

import (
	"context"
	"errors"
	"fmt"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ensureStored runs after PutXorb inserted the xorb's row: garbage collection may have deleted
// the object of the same hash between this upload's object write (or its read of the object
// found there) and that insert — a swept xorb's pending deletion (the index refuses the insert
// while it is pending and allows it once done) or an orphan's (docs/decisions.md, "Data
// lifecycle", "Orphan objects"). A missing object is written again by rewrite, from the bytes the
// row describes: this upload's own when it wrote the object, else those it read back
// (indexStored).
func (s *Service) ensureStored(ctx context.Context, h hash.Hash, rewrite func() error) error {
	_, err := s.objs.Stat(ctx, XorbKey(h))
	if err == nil {
		return nil
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("xorb %s: check stored object: %w", h, err)
	}
	if err := rewrite(); err != nil {
		return fmt.Errorf("store xorb %s again: %w", h, err)
	}
	return nil
}
