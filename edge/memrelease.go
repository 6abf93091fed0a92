package edge

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Returning memory after a burst (docs/edge.md "Memory"). The collector's growth target
// (limits.gc_percent, 400 by default) lets the heap grow to five times what is live before it
// collects, and a heap that stops growing is never collected again: after a burst of cold
// downloads the edge kept that garbage, ~290 MB against ~60 MB live, for as long as it stayed
// quiet. The idle releaser watches the runtime's allocation counter; at the first tick of
// limits.idle_release in which the edge allocated less than idleAllocBytes after one in which it
// allocated more, it collects and returns the free heap to the system (debug.FreeOSMemory), once
// per quiet period. A busy edge allocates at every tick and is never interrupted.

// idleAllocBytes is what a tick may allocate and still count as quiet: background work (event
// long-polls, registry reports, JWKS refreshes, metrics scrapes) allocates far less.
const idleAllocBytes = 4 << 20

// idleReleaser is the decision, apart from the clock and the runtime (tested on its own).
type idleReleaser struct {
	allocs   func() uint64 // cumulative bytes allocated since the process started
	release  func()
	last     uint64
	released bool // nothing was allocated to speak of since the last release
}

// tick reads the allocation counter and releases when the edge has just gone quiet; it
// reports whether it released.
func (r *idleReleaser) tick() bool {
	a := r.allocs()
	d := a - r.last
	r.last = a
	if d >= idleAllocBytes {
		r.released = false
		return false
	}
	if r.released {
		return false
	}
	r.released = true
	r.release()
	return true
}

// heapAllocs reads the runtime's cumulative heap allocation counter (no stop-the-world).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// runIdleRelease ticks an idleReleaser every `every` until ctx ends; releases are counted in
// xet_edge_memory_idle_releases_total.
func runIdleRelease(ctx context.Context, every time.Duration, reg prometheus.Registerer) {
	n := prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_memory_idle_releases_total",
		Help: "Times the edge, gone quiet after allocating, collected and returned its free heap to the system (limits.idle_release)."})
	if reg != nil {
		reg.MustRegister(n)
	}
	r := &idleReleaser{allocs: heapAllocs, release: debug.FreeOSMemory}
	r.last = r.allocs()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.tick() {
				n.Inc()
			}
		}
	}
}
