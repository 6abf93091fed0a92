package objstore

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// Timeouts is an ObjectStore decorator that requires every call to make progress within a
// bound.
//
// A store that refuses or resets connections fails fast, but one that stops answering (a
// network partition, a hung server) would hold a request until the client gives up: minio-go's
// own bounds are a minute or more, with retries. So Put and Create must read their body and
// finish, Get and GetRange must return, Stat, Delete and Ping must return, and each Read of a
// returned body must return, each within the bound of the previous step. Time spent by the
// caller between reads (writing to a slow client) does not count. A call cut off this way fails
// wrapping ErrUnavailable (the origin answers 503 with Retry-After).
type Timeouts struct {
	next  ObjectStore
	d     time.Duration
	local bool
}

// TimeoutOptions configure NewTimeouts.
type TimeoutOptions struct {
	// Timeout is the bound of each step (required, > 0).
	Timeout time.Duration
	// LocalBodies says that the bodies Get and GetRange return are read from a local disk
	// (Local): they are passed through unwatched, because reading a local file is no network
	// wait (and no context interrupts it), and the file's io.WriterTo keeps the sendfile path of
	// transfers. Whoever opens the store sets it; the decorator does not look at what it wraps.
	LocalBodies bool
}

// NewTimeouts wraps s with the bound o.Timeout.
func NewTimeouts(s ObjectStore, o TimeoutOptions) (*Timeouts, error) {
	if o.Timeout <= 0 {
		return nil, fmt.Errorf("objstore: timeout %v is not positive", o.Timeout)
	}
	return &Timeouts{next: s, d: o.Timeout, local: o.LocalBodies}, nil
}

// Timeout is the bound of each step.
func (t *Timeouts) Timeout() time.Duration { return t.d }

// Unwrap returns the wrapped store.
func (t *Timeouts) Unwrap() ObjectStore { return t.next }

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

// err turns an error seen after the watchdog fired into ErrUnavailable.
func (w *watchdog) err(err error) error {
	if err != nil && w.fired.Load() {
		return fmt.Errorf("%w: object store made no progress for %v: %w", ErrUnavailable, w.d, err)
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

// call runs one step that returns no body under a fresh watchdog.
func (t *Timeouts) call(ctx context.Context, fn func(ctx context.Context) error) error {
	w := newWatchdog(ctx, t.d)
	defer w.cancel()
	err := fn(w.ctx)
	w.disarm()
	return w.err(err)
}

// write runs one store of r's bytes under a watchdog that each read of r moves forward.
func (t *Timeouts) write(ctx context.Context, r io.Reader, store func(ctx context.Context, r io.Reader) error) error {
	w := newWatchdog(ctx, t.d)
	defer w.cancel()
	err := store(w.ctx, progressReader{r, w})
	w.disarm()
	return w.err(err)
}

func (t *Timeouts) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return t.write(ctx, r, func(ctx context.Context, r io.Reader) error { return t.next.Put(ctx, key, r, size) })
}

func (t *Timeouts) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	return t.write(ctx, r, func(ctx context.Context, r io.Reader) error { return t.next.Create(ctx, key, r, size) })
}

func (t *Timeouts) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	w := newWatchdog(ctx, t.d)
	rc, size, err := t.next.Get(w.ctx, key)
	w.disarm()
	if err != nil {
		w.cancel()
		return nil, 0, w.err(err)
	}
	if t.local { // its bodies do not use the context
		w.cancel()
		return rc, size, nil
	}
	return &watchedBody{rc: rc, w: w}, size, nil
}

func (t *Timeouts) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	w := newWatchdog(ctx, t.d)
	rc, err := t.next.GetRange(w.ctx, key, off, n)
	w.disarm()
	if err != nil {
		w.cancel()
		return nil, w.err(err)
	}
	if t.local { // its bodies do not use the context
		w.cancel()
		return rc, nil
	}
	return &watchedBody{rc: rc, w: w}, nil
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

func (t *Timeouts) Stat(ctx context.Context, key string) (int64, error) {
	var size int64
	err := t.call(ctx, func(ctx context.Context) error {
		var err error
		size, err = t.next.Stat(ctx, key)
		return err
	})
	return size, err
}

func (t *Timeouts) Delete(ctx context.Context, key string) error {
	return t.call(ctx, func(ctx context.Context) error { return t.next.Delete(ctx, key) })
}

func (t *Timeouts) Ping(ctx context.Context) error {
	return t.call(ctx, func(ctx context.Context) error { return t.next.Ping(ctx) })
}

// List bounds the wait for each listed object (a page request) by the timeout; the time spent
// in fn does not count.
func (t *Timeouts) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	w := newWatchdog(ctx, t.d)
	defer w.cancel()
	var fnErr error
	err := t.next.List(w.ctx, prefix, func(o ObjectInfo) error {
		w.disarm()
		fnErr = fn(o)
		w.arm()
		return fnErr
	})
	w.disarm()
	if fnErr != nil {
		return fnErr // the caller's own answer, whatever the watchdog did meanwhile
	}
	return w.err(err)
}
