package main

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/xetcdn/xetcdn/perf/trace"
	"github.com/xetcdn/xetcdn/shared/xet/chunk"
)

// bruteNew is the lower bound computed the slow way, on bytes rather than hashes: the bytes of
// the distinct chunks of up that no chunk of the versions in on equals.
func bruteNew(t *testing.T, up trace.Content, on ...trace.Content) int64 {
	t.Helper()
	chunksOf := func(c trace.Content) [][]byte {
		b, err := io.ReadAll(c.Reader())
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		start := 0
		for _, end := range chunk.Boundaries(b) {
			out = append(out, b[start:end])
			start = end
		}
		return out
	}
	have := map[string]bool{}
	for _, c := range on {
		for _, ch := range chunksOf(c) {
			have[string(ch)] = true
		}
	}
	var n int64
	for _, ch := range chunksOf(up) {
		if !have[string(ch)] {
			have[string(ch)] = true // a chunk repeated in the file is sent once
			n += int64(len(ch))
		}
	}
	return n
}

// TestNewChunkBytes: the replayer's lower bound of each upload, against the bytes of its chunks
// compared one by one with those of the versions on the server. File f: versions 0, 1, 3 and 1
// again, with version 2 preloaded (the previous version of 3, never uploaded): it is on the
// server before version 0 is uploaded, so it counts for 0 and 1 too; version 1 again sends
// nothing new. File g: version 2 on a line before version 1 (the replayer uploads 2 once 1 is
// in, so 1 counts for 2) and version 0 preloaded for version 1. Where only older versions are on
// the server, the bound covers every changed block and little more.
func TestNewChunkBytes(t *testing.T) {
	f := trace.Record{Op: trace.Upload, Repo: "models/a/b", File: "m.safetensors", Size: 6<<20 + 4321, Change: 0.4, Client: "p"}
	// g's block 5 is new in version 1 and kept in version 2: version 1 counts for version 2.
	g := trace.Record{Op: trace.Upload, Repo: "models/a/b", File: "other.bin", Size: 6<<20 + 99, Change: 0.5, Client: "p"}
	v := func(r trace.Record, ver int, t float64) trace.Record { r.Version, r.T = ver, t; return r }
	recs := []trace.Record{v(f, 0, 0), v(f, 1, 1), v(f, 3, 2), v(f, 1, 3), v(g, 2, 4), v(g, 1, 5)}
	c := &config{preload: true, edges: map[string]string{}}
	r, err := newReplayer(c, recs, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got, chunked, err := newChunkBytes(context.Background(), recs, r.files)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4*f.Size + 3*g.Size; chunked != want { // f@0..3, g@0..2
		t.Errorf("chunked %d bytes, want %d", chunked, want)
	}
	ct := func(rec trace.Record, ver int) trace.Content { c := trace.ContentOf(rec); c.Version = ver; return c }
	want := []int64{
		bruteNew(t, ct(f, 0), ct(f, 2)),
		bruteNew(t, ct(f, 1), ct(f, 0), ct(f, 2)),
		bruteNew(t, ct(f, 3), ct(f, 0), ct(f, 1), ct(f, 2)),
		0,
		bruteNew(t, ct(g, 2), ct(g, 0), ct(g, 1)),
		bruteNew(t, ct(g, 1), ct(g, 0)),
	}
	if len(got) != len(want) {
		t.Fatalf("%d uploads have a bound, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("upload %d (%s): %d new-chunk bytes, want %d", i, trace.ContentOf(recs[i]), got[i], w)
		}
	}
	if without := bruteNew(t, ct(g, 2), ct(g, 0)); got[4] >= without {
		t.Errorf("g@2: %d new-chunk bytes, want fewer than the %d without g@1", got[4], without)
	}
	if got[0] >= f.Size || got[0] <= 0 {
		t.Errorf("version 0: %d new-chunk bytes, want fewer than its %d (version 2 shares blocks)", got[0], f.Size)
	}
	for _, i := range []int{2, 4, 5} {
		_, changed := trace.ContentOf(recs[i]).ChangedBlocks()
		if got[i] < changed || got[i] > changed+changed/2+256<<10 {
			t.Errorf("upload %d: %d new-chunk bytes for %d changed", i, got[i], changed)
		}
	}
}

// newChunksOf returns the new-chunk bound of every upload of recs, replayed with preloads.
func newChunksOf(t *testing.T, recs []trace.Record) map[int]int64 {
	t.Helper()
	r, err := newReplayer(&config{preload: true, edges: map[string]string{}}, recs, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := newChunkBytes(context.Background(), recs, r.files)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestNewChunkBytesSpan: with a change span, the changed bytes come in whole spans and the
// bound is those spans plus at most the two chunks straddling each run's edges.
func TestNewChunkBytesSpan(t *testing.T) {
	const span = 4 << 20
	h := trace.Record{Op: trace.Upload, Repo: "models/a/b", File: "w.safetensors", Size: 3*span + 12345, Change: 0.5, ChangeSpan: span, Client: "p"}
	v := func(r trace.Record, ver int, t float64) trace.Record { r.Version, r.T = ver, t; return r }
	recs := []trace.Record{v(h, 0, 0), v(h, 1, 1), v(h, 2, 2), v(h, 3, 3)}
	got := newChunksOf(t, recs)
	var some bool
	for i := 1; i < len(recs); i++ {
		_, changed := trace.ContentOf(recs[i]).ChangedBlocks()
		if changed%span != 0 && changed%span != h.Size%span {
			t.Errorf("version %d: %d changed bytes, not whole spans", i, changed)
		}
		some = some || (changed > 0 && changed < h.Size)
		// A run of changed spans costs its bytes and at most one chunk (< 128 KiB) on each side.
		if got[i] < changed || got[i] > changed+2*128<<10 {
			t.Errorf("version %d: %d new-chunk bytes for %d changed", i, got[i], changed)
		}
	}
	if !some {
		t.Error("no version changes part of the file")
	}
}

// TestNewChunkBytesHead: versions whose heads differ in length hold their unchanged blocks at
// other offsets; content-defined chunks find them again after the head, so the bound is the
// head, the changed spans and at most the chunks straddling their edges, not the whole file.
func TestNewChunkBytesHead(t *testing.T) {
	const span = 4 << 20
	h := trace.Record{Op: trace.Upload, Repo: "models/a/b", File: "w.safetensors", Change: 0.5, ChangeSpan: span, Client: "p"}
	v := func(ver int, head int64) trace.Record {
		r := h
		r.Version, r.T, r.Head, r.Size = ver, float64(ver), head, 3*span+12345+head
		return r
	}
	recs := []trace.Record{v(0, 100), v(1, 70_001), v(2, 3), v(3, 1_000_003)}
	got := newChunksOf(t, recs)
	for i := 1; i < len(recs); i++ {
		_, changed := trace.ContentOf(recs[i]).ChangedBlocks()
		// The head and up to two runs of changed spans: at most five edges' chunks (< 128 KiB).
		if got[i] < changed || got[i] > changed+5*128<<10 {
			t.Errorf("version %d (head %d): %d new-chunk bytes for %d changed of %d", i, recs[i].Head, got[i], changed, recs[i].Size)
		}
	}
}

// TestPrintNewChunks: the summary names the bound and both ratios.
func TestPrintNewChunks(t *testing.T) {
	res := &results{Ops: map[trace.Op]*OpResult{trace.Upload: {Requests: 2, Bytes: 1000, TransferBytes: 220, ChangedBytes: 200, NewChunkBytes: 210}}}
	var b bytes.Buffer
	res.print(&b)
	for _, want := range []string{"sent/changed 1.100", "new-chunk bytes 210 (lower bound): sent/new-chunks 1.048, new-chunks/changed 1.050"} {
		if !bytes.Contains(b.Bytes(), []byte(want)) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}
