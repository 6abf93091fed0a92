package datacache

import (
	"context"
	"sync"
)

// gate orders the fills' CPU work — verifying received chunks and writing them to the temp file —
// by need: at most n fills do it at once (Open: GOMAXPROCS-1, at least 1, so that one
// processor stays free to serve clients), and when one finishes a batch the next batch goes to
// the fill a reader is waiting for, else to one of bytes a client reads next, else to the oldest
// (flights are numbered as they start; a read or a read-ahead starts its segments in file
// order). Without it a busy edge spread its processor evenly over every running fill — read-
// ahead's and a client's ranged requests', dozens at once — so the bytes a client was waiting
// for advanced at a fraction of the fill rate while the edge verified bytes it would read
// seconds later (perf/BENCHMARKS.md, 2026-12-04, "read-ahead while idle").
//
// Only the CPU work is gated: a fill reads its origin answer (into its own receive buffer) and
// waits for the network outside the gate, so every origin connection stays busy and a slow
// origin never holds the gate.
type gate struct {
	mu      sync.Mutex
	free    int
	waiters []*gateWaiter
}

type gateWaiter struct {
	fl *flight
	ch chan struct{} // closed when the gate is handed to this waiter
}

func newGate(n int) *gate { return &gate{free: max(n, 1)} }

// acquire waits for the gate on behalf of fl, or for ctx to end.
func (g *gate) acquire(ctx context.Context, fl *flight) error {
	g.mu.Lock()
	if g.free > 0 {
		g.free--
		g.mu.Unlock()
		return nil
	}
	w := &gateWaiter{fl: fl, ch: make(chan struct{})}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		for i, x := range g.waiters {
			if x == w {
				g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
				g.mu.Unlock()
				return context.Cause(ctx)
			}
		}
		g.mu.Unlock()
		// Handed over meanwhile: pass it on.
		g.release()
		return context.Cause(ctx)
	}
}

// release hands the gate to the most needed waiter, or frees it.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) == 0 {
		g.free++
		return
	}
	best := 0
	for i := 1; i < len(g.waiters); i++ {
		if g.waiters[i].fl.before(g.waiters[best].fl) {
			best = i
		}
	}
	w := g.waiters[best]
	g.waiters = append(g.waiters[:best], g.waiters[best+1:]...)
	close(w.ch)
}

// before reports whether fl's next batch is more needed than o's: a fill a reader waits for
// first, then one of bytes a client reads next (flight.demanded: not only idle read-ahead),
// then the older fill.
func (fl *flight) before(o *flight) bool {
	if a, b := fl.waiting.Load() > 0, o.waiting.Load() > 0; a != b {
		return a
	}
	if a, b := fl.demanded.Load(), o.demanded.Load(); a != b {
		return a
	}
	return fl.seq < o.seq
}
