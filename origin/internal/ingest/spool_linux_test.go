package ingest

import (
	"bytes"
	"crypto/rand"
	"io"
	"testing"
	"time"
)

// TestFlatKept: a finished flat body's mapping is handed to the next body instead of a fresh
// one (so its pages are not cleared again), and the next body's object is what that body read,
// never what the earlier one left beyond it.
func TestFlatKept(t *testing.T) {
	flatIdle.drain()
	t.Cleanup(flatIdle.drain)
	m := &meter{ceiling: 8 * spoolSegment}
	old := make([]byte, 2*spoolSegment+500)
	rand.Read(old)
	first := readFlat(t, old, m)
	first.free()

	next := make([]byte, spoolSegment/3)
	rand.Read(next)
	second := readFlat(t, next, m)
	defer second.free()
	// A fresh mapping is cleared; the kept one still holds the first body past the second's end
	// (the kernel could take MADV_FREE pages back under memory pressure, clearing them: only
	// then would this fail with the code right).
	if !bytes.Equal(second.b[len(next):len(old)], old[len(next):]) {
		t.Fatal("the second body got a fresh (cleared) mapping, not the first body's")
	}
	got, err := io.ReadAll(second.reader())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, next) {
		t.Fatalf("the second body's object is %d bytes, not the %d it read", len(got), len(next))
	}
}

// readFlat reads data into a new flat body as putFlat does, and sets its size.
func readFlat(t *testing.T, data []byte, m *meter) *flat {
	t.Helper()
	b, err := newFlat(flatLen)
	if err != nil {
		t.Fatal(err)
	}
	f := &flat{b: b, mem: m.reserve}
	fr := flatReader{f, bytes.NewReader(data)}
	for {
		n, err := fr.Read(f.b[f.n:])
		if err == io.EOF || (err == nil && n == 0) {
			break
		}
		if err != nil {
			f.free()
			t.Fatal(err)
		}
	}
	f.size = f.n
	return f
}

// TestFlatKeepBounds: at most max mappings are kept idle (the rest are unmapped), a mapping of
// another length is not handed out, and idle mappings are unmapped idleFor after the last one
// was kept.
func TestFlatKeepBounds(t *testing.T) {
	k := &flatKeep{max: 2, idleFor: 50 * time.Millisecond}
	var bs [][]byte
	for range 3 {
		b, err := newFlat(4 * spoolSegment)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	for i, b := range bs {
		if kept := k.keep(b); kept != (i < 2) {
			t.Fatalf("mapping %d: kept %v", i, kept)
		}
	}
	munmapFlat(bs[2])
	if b := k.take(2 * spoolSegment); b != nil {
		t.Fatal("a kept mapping of another length was handed out")
	}
	if b := k.take(4 * spoolSegment); b == nil {
		t.Fatal("no kept mapping handed out")
	} else {
		k.keep(b)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		k.mu.Lock()
		n := len(k.idle)
		k.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle mappings still kept 10 s after the last was kept", n)
		}
	}
}
