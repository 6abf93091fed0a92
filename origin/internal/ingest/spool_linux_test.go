package ingest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
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

// TestFlatOrdinaryPages: a flat body's mapping and a spool segment are advised MADV_NOHUGEPAGE
// ("nh" in /proc/self/smaps) and a written body is backed by no transparent huge page, whatever
// transparent_hugepage says: fresh huge pages cost the first touch on a VM with free page
// reporting (docs/decisions.md, "Ordinary pages for xorb bodies").
func TestFlatOrdinaryPages(t *testing.T) {
	flatIdle.drain()
	t.Cleanup(flatIdle.drain)
	b, err := newFlat(flatLen)
	if err != nil {
		t.Fatal(err)
	}
	defer munmapFlat(b)
	for i := 0; i < 8*spoolSegment; i += 4096 {
		b[i] = 1
	}
	seg, mapped := newSegment()
	if !mapped {
		t.Fatal("no mapping for a spool segment")
	}
	defer freeSegment(seg, mapped)
	seg[0] = 1
	for _, m := range []struct {
		name string
		b    []byte
	}{{"flat body", b}, {"spool segment", seg}} {
		flags, huge := smapsOf(t, m.b)
		if !slices.Contains(flags, "nh") {
			t.Errorf("%s: VmFlags %v, want nh (MADV_NOHUGEPAGE)", m.name, flags)
		}
		if huge != "0 kB" {
			t.Errorf("%s: AnonHugePages %s, want 0 kB", m.name, huge)
		}
	}
}

// smapsOf returns the VmFlags and AnonHugePages of the mapping holding b's first byte (the
// kernel may have merged it with a neighbour of the same flags).
func smapsOf(t *testing.T, b []byte) (flags []string, huge string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	at := uint64(uintptr(unsafe.Pointer(&b[0])))
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") {
			if in {
				break
			}
			var lo, hi uint64
			if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err == nil {
				in = lo <= at && at < hi
			}
			continue
		}
		if !in {
			continue
		}
		switch f[0] {
		case "AnonHugePages:":
			huge = strings.Join(f[1:], " ")
		case "VmFlags:":
			flags = f[1:]
		}
	}
	if flags == nil {
		t.Fatalf("no mapping holds %#x in /proc/self/smaps", at)
	}
	return flags, huge
}
