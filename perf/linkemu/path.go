package linkemu

import (
	"math/rand/v2"
	"time"
)

// Verdict is what a path does with one packet.
type Verdict int

const (
	Forward   Verdict = iota
	DropQueue         // the bottleneck's queue was full (drop-tail)
	DropLoss          // lost on the wire (random)
)

// Path is the state of one direction between two nodes. It is not safe for concurrent use; the
// router serialises calls per path.
//
// A packet first waits for the bottleneck: it leaves at max(now, when the previous one left) +
// size/rate, and is dropped when that wait would exceed the queue limit. Then it is lost with
// probability Loss (a lost packet still used the bottleneck, as on a real wire). Then it
// arrives Delay ± a uniform Jitter later, but never before the packet sent ahead of it: the
// path does not reorder (netem with jitter does; real paths rarely do, and reordering would
// make TCP's loss detection the thing being measured).
type Path struct {
	link  Link
	rng   *rand.Rand
	free  time.Time // when the bottleneck is free again
	last  time.Time // latest arrival handed out
	Stats PathStats
}

// PathStats counts what a path did.
type PathStats struct {
	Packets    uint64 `json:"packets"`
	Bytes      uint64 `json:"bytes"`
	Lost       uint64 `json:"lost"`
	QueueDrops uint64 `json:"queue_drops"`
}

// NewPath returns a path with the link's behaviour; seed fixes its loss and jitter draws.
func NewPath(l Link, seed uint64) *Path {
	return &Path{link: l, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Schedule decides the fate of a packet of size bytes offered at now and, for Forward, the
// time it is to be delivered.
func (p *Path) Schedule(now time.Time, size int) (time.Time, Verdict) {
	leave := now
	if p.link.RateBps > 0 {
		start := now
		if p.free.After(start) {
			start = p.free
		}
		if start.Sub(now) > p.link.Queue {
			p.Stats.QueueDrops++
			return time.Time{}, DropQueue
		}
		leave = start.Add(time.Duration(float64(size) * 8 / p.link.RateBps * float64(time.Second)))
		p.free = leave
	}
	if p.link.Loss > 0 && p.rng.Float64() < p.link.Loss {
		p.Stats.Lost++
		return time.Time{}, DropLoss
	}
	d := p.link.Delay
	if j := p.link.Jitter; j > 0 {
		d += time.Duration(p.rng.Int64N(int64(2*j)+1)) - j
		d = max(d, 0)
	}
	at := leave.Add(d)
	if at.Before(p.last) {
		at = p.last
	}
	p.last = at
	p.Stats.Packets++
	p.Stats.Bytes += uint64(size)
	return at, Forward
}
