package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

func newTimeouts(t *testing.T, s objstore.ObjectStore, d time.Duration) *objstore.Timeouts {
	t.Helper()
	b, err := objstore.NewTimeouts(s, objstore.TimeoutOptions{Timeout: d})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// paceStore is an object store whose Put reads the body in small pieces, gap apart, and whose
// GetRange bodies stall once they handed out what they have.
type paceStore struct {
	objstore.ObjectStore
	gap   time.Duration
	stall bool // Put waits for its context after reading the body
	data  []byte
}

func (s *paceStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	buf := make([]byte, 4)
	for {
		select {
		case <-time.After(s.gap):
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := r.Read(buf); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	if s.stall {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *paceStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.Put(ctx, key, r, size)
}

func (s *paceStore) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	rc, err := s.GetRange(ctx, key, 0, int64(len(s.data)))
	return rc, int64(len(s.data)), err
}

func (s *paceStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return io.NopCloser(io.MultiReader(bytes.NewReader(s.data), ctxReader{ctx})), nil
}

// ctxReader blocks until its context ends.
type ctxReader struct{ ctx context.Context }

func (r ctxReader) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

func TestTimeouts(t *testing.T) {
	const d = 100 * time.Millisecond
	body := strings.Repeat("x", 40) // ten reads, d/3 apart

	// A write that keeps reading is never cut, however long it takes in all: twelve reads a
	// tenth of the bound apart take longer than the bound, and a gap would have to be delayed
	// nine times over (the scheduler of a loaded machine, not the store) to look idle. The
	// bound is a second here: at 100 ms, gaps of a third of it failed under load.
	const steadyBound = time.Second
	steadyBody := strings.Repeat("x", 4*12)
	for _, write := range []string{"put", "create"} {
		t.Run("steady "+write, func(t *testing.T) {
			t.Parallel()
			b := newTimeouts(t, &paceStore{gap: steadyBound / 10}, steadyBound)
			call := b.Put
			if write == "create" {
				call = b.Create
			}
			start := time.Now()
			if err := call(context.Background(), "k", strings.NewReader(steadyBody), int64(len(steadyBody))); err != nil {
				t.Fatalf("a %s that keeps reading failed: %v", write, err)
			}
			if took := time.Since(start); took <= steadyBound {
				t.Fatalf("the %s took %v, not longer than the bound %v: the test shows nothing", write, took, steadyBound)
			}
		})
	}
	for _, write := range []string{"put", "create"} {
		t.Run("stalled "+write, func(t *testing.T) {
			b := newTimeouts(t, &paceStore{gap: d / 3, stall: true}, d)
			call := b.Put
			if write == "create" {
				call = b.Create
			}
			// The test's own bound, far above d: a call that is not bounded fails, not hangs.
			ctx, cancel := context.WithTimeout(context.Background(), 50*d)
			defer cancel()
			start := time.Now()
			err := call(ctx, "k", strings.NewReader(body), int64(len(body)))
			if !errors.Is(err, objstore.ErrUnavailable) {
				t.Fatalf("a %s that never finishes: %v, want objstore.ErrUnavailable", write, err)
			}
			if took := time.Since(start); took > 20*d {
				t.Fatalf("stalled %s failed after %v, bound %v", write, took, d)
			}
		})
	}
	for _, get := range []string{"range", "whole"} {
		t.Run("body "+get, func(t *testing.T) { testBoundedBody(t, d, get) })
	}
}

// testBoundedBody checks a body returned by Timeouts.GetRange ("range") or Get ("whole").
func testBoundedBody(t *testing.T, d time.Duration, get string) {
	b := newTimeouts(t, &paceStore{data: []byte("abc")}, d)
	// The test's own bound, far above d: a body that is not watched fails, not hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 50*d)
	defer cancel()
	var rc io.ReadCloser
	var err error
	if get == "range" {
		rc, err = b.GetRange(ctx, "k", 0, 3)
	} else {
		rc, _, err = b.Get(ctx, "k")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// A consumer slower than d (a slow client downstream) is not the store's fault.
	<-time.After(2 * d)
	got := make([]byte, 3)
	if _, err := io.ReadFull(rc, got); err != nil || string(got) != "abc" {
		t.Fatalf("read after a pause: %q, %v", got, err)
	}
	// The store stalling mid-body is.
	start := time.Now()
	if _, err := rc.Read(got); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("stalled body: %v, want objstore.ErrUnavailable", err)
	}
	if took := time.Since(start); took > 20*d {
		t.Fatalf("stalled body failed after %v, bound %v", took, d)
	}
}

// TestTimeoutsKeepSendfile checks that a local file's body keeps its io.WriterTo (the
// sendfile path of plain-HTTP transfers) through the bound. The bound is generous: what is
// checked is the body's type, and the Put before it fsyncs, which took over a second on a
// loaded shared disk.
func TestTimeoutsKeepSendfile(t *testing.T) {
	l, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := objstore.NewTimeouts(l, objstore.TimeoutOptions{Timeout: 30 * time.Second, LocalBodies: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := []byte("0123456789")
	if err := b.Put(ctx, "xorbs/default/k", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	rc, err := b.GetRange(ctx, "xorbs/default/k", 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, ok := rc.(io.WriterTo); !ok {
		t.Fatalf("%T lost the local file's io.WriterTo", rc)
	}
	var got bytes.Buffer
	if _, err := io.Copy(&got, rc); err != nil || got.String() != "23456" {
		t.Fatalf("copy: %q, %v", got.String(), err)
	}
}
