package server

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// DefaultDependencyTimeout is Options.DependencyTimeout when none is given.
const DefaultDependencyTimeout = 10 * time.Second

// A dependency that refuses or resets connections fails fast, but one that stops answering (a
// network partition, a hung server) would hold a request until the client gives up: the
// drivers' own bounds are a minute or more (minio-go's response header timeout, with retries)
// or none (pgx queries run under the caller's context). The server therefore bounds every call
// it makes:
//
//   - an index call must return within the dependency timeout, except RegisterShard, which
//     the index bounds itself (postgres.Options.WriteTimeout) because a queued registration
//     must learn whether it committed;
//   - an object store call must make progress within it: Put and Create must read their body
//     and finish, Get and GetRange must return, and each Read of the returned body must return, each within the
//     timeout of the previous step. Time spent writing to a slow client does not count.
//
// A call cut off this way fails with index.ErrUnavailable or objstore.ErrUnavailable: 503
// with Retry-After.

// boundedIndex is Index with every call but RegisterShard bounded by d. It implements
// index.Raw too (through index.RawOf: the wrapped index's own, or encoded records and layouts),
// so the internal routes ship stored encodings as they would from the wrapped index.
type boundedIndex struct {
	Index
	raw index.Raw
	d   time.Duration
}

func newBoundedIndex(ix Index, d time.Duration) *boundedIndex {
	return &boundedIndex{Index: ix, raw: index.RawOf(ix), d: d}
}

// bound runs call under a context that ends after d and turns that end into
// index.ErrUnavailable; d <= 0 runs call unbounded.
func bound[T any](ctx context.Context, d time.Duration, what string, call func(context.Context) (T, error)) (T, error) {
	if d <= 0 {
		return call(ctx)
	}
	cctx, cancel := context.WithTimeoutCause(ctx, d, errDependencyTimeout)
	defer cancel()
	v, err := call(cctx)
	if err != nil && ctx.Err() == nil && context.Cause(cctx) == errDependencyTimeout {
		err = fmt.Errorf("%w: %s did not answer within %v: %w", index.ErrUnavailable, what, d, err)
	}
	return v, err
}

var errDependencyTimeout = fmt.Errorf("dependency timeout")

func (b *boundedIndex) PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) (bool, error) { return b.Index.PutXorb(ctx, l, storedSize) })
}

func (b *boundedIndex) XorbSize(ctx context.Context, h hash.Hash) (uint64, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) (uint64, error) { return b.Index.XorbSize(ctx, h) })
}

func (b *boundedIndex) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) (map[hash.Hash]*xorb.Layout, error) { return b.Index.Layouts(ctx, hs) })
}

func (b *boundedIndex) RecordPossession(ctx context.Context, scope string, x hash.Hash) error {
	_, err := bound(ctx, b.d, "index", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, b.Index.RecordPossession(ctx, scope, x)
	})
	return err
}

func (b *boundedIndex) Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) (map[hash.Hash]bool, error) { return b.Index.Possessed(ctx, scope, hs) })
}

func (b *boundedIndex) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) (*recon.FileRecord, error) { return b.Index.File(ctx, h, scope) })
}

func (b *boundedIndex) DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) ([]hash.Hash, error) { return b.Index.DedupXorbs(ctx, chunk) })
}

func (b *boundedIndex) Events(ctx context.Context, after int64, limit int) ([]index.Event, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) ([]index.Event, error) { return b.Index.Events(ctx, after, limit) })
}

func (b *boundedIndex) Ping(ctx context.Context) error {
	_, err := bound(ctx, b.d, "index", func(ctx context.Context) (struct{}, error) { return struct{}{}, b.Index.Ping(ctx) })
	return err
}

func (b *boundedIndex) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) ([]byte, error) { return b.raw.FileBytes(ctx, h, scope) })
}

