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

// TestAnchorPicker pins the rule: the first FileAnchors chunks with h % AnchorModulus == 0 and
// the first StrideAnchors chunks with h % StrideModulus == 0; Done once nothing more can be.
func TestAnchorPicker(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	chunks := synthFile(r, 400<<20)
	var p AnchorPicker
	first, stride := 0, 0
	doneAt := -1
	for i, c := range chunks {
		wantFirst := c.h.Mod(AnchorModulus) == 0 && first < FileAnchors
		wantStride := c.h.Mod(StrideModulus) == 0 && stride < StrideAnchors
		got := p.Next(c.h)
		if got != (wantFirst || wantStride) {
			t.Fatalf("chunk %d (mod %d): anchor %v, want first %v stride %v", i, c.h.Mod(StrideModulus), got, wantFirst, wantStride)
		}
		if wantFirst {
			first++
		}
		if wantStride {
			stride++
		}
		if p.Done() && doneAt < 0 {
			doneAt = i
		}
		if doneAt >= 0 && i > doneAt && got {
			t.Fatalf("chunk %d is an anchor after Done at chunk %d", i, doneAt)
		}
	}
	if first != FileAnchors || stride != StrideAnchors {
		t.Errorf("%d first and %d stride anchors in 400 MiB, want %d and %d", first, stride, FileAnchors, StrideAnchors)
	}
	if doneAt < 0 {
		t.Error("never Done over 400 MiB")
	}
	var q AnchorPicker
	if q.Done() {
		t.Error("a new picker is Done")
	}
}

// pickAnchors returns the anchors AnchorPicker names among chunks.
func pickAnchors(chunks []anchorChunk) map[hash.Hash]bool {
	var p AnchorPicker
	out := map[hash.Hash]bool{}
	for _, c := range chunks {
		if p.Next(c.h) {
			out[c.h] = true
		}
	}
	return out
}

// TestAnchorPickerSameAfterChange: two versions of a file that differ only in their first bytes
// — the same length (a retrained tensor) or not (a resized one) — pick the same stride anchors
// in the unchanged part, so a client uploading one finds the other's entries past the change.
// Only the last places of the 64 may differ, when the changed parts hold different numbers of
// stride anchors.
func TestAnchorPickerSameAfterChange(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	rest := synthFile(r, 40<<20)
	head := func(seed uint64, size int64) []anchorChunk { return synthFile(rand.New(rand.NewPCG(seed, 5)), size) }
	base := pickAnchors(append(head(10, 12<<20), rest...))
	for _, size := range []int64{12 << 20, 12<<20 + 1_000_003, 9<<20 + 77} {
		v := pickAnchors(append(head(11, size), rest...))
		shared := 0
		for _, c := range rest {
			if base[c.h] != v[c.h] {
				t.Fatalf("head of %d bytes: chunk %x of the unchanged part is an anchor in one version only", size, c.h[:4])
			}
			if base[c.h] {
				shared++
			}
		}
		if shared < 5 {
			t.Errorf("head of %d bytes: %d anchors in the unchanged 40 MiB, want about one per 4 MiB", size, shared)
		}
	}
}
