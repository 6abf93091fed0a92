package edge

import "testing"

// TestIdleReleaser: the releaser returns memory once when a busy edge goes quiet, never while it
// keeps allocating, and not again until it has been busy since.
func TestIdleReleaser(t *testing.T) {
	var allocated uint64
	releases := 0
	r := &idleReleaser{allocs: func() uint64 { return allocated }, release: func() { releases++ }}
	step := func(alloc uint64, want bool) {
		t.Helper()
		allocated += alloc
		if got := r.tick(); got != want {
			t.Fatalf("after allocating %d bytes: released %v, want %v", alloc, got, want)
		}
	}
	step(100<<20, false)          // a burst
	step(64<<20, false)           // still busy
	step(1<<20, true)             // quiet: release
	step(0, false)                // still quiet: once is enough
	step(idleAllocBytes-1, false) // background noise is not activity
	step(idleAllocBytes, false)   // busy again
	step(0, true)                 // quiet again: release again
	if releases != 2 {
		t.Fatalf("%d releases, want 2", releases)
	}
}
