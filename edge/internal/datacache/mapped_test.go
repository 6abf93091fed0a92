package datacache

import (
	"bytes"
	"context"
	"errors"
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

// TestWriteMappedWhileFilling: WriteMapped (the TLS path) hands the writer the verified chunks
// of a segment that is still being filled, never the incomplete one, in writes of at most
// mapWriteBytes, and the rest once it is verified.
func TestWriteMappedWhileFilling(t *testing.T) {
	o := buildXorb(t, 32, 400, 2<<10, 6<<10)
	f := newFakeFetcher(o)
	_, k := chunkRange(o.l, 0, 200)
	held := &heldReader{release: make(chan struct{}), held: make(chan struct{})}
	f.answer = func(_ fetchKey, _ int, b []byte) io.Reader {
		held.head, held.tail = b[:k+7], b[k+7:]
		return held
	}
	c, _ := testCache(t, t.TempDir(), f, 1<<30, 1<<30)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	released := false
	defer func() {
		if !released {
			close(held.release)
		}
	}()
	rr, err := c.ReadRange(context.Background(), o.l, start, end)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	w := newProgressWriter(int(k))
	done := make(chan error, 1)
	go func() {
		n, err := rr.WriteMapped(w, end-start, nil)
		if err == nil && n != end-start {
			err = errors.New("short WriteMapped without an error")
		}
		done <- err
	}()
	select {
	case <-w.reached:
	case <-time.After(wait):
		t.Fatal("the verified chunks did not reach the writer while the fill was held")
	}
	<-held.held
	if got := w.bytes(); !bytes.Equal(got, o.body[:k]) {
		t.Fatalf("written %d bytes while the fill was held, want the %d verified ones", len(got), k)
	}
	close(held.release)
	released = true
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.bytes(), o.body[start:end]) {
		t.Fatal("wrong bytes")
	}
	if w.maxWrite > mapWriteBytes {
		t.Fatalf("a write of %d bytes, want at most %d", w.maxWrite, mapWriteBytes)
	}
}

// appendWriter keeps what a Write completed: a Write that faults part-way (append copies
// before the slice is assigned) leaves nothing of itself, as a TLS record sealed part-way.
type appendWriter []byte

func (w *appendWriter) Write(p []byte) (int, error) {
	*w = append(*w, p...)
	return len(p), nil
}

// TestWriteMappedTruncatedFile: a cached segment file truncated behind the cache's back while a
// request holds it (which a mapped read would hit with SIGBUS) fails that request with an
// error, as a short read would, instead of crashing the edge.
func TestWriteMappedTruncatedFile(t *testing.T) {
	o := buildXorb(t, 33, 100, 2<<10, 6<<10)
	dir := t.TempDir()
	c, _ := testCache(t, dir, newFakeFetcher(o), 1<<30, 1<<30)
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	mustRead(t, c, o, start, end)
	c.fills.Wait() // cached and verified: the segment is renamed in after its last byte is read
	rr, err := c.ReadRange(context.Background(), o.l, start, end)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	names, _ := segmentFiles(t, dir)
	if len(names) != 1 {
		t.Fatalf("%d segment files, want 1", len(names))
	}
	if err := os.Truncate(names[0], 0); err != nil {
		t.Fatal(err)
	}
	var got appendWriter
	n, err := rr.WriteMapped(&got, end-start, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("WriteMapped of a truncated file: %d bytes, err %v; want io.ErrUnexpectedEOF", n, err)
	}
	if n != int64(len(got)) || !bytes.Equal(got, o.body[start:start+n]) {
		t.Fatalf("WriteMapped reported %d bytes, wrote %d (or not the file's)", n, len(got))
	}
}
