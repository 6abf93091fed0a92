package datacache

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFillPreallocates: a fill reserves its segment's disk space before the first write, while
// the temp file's size still covers only the verified chunks.
func TestFillPreallocates(t *testing.T) {
	dir := t.TempDir()
	probe, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Fallocate(int(probe.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 1<<20)
	probe.Close()
	os.Remove(probe.Name())
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("the file system of %s cannot preallocate: %v", dir, err)
	} else if err != nil {
		t.Fatal(err)
	}

	o := buildXorb(t, 23, 64, 4<<10, 12<<10)
	f := newFakeFetcher(o)
	_, three := chunkRange(o.l, 0, 3)
	held := &heldReader{release: make(chan struct{}), held: make(chan struct{})}
	f.answer = func(k fetchKey, _ int, b []byte) io.Reader {
		held.head, held.tail = b[:three+5], b[three+5:]
		return held
	}
	c, _ := testCache(t, filepath.Join(dir, "cache"), f, 1<<30, 1<<30) // one segment: the whole xorb
	start, end := chunkRange(o.l, 0, o.l.NumChunks())
	go func() {
		rr, err := c.ReadRange(context.Background(), o.l, start, end)
		if err == nil {
			_, _ = io.Copy(io.Discard, rr)
			rr.Close()
		}
	}()
	select {
	case <-held.held:
	case <-time.After(wait):
		close(held.release)
		t.Fatal("the fill did not read the answer's head")
	}
	defer close(held.release)
	names, err := filepath.Glob(filepath.Join(c.idx.tmp(), "*"))
	if err != nil || len(names) != 1 {
		t.Fatalf("want one temp file, have %v (%v)", names, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(names[0], &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != three {
		t.Errorf("temp file size %d, want the %d verified bytes", st.Size, three)
	}
	if reserved := st.Blocks * 512; reserved < int64(end-start) {
		t.Errorf("temp file has %d bytes of disk for a %d-byte segment with %d written: not preallocated", reserved, end-start, three)
	}
}
