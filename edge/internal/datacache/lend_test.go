package datacache

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// progressWriter collects what it is written and reports when it holds at least want bytes.
type progressWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	want    int
	reached chan struct{}
	once    sync.Once
	// maxWrite is the largest single Write seen.
	maxWrite int
}

func newProgressWriter(want int) *progressWriter {
	return &progressWriter{want: want, reached: make(chan struct{})}
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.maxWrite = max(w.maxWrite, len(p))
	if w.buf.Len() >= w.want {
		w.once.Do(func() { close(w.reached) })
	}
	return len(p), nil
}

func (w *progressWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.buf.Bytes())
}

// tempFileDescriptors counts this process's open descriptors on files in dir's temp directory
// (fills being written).
func tempFileDescriptors(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	prefix := filepath.Join(dir, tmpDir) + string(filepath.Separator)
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, prefix) {
			n++
		}
	}
	return n
}

// TestFillReaderBorrowsDescriptor: a request streaming a segment that is being filled
// (WriteTo, the sendfile path) reads through the fill's own descriptor instead of opening the
// file again; a second concurrent request opens its own (the offset is one reader's at a time);
// both get exactly the segment's bytes, from one origin transfer.
func TestFillReaderBorrowsDescriptor(t *testing.T) {
	o := buildXorb(t, 31, 40, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	_, three := chunkRange(o.l, 0, 3)
	held := &heldReader{release: make(chan struct{}), held: make(chan struct{})}
	f.answer = func(k fetchKey, _ int, b []byte) io.Reader {
		held.head, held.tail = b[:three+5], b[three+5:] // three chunks and part of the fourth
		return held
	}
	dir := t.TempDir()
	c, _ := testCache(t, dir, f, 1<<30, 1<<30) // one segment: the whole xorb
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	released := false
	defer func() {
		if !released {
			close(held.release)
		}
	}()

	stream := func(w *progressWriter, errc chan<- error) {
		rr, err := c.ReadRange(context.Background(), o.l, start, end)
		if err != nil {
			errc <- err
			return
		}
		defer rr.Close()
		_, err = rr.WriteTo(w)
		errc <- err
	}
	waitFor := func(w *progressWriter) {
		t.Helper()
		select {
		case <-w.reached:
		case <-time.After(wait):
			t.Fatal("the verified first chunks did not reach the writer while the fill was held")
		}
	}
	errc := make(chan error, 2)
	w1 := newProgressWriter(int(three))
	go stream(w1, errc)
	waitFor(w1)
	if n := tempFileDescriptors(t, dir); n != 1 {
		t.Fatalf("one reader of a filling segment: %d descriptors on the temp file, want 1 (the fill's, lent)", n)
	}
	w2 := newProgressWriter(int(three))
	go stream(w2, errc)
	waitFor(w2)
	if n := tempFileDescriptors(t, dir); n != 2 {
		t.Fatalf("two readers of a filling segment: %d descriptors on the temp file, want 2 (the fill's and one reopened)", n)
	}
	for _, w := range []*progressWriter{w1, w2} {
		if got := w.bytes(); len(got) != int(three) {
			t.Fatalf("a reader was written %d bytes before the fourth chunk was complete, want %d", len(got), three)
		}
	}
	close(held.release)
	released = true
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []*progressWriter{w1, w2} {
		if !bytes.Equal(w.bytes(), o.body[start:end]) {
			t.Fatal("a reader got wrong bytes")
		}
	}
	if total, _, _ := f.counts(); total != 1 {
		t.Fatalf("%d origin transfers, want 1", total)
	}
}
