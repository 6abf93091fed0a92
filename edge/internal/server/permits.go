package server

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// permits bound the reconstructions answered locally. A request takes one without waiting
// (tryAcquire); a big answer may add writer goroutines by taking up to half of what is free
// (takeHalf), so one request cannot starve the others.
type permits struct {
	mu    sync.Mutex
	free  int
	inUse prometheus.Gauge
}

func newPermits(n int, inUse prometheus.Gauge) *permits { return &permits{free: n, inUse: inUse} }

// tryAcquire takes one permit if one is free.
func (p *permits) tryAcquire() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free < 1 {
		return false
	}
	p.free--
	p.inUse.Inc()
	return true
}

// takeHalf takes min(limit, free/2) permits and returns how many it took (possibly 0).
func (p *permits) takeHalf(limit int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := max(0, min(limit, p.free/2))
	p.free -= n
	p.inUse.Add(float64(n))
	return n
}

// freeBelow reports whether fewer than n permits are free.
func (p *permits) freeBelow(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.free < n
}

// release returns n permits.
func (p *permits) release(n int) {
	p.mu.Lock()
	p.free += n
	p.inUse.Sub(float64(n))
	p.mu.Unlock()
}
