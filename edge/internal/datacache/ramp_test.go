package datacache

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

// rampFixture is a cache of 16 KiB segments in chains of two over a ~256 KiB xorb whose first
// origin answer (the one starting at the chunk area's first byte) sends nothing until release
// is closed.
type rampFixture struct {
	c       *Cache
	f       *fakeFetcher
	o       object
	release chan struct{}
}

func newRampFixture(t *testing.T, rampWait time.Duration) *rampFixture {
	t.Helper()
	o := buildXorb(t, 31, 64, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	fx := &rampFixture{f: f, o: o, release: make(chan struct{})}
	f.answer = func(k fetchKey, before int, b []byte) io.Reader {
		if k.start == 0 && before == 0 {
			return &heldReader{tail: b, release: fx.release, held: make(chan struct{})}
		}
		return bytes.NewReader(b)
	}
	fx.c, _ = testCache(t, t.TempDir(), f, 1<<30, 16<<10)
	fx.c.chainMax = 32 << 10
	fx.c.rampWait = rampWait
	t.Cleanup(func() {
		select {
		case <-fx.release:
		default:
			close(fx.release)
		}
	})
	return fx
}

func (fx *rampFixture) requests() int {
	total, _, _ := fx.f.counts()
	return total
}

// onlyFirst checks that, a while after the first request, it is still the only one.
func (fx *rampFixture) onlyFirst(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for fx.requests() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := fx.requests(); n != 1 {
		t.Fatalf("%d origin requests while the first chain had no bytes, want 1", n)
	}
}

// more waits until the later chains are requested.
func (fx *rampFixture) more(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for fx.requests() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the later chains were never requested")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadRampsAfterFirstBytes: a cold read asks the origin for its first chain alone, and for
// the others once the first chain's first bytes are verified; the bytes read are the xorb's.
func TestReadRampsAfterFirstBytes(t *testing.T) {
	fx := newRampFixture(t, time.Hour)
	start, end := chunkRange(fx.o.l, 0, fx.o.l.NumChunks())
	got := make(chan []byte, 1)
	errs := make(chan error, 1)
	go func() {
		b, err := fx.c.ReadBytes(context.Background(), fx.o.l, start, end)
		errs <- err
		got <- b
	}()
	fx.onlyFirst(t)
	close(fx.release)
	fx.more(t)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(<-got, fx.o.body[start:end]) {
		t.Fatal("wrong bytes")
	}
}

// TestRampWaitBounded: when the first chain's bytes do not come, the later chains are asked
// for after rampWait anyway (a far origin pays at most rampWait, not its round trip).
func TestRampWaitBounded(t *testing.T) {
	fx := newRampFixture(t, 50*time.Millisecond)
	start, end := chunkRange(fx.o.l, 0, fx.o.l.NumChunks())
	go func() { _, _ = fx.c.ReadBytes(context.Background(), fx.o.l, start, end) }()
	fx.more(t) // the first chain is still held
	close(fx.release)
}

// TestPrefetchRampsAfterFirstBytes: read-ahead ramps the same way, and counts every segment it
// started at once.
func TestPrefetchRampsAfterFirstBytes(t *testing.T) {
	fx := newRampFixture(t, time.Hour)
	start, end := chunkRange(fx.o.l, 0, fx.o.l.NumChunks())
	n, err := fx.c.Prefetch(fx.o.l, start, end)
	if err != nil {
		t.Fatal(err)
	}
	r, err := requestSpan(fx.o.l, start, end)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(segments(fx.o.l, r, 16<<10)); n != want {
		t.Fatalf("Prefetch started %d fills, want %d", n, want)
	}
	fx.onlyFirst(t)
	close(fx.release)
	fx.more(t)
	mustRead(t, fx.c, fx.o, start, end)
}
