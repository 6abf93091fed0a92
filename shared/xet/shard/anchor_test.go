package shard

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// anchorChunk is a chunk of a synthetic file: a random hash and a length.
type anchorChunk struct {
	h hash.Hash
	n int
}

// synthFile returns random chunks of 8-128 KiB (~64 KiB on average) adding up to size bytes.
func synthFile(r *rand.Rand, size int64) []anchorChunk {
	var out []anchorChunk
	for off := int64(0); off < size; {
		var h hash.Hash
		for i := 0; i < 4; i++ {
			binary.LittleEndian.PutUint64(h[8*i:], r.Uint64())
		}
		n := int(min(int64(8<<10+r.IntN(120<<10)), size-off))
		out = append(out, anchorChunk{h, n})
		off += int64(n)
	}
	return out
}

// TestAnchorPicker pins the rule: the first FileAnchors chunks with h % AnchorModulus == 0,
// then, in each window 1..StrideAnchors of AnchorStride bytes, the first such chunk starting in
// it; nothing after window StrideAnchors but the first anchors; Done once nothing more can be.
func TestAnchorPicker(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	chunks := synthFile(r, 300<<20)
	var p AnchorPicker
	first := 0
	windows := map[int64]bool{}
	doneAt := -1
	var off int64
	for i, c := range chunks {
		isMod := c.h.Mod(AnchorModulus) == 0
		w := off / AnchorStride
		wantFirst := isMod && first < FileAnchors
		wantStride := isMod && w >= 1 && w <= StrideAnchors && !windows[w]
		got := p.Next(c.h, c.n)
		if got != (wantFirst || wantStride) {
			t.Fatalf("chunk %d at %d (window %d, mod %v): anchor %v, want first %v stride %v", i, off, w, isMod, got, wantFirst, wantStride)
		}
		if wantFirst {
			first++
		}
		if wantStride {
			windows[w] = true
		}
		if p.Done() && doneAt < 0 {
			doneAt = i
		}
		if doneAt >= 0 && i > doneAt && got {
			t.Fatalf("chunk %d is an anchor after Done at chunk %d", i, doneAt)
		}
		off += int64(c.n)
	}
	if len(windows) != StrideAnchors {
		t.Errorf("%d stride anchors in 300 MiB, want %d (every window has chunks of both kinds here)", len(windows), StrideAnchors)
	}
	if doneAt < 0 {
		t.Error("never Done over 300 MiB")
	}
	var q AnchorPicker
	if q.Done() {
		t.Error("a new picker is Done")
	}
}

// TestAnchorPickerSameAfterChange: two versions of a file that differ only in their first
// 12 MiB (same length) pick the same stride anchors wherever their chunks are the same, so a
// client uploading one finds the other's entries past the change.
func TestAnchorPickerSameAfterChange(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	rest := synthFile(r, 40<<20)
	// Version a's and b's first 12 MiB are different chunks of the same total length.
	head := func(seed uint64) []anchorChunk { return synthFile(rand.New(rand.NewPCG(seed, 5)), 12<<20) }
	pick := func(chunks []anchorChunk) map[hash.Hash]bool {
		var p AnchorPicker
		out := map[hash.Hash]bool{}
		for _, c := range chunks {
			if p.Next(c.h, c.n) {
				out[c.h] = true
			}
		}
		return out
	}
	a := pick(append(head(10), rest...))
	b := pick(append(head(11), rest...))
	shared := 0
	for _, c := range rest {
		if a[c.h] != b[c.h] {
			t.Fatalf("chunk %x of the unchanged part is an anchor in one version only", c.h[:4])
		}
		if a[c.h] {
			shared++
		}
	}
	if shared < 5 {
		t.Errorf("%d anchors in the unchanged 40 MiB, want one per 4 MiB window", shared)
	}
}
