package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// The origin's reconstruction, HEAD file and transfer routes are shared/readpath's handlers
// over Source, the origin's readpath.Source: records, visibility and layouts from the index
// (behind backend.Open's decorators: index.FileCache answers warm records and visibility from
// memory), xorb bytes from the object store (docs/architecture.md, "The read path").

// maxParallelWriters bounds the goroutines one answer is written by.
const maxParallelWriters = 8

// Source is the origin's readpath.Source over an index and an object store.
type Source struct {
	Index   Index
	Objects Objects
}

var _ readpath.Source = Source{}

// notVisible adds readpath.ErrNotFound to an error that means "not visible" (is is the
// index's sentinels that mean it), keeping the index's own.
func notVisible(err error, is ...error) error {
	for _, s := range is {
		if errors.Is(err, s) {
			return fmt.Errorf("%w (%w)", err, readpath.ErrNotFound)
		}
	}
	return err
}

// File implements readpath.Source: index.File (errors wrap index.ErrNotFound and
// readpath.ErrNotFound when the file is not visible in scope).
func (s Source) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	rec, err := s.Index.File(ctx, h, scope)
	if err != nil {
		return nil, notVisible(err, index.ErrNotFound)
	}
	return rec, nil
}

// Visible implements readpath.Source from the index's visibility probe (index.FileCache
// answers it from memory while its answer is fresh). A scope the index refuses
// (index.ErrInvalid) sees nothing.
func (s Source) Visible(ctx context.Context, h hash.Hash, scope string) error {
	return notVisible(s.Index.Visible(ctx, h, scope), index.ErrNotFound, index.ErrInvalid)
}

// Layout implements readpath.Source. A layout the index lacks is an inconsistency (500).
func (s Source) Layout(ctx context.Context, h hash.Hash) (*xorb.Layout, error) {
	m, err := s.Index.Layouts(ctx, []hash.Hash{h})
	if err != nil {
		return nil, err
	}
	l, ok := m[h]
	if !ok {
		return nil, fmt.Errorf("layout of xorb %s referenced by a file record is missing", h)
	}
	return l, nil
}

// Xorb implements readpath.Source: the stored object's size from the index (index.ErrNotFound
// for an unknown xorb), its bytes from the object store.
func (s Source) Xorb(ctx context.Context, h hash.Hash) (readpath.Xorb, error) {
	size, err := s.Index.XorbSize(ctx, h)
	if err != nil {
		return nil, err
	}
	return storedXorb{objs: s.Objects, key: ingest.XorbKey(h), size: size}, nil
}

// storedXorb is a xorb object in the object store.
type storedXorb struct {
	objs Objects
	key  string
	size uint64
}

func (x storedXorb) Size() uint64 { return x.size }

// Open asks the object store for the range; the store answers once the first byte can be read.
func (x storedXorb) Open(ctx context.Context, b httprange.ByteRange) (readpath.Part, error) {
	rc, err := x.objs.GetRange(ctx, x.key, int64(b.Start), int64(b.Len()))
	if err != nil {
		return nil, err
	}
	return &storedPart{rc: rc}, nil
}

// storedPart is an open range of an object-store object.
type storedPart struct{ rc io.ReadCloser }

func (p *storedPart) Send(w io.Writer, buf []byte) (int64, error) {
	if buf != nil {
		return io.CopyBuffer(w, p.rc, buf)
	}
	return io.Copy(w, p.rc)
}

func (p *storedPart) Close() error {
	if p.rc == nil {
		return nil
	}
	err := p.rc.Close()
	p.rc = nil
	return err
}
