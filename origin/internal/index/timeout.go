package index

import (
	"context"
	"fmt"
	"time"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Timeouts is an Index decorator that bounds every call but RegisterShard and Close.
//
// An index that refuses or resets connections fails fast, but one that stops answering (a
// network partition, a hung server) would hold a request until the client gives up: pgx
// queries run under the caller's context and have no bound of their own. Each call therefore
// runs under a context that ends after the timeout, and a call cut off that way fails wrapping
// ErrUnavailable (the origin answers 503 with Retry-After). A caller that leaves first gets its
// own context's error, not ErrUnavailable. RegisterShard is not bounded here: the index bounds
// it itself (postgres.Options.WriteTimeout), because a queued registration must learn whether it
// committed.
type Timeouts struct {
	next Index
	d    time.Duration
}

// NewTimeouts wraps ix with the bound d, which must be positive.
func NewTimeouts(ix Index, d time.Duration) (*Timeouts, error) {
	if d <= 0 {
		return nil, fmt.Errorf("%w: index timeout %v", ErrInvalid, d)
	}
	return &Timeouts{next: ix, d: d}, nil
}

// Timeout is the bound of each call.
func (t *Timeouts) Timeout() time.Duration { return t.d }

// Unwrap returns the wrapped index.
func (t *Timeouts) Unwrap() Index { return t.next }

// Bound runs call under a context that ends after d and turns that end into an error wrapping
// ErrUnavailable that names what did not answer; d <= 0 runs call unbounded. A caller whose own
// context ends first gets that context's error.
func Bound[T any](ctx context.Context, d time.Duration, what string, call func(context.Context) (T, error)) (T, error) {
	if d <= 0 {
		return call(ctx)
	}
	cctx, cancel := context.WithTimeoutCause(ctx, d, errTimeout)
	defer cancel()
	v, err := call(cctx)
	if err != nil && ctx.Err() == nil && context.Cause(cctx) == errTimeout {
		err = fmt.Errorf("%w: %s did not answer within %v: %w", ErrUnavailable, what, d, err)
	}
	return v, err
}

var errTimeout = fmt.Errorf("index: call timeout")

func (t *Timeouts) PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) (bool, error) { return t.next.PutXorb(ctx, l, storedSize) })
}

// MemoryLayouts is implemented by the caches in front of an index that can answer Layouts from
// memory alone: ok reports that every layout of hs was cached (none is then looked up).
type MemoryLayouts interface {
	CachedLayouts(hs []hash.Hash) (map[hash.Hash]*xorb.Layout, bool)
}

// Layouts is bounded unless the caches below answer it from memory: a shard check asks for the
// layouts of every registration, and the timer of a bound was ~3 % of the origin's CPU while
// registering shards (perf/BENCHMARKS.md, 2026-12-02 "Shard registration: the origin's
// allocations"). A call that waits for anything — a miss, or a lookup shared with concurrent
// callers — is bounded as before.
func (t *Timeouts) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	if m, ok := t.next.(MemoryLayouts); ok {
		if out, ok := m.CachedLayouts(hs); ok {
			return out, nil
		}
	}
	return Bound(ctx, t.d, "index", func(ctx context.Context) (map[hash.Hash]*xorb.Layout, error) { return t.next.Layouts(ctx, hs) })
}

func (t *Timeouts) XorbSize(ctx context.Context, x hash.Hash) (uint64, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) (uint64, error) { return t.next.XorbSize(ctx, x) })
}

// RegisterShard is not bounded here (see Timeouts).
func (t *Timeouts) RegisterShard(ctx context.Context, r *Registration) (bool, error) {
	return t.next.RegisterShard(ctx, r)
}

func (t *Timeouts) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) (*recon.FileRecord, error) { return t.next.File(ctx, h, scope) })
}

func (t *Timeouts) Visible(ctx context.Context, h hash.Hash, scope string) error {
	_, err := Bound(ctx, t.d, "index", func(ctx context.Context) (struct{}, error) { return struct{}{}, t.next.Visible(ctx, h, scope) })
	return err
}

func (t *Timeouts) DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]hash.Hash, error) { return t.next.DedupXorbs(ctx, chunk) })
}

func (t *Timeouts) DedupXorbsOf(ctx context.Context, chunks []hash.Hash) ([]hash.Hash, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]hash.Hash, error) { return t.next.DedupXorbsOf(ctx, chunks) })
}

func (t *Timeouts) RecordPossession(ctx context.Context, scope string, x hash.Hash) error {
	_, err := Bound(ctx, t.d, "index", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.next.RecordPossession(ctx, scope, x)
	})
	return err
}

