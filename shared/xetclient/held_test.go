package xetclient

import (
	"math/rand/v2"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/chunk"
)

// TestNextHeldOff follows addFile's holding rule (pack the oldest until the held bytes and the
// new chunk fit maxHeld; sometimes pack more, as a release does) with random chunk sizes up to
// chunk.MaxSize: in a ring of ringSize the new chunk always fits, inside the ring and clear of
// every held chunk. In a ring of only maxHeld the same sequence must run out of room at times
// (the check has teeth), and so must one of maxHeld plus half the largest chunk; what
// nextHeldOff places in them must still be clear.
func TestNextHeldOff(t *testing.T) {
	for _, tc := range []struct {
		size      int
		alwaysFit bool
	}{{ringSize, true}, {ringSize - chunk.MaxSize/2, false}, {maxHeld, false}} {
		rng := rand.New(rand.NewPCG(1, uint64(tc.size)))
		var held []heldChunk
		heldBytes, misses := 0, 0
		lens := make([]byte, chunk.MaxSize) // held chunks' data: only their lengths matter
		for i := 0; i < 200_000; i++ {
			n := 1 + rng.IntN(chunk.MaxSize)
			if rng.IntN(4) == 0 {
				n = chunk.MaxSize - rng.IntN(64) // the largest chunks, where wrapping is tight
			}
			if rng.IntN(5000) == 0 { // a release: everything packed
				held, heldBytes = held[:0], 0
			}
			for heldBytes+n > maxHeld {
				heldBytes -= len(held[0].data)
				held = held[1:]
			}
			off, fits := nextHeldOff(held, n, tc.size)
			for !fits {
				misses++
				heldBytes -= len(held[0].data)
				held = held[1:]
				off, fits = nextHeldOff(held, n, tc.size)
			}
			if off < 0 || off+n > tc.size {
				t.Fatalf("size %d, step %d: chunk of %d placed at %d", tc.size, i, n, off)
			}
			for _, h := range held {
				if off < h.off+len(h.data) && h.off < off+n {
					t.Fatalf("size %d, step %d: [%d,%d) overlaps held [%d,%d)", tc.size, i, off, off+n, h.off, h.off+len(h.data))
				}
			}
			held = append(held, heldChunk{data: lens[:n], off: off})
			heldBytes += n
		}
		if tc.alwaysFit && misses > 0 {
			t.Errorf("ring of %d: %d chunks did not fit under the byte limit", tc.size, misses)
		}
		if !tc.alwaysFit && misses == 0 {
			t.Errorf("ring of %d: every chunk fit; the test cannot tell a short ring", tc.size)
		}
	}
}
