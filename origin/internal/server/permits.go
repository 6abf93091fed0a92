package server

import "sync"

// permits is a counting semaphore that hands out a share of what is free without waiting: a big
// reconstruction answer takes extra writer goroutines only when the origin has spare capacity,
// and never more than half of it, so one request cannot starve the others.
type permits struct {
	mu   sync.Mutex
	free int
}

func newPermits(n int) *permits { return &permits{free: n} }

// takeHalf takes min(max, free/2) permits and returns how many it took (possibly 0).
func (p *permits) takeHalf(max int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(max, p.free/2)
	if n < 0 {
		n = 0
	}
	p.free -= n
	return n
}

// release returns n permits taken by takeHalf.
func (p *permits) release(n int) {
	p.mu.Lock()
	p.free += n
	p.mu.Unlock()
}