func (t *Timeouts) Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) (map[hash.Hash]bool, error) { return t.next.Possessed(ctx, scope, hs) })
}

func (t *Timeouts) Hide(ctx context.Context, scope string, files []hash.Hash) error {
	_, err := Bound(ctx, t.d, "index", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.next.Hide(ctx, scope, files)
	})
	return err
}

func (t *Timeouts) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]Event, error) { return t.next.Events(ctx, after, limit) })
}

func (t *Timeouts) Ping(ctx context.Context) error {
	_, err := Bound(ctx, t.d, "index", func(ctx context.Context) (struct{}, error) { return struct{}{}, t.next.Ping(ctx) })
	return err
}

// Close is not bounded: it waits for the wrapped index to release its resources.
func (t *Timeouts) Close() error { return t.next.Close() }

func (t *Timeouts) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]byte, error) { return t.next.FileBytes(ctx, h, scope) })
}

func (t *Timeouts) LayoutBytes(ctx context.Context, hs []hash.Hash) (map[hash.Hash][]byte, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) (map[hash.Hash][]byte, error) { return t.next.LayoutBytes(ctx, hs) })
}

func (t *Timeouts) ShardBody(ctx context.Context, h hash.Hash) ([]byte, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]byte, error) { return t.next.ShardBody(ctx, h) })
}

// Lifecycle (index.Lifecycle).

// Delete is bounded like Hide: one cut off may still commit; deleting again then answers
// ErrNotFound, which callers retrying a delete treat as done.
func (t *Timeouts) Delete(ctx context.Context, scope string, files []hash.Hash) (int, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) (int, error) { return t.next.Delete(ctx, scope, files) })
}

// VisibleFiles bounds each page.
func (t *Timeouts) VisibleFiles(ctx context.Context, after VisibleKey, limit int) ([]VisibleFile, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]VisibleFile, error) { return t.next.VisibleFiles(ctx, after, limit) })
}

// The garbage collector's calls are bounded like every other: each is one page or one batch.

func (t *Timeouts) Files(ctx context.Context, after hash.Hash, limit int) ([]FileEntry, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]FileEntry, error) { return t.next.Files(ctx, after, limit) })
}

func (t *Timeouts) Xorbs(ctx context.Context, after hash.Hash, limit int) ([]XorbEntry, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]XorbEntry, error) { return t.next.Xorbs(ctx, after, limit) })
}

func (t *Timeouts) Condemn(ctx context.Context, xs []hash.Hash, at time.Time) error {
	_, err := Bound(ctx, t.d, "index", func(ctx context.Context) (struct{}, error) { return struct{}{}, t.next.Condemn(ctx, xs, at) })
	return err
}

func (t *Timeouts) Revive(ctx context.Context, xs []hash.Hash) error {
	_, err := Bound(ctx, t.d, "index", func(ctx context.Context) (struct{}, error) { return struct{}{}, t.next.Revive(ctx, xs) })
	return err
}

// Sweep cut off may still commit; the collector then finds the xorbs swept on its next run.
func (t *Timeouts) Sweep(ctx context.Context, cands []SweepCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]hash.Hash, error) { return t.next.Sweep(ctx, cands, condemnedBefore) })
}

func (t *Timeouts) Swept(ctx context.Context, limit int) ([]hash.Hash, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]hash.Hash, error) { return t.next.Swept(ctx, limit) })
}

func (t *Timeouts) ObjectsDeleted(ctx context.Context, xs []hash.Hash) error {
	_, err := Bound(ctx, t.d, "index", func(ctx context.Context) (struct{}, error) { return struct{}{}, t.next.ObjectsDeleted(ctx, xs) })
	return err
}

func (t *Timeouts) LockCollector(ctx context.Context) (func(), error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) (func(), error) { return t.next.LockCollector(ctx) })
}

// Dead shards (ShardLifecycle). A SweepShards cut off may still commit; the collector then
// finds the shards gone on its next run.

func (t *Timeouts) Shards(ctx context.Context, after hash.Hash, limit int) ([]ShardEntry, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]ShardEntry, error) { return t.next.Shards(ctx, after, limit) })
}

func (t *Timeouts) CondemnShards(ctx context.Context, condemn, revive []hash.Hash, at time.Time) error {
	_, err := Bound(ctx, t.d, "index", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.next.CondemnShards(ctx, condemn, revive, at)
	})
	return err
}

func (t *Timeouts) SweepShards(ctx context.Context, cands []ShardCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	return Bound(ctx, t.d, "index", func(ctx context.Context) ([]hash.Hash, error) {
		return t.next.SweepShards(ctx, cands, condemnedBefore)
	})
}
