package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// xorbCopy is a validated encoding of a xorb an upload holds: its layout, its stored size, and
// put, which stores those bytes under the xorb's key replacing any object there.
type xorbCopy struct {
	l    *xorb.Layout
	size uint64
	put  func() error
}

// ensureStored runs after an upload's index write, whether or not it inserted the row (row,
// rowSize): no upload is acknowledged unless the object under the xorb's key is one the row
// describes (docs/decisions.md, 2026-12-02 "No acknowledged xorb without the indexed object").
// Garbage collection may have deleted the object between this upload's object write (or its
// read of the object found there) and the row — a swept xorb's pending deletion or an orphan's
// (docs/decisions.md, "Data lifecycle", "Orphan objects") — and another upload, of the same
// hash in another encoding, may then have created its own object under the key. A missing or
// different object is replaced by the copy (this upload's own bytes, or those it read back)
// whose layout is the row's; with none, the upload fails with index.ErrUnavailable (503: the
// upload holding the row's bytes puts them back, or a later one does, see storedIndexed).
func (s *Service) ensureStored(ctx context.Context, h hash.Hash, row *xorb.Layout, rowSize uint64, copies ...xorbCopy) error {
	ok, err := s.holds(ctx, h, row, rowSize)
	if err != nil {
		return fmt.Errorf("xorb %s: check stored object: %w", h, err)
	}
	if ok {
		return nil
	}
	for _, c := range copies {
		if c.size == rowSize && sameLayout(c.l, row) {
			if err := c.put(); err != nil {
				return fmt.Errorf("store xorb %s again: %w", h, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: xorb %s: its object is missing or not the indexed encoding, and this upload holds another encoding", index.ErrUnavailable, h)
}

// holds reports whether the object under XorbKey(h) is row's: rowSize bytes whose footer
// describes row's chunks at row's offsets. Cost: a Stat and a read of the footer (40 bytes a
// chunk), once per upload that reaches the index write.
func (s *Service) holds(ctx context.Context, h hash.Hash, row *xorb.Layout, rowSize uint64) (bool, error) {
	key := XorbKey(h)
	size, err := s.objs.Stat(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	area := uint64(row.ChunkAreaLen())
	if uint64(size) != rowSize || area >= rowSize {
		return false, nil
	}
	rc, err := s.objs.GetRange(ctx, key, int64(area), int64(rowSize-area))
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer rc.Close()
	tail := make([]byte, rowSize-area)
	if _, err := io.ReadFull(rc, tail); err != nil {
		return false, fmt.Errorf("read the footer of %s: %w", key, err)
	}
	stored, n, err := xorb.ParseFooter(tail)
	if err != nil || n != len(tail) {
		return false, nil // not a footer of a chunk area as long as row's: another encoding
	}
	return sameLayout(stored, row), nil
}

// sameLayout reports whether a and b place the same chunks at the same offsets: a reader
// following either reads valid chunks from an object stored with the other.
func sameLayout(a, b *xorb.Layout) bool {
	return a.Hash == b.Hash && slices.Equal(a.ChunkHashes, b.ChunkHashes) && slices.Equal(a.StoredEnds, b.StoredEnds)
}