func (b *boundedIndex) LayoutBytes(ctx context.Context, hs []hash.Hash) (map[hash.Hash][]byte, error) {
	return bound(ctx, b.d, "index", func(ctx context.Context) (map[hash.Hash][]byte, error) { return b.raw.LayoutBytes(ctx, hs) })
}

var (
	_ Index     = (*boundedIndex)(nil)
	_ index.Raw = (*boundedIndex)(nil)
	_ Objects   = (*boundedObjects)(nil)
)

// boundedObjects is Objects with every call required to make progress within d. The bodies
// of a local store are passed through unwatched: reading a local file is no network wait (and
// no context interrupts it), and the file's io.WriterTo keeps the sendfile path of transfers.
type boundedObjects struct {
	Objects
	d     time.Duration
	local bool
}

func newBoundedObjects(o Objects, d time.Duration) *boundedObjects {
	_, local := o.(*objstore.Local)
	return &boundedObjects{Objects: o, d: d, local: local}
}

// watchdog cancels its context when it is armed for longer than d at a stretch.
type watchdog struct {
	ctx    context.Context
	cancel context.CancelFunc
	t      *time.Timer
	d      time.Duration
	fired  atomic.Bool
}

// newWatchdog returns a watchdog over parent, armed.
func newWatchdog(parent context.Context, d time.Duration) *watchdog {
	w := &watchdog{d: d}
	w.ctx, w.cancel = context.WithCancel(parent)
	w.t = time.AfterFunc(d, func() { w.fired.Store(true); w.cancel() })
	return w
}

func (w *watchdog) arm()    { w.t.Reset(w.d) }
func (w *watchdog) disarm() { w.t.Stop() }

// err turns an error seen after the watchdog fired into objstore.ErrUnavailable.
func (w *watchdog) err(err error) error {
	if err != nil && w.fired.Load() {
		return fmt.Errorf("%w: object store made no progress for %v: %w", objstore.ErrUnavailable, w.d, err)
	}
	return err
}

// progressReader re-arms the watchdog at every Read of an upload body: the store reading the
// body is progress.
type progressReader struct {
	r io.Reader
	w *watchdog
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.w.arm()
	return n, err
}

func (b *boundedObjects) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	w := newWatchdog(ctx, b.d)
	defer w.cancel()
	err := b.Objects.Put(w.ctx, key, progressReader{r, w}, size)
	w.disarm()
	return w.err(err)
}

func (b *boundedObjects) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	w := newWatchdog(ctx, b.d)
	defer w.cancel()
	err := b.Objects.Create(w.ctx, key, progressReader{r, w}, size)
	w.disarm()
	return w.err(err)
}

func (b *boundedObjects) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	w := newWatchdog(ctx, b.d)
	rc, size, err := b.Objects.Get(w.ctx, key)
	w.disarm()
	if err != nil {
		w.cancel()
		return nil, 0, w.err(err)
	}
	if b.local { // its bodies do not use the context
		w.cancel()
		return rc, size, nil
	}
	return &watchedBody{rc: rc, w: w}, size, nil
}

// watchedBody arms the watchdog only while a Read waits on the store.
type watchedBody struct {
	rc io.ReadCloser
	w  *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.w.arm()
	n, err := b.rc.Read(p)
	b.w.disarm()
	return n, b.w.err(err)
}

func (b *watchedBody) Close() error {
	err := b.rc.Close()
	b.w.cancel()
	return err
}

func (b *boundedObjects) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	w := newWatchdog(ctx, b.d)
	rc, err := b.Objects.GetRange(w.ctx, key, off, n)
	w.disarm()
	if err != nil {
		w.cancel()
		return nil, w.err(err)
	}
	if b.local { // its bodies do not use the context
		w.cancel()
		return rc, nil
	}
	return &watchedBody{rc: rc, w: w}, nil
}

func (b *boundedObjects) Ping(ctx context.Context) error {
	w := newWatchdog(ctx, b.d)
	defer w.cancel()
	err := b.Objects.Ping(w.ctx)
	w.disarm()
	return w.err(err)
}
