package linkemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Port is one node's side of the emulator: each Read returns one IP packet the node sent, each
// Write delivers one packet to it (a TUN device opened with IFF_NO_PI behaves so).
type Port = io.ReadWriteCloser

// queueCap bounds the packets in flight on one path whatever its rate (an unlimited path
// still has a delay line); beyond it packets are dropped as queue drops.
const queueCap = 1 << 16

// Router forwards packets between ports along the configured paths.
type Router struct {
	nodes  []Node
	ports  []Port
	byAddr map[netip.Addr]int
	paths  [][]*line // [from][to]
	mtu    int
	now    func() time.Time

	unknown atomic.Uint64 // packets to an address no node has
	notIP   atomic.Uint64
}

type line struct {
	mu   sync.Mutex
	path *Path
	q    chan packet
	full uint64 // queue drops because q was full (under mu)
}

type packet struct {
	at  time.Time
	buf *[]byte
	n   int
}

// NewRouter joins ports[i] to c.Nodes[i].
func NewRouter(c *Config, ports []Port) (*Router, error) {
	if len(ports) != len(c.Nodes) {
		return nil, fmt.Errorf("linkemu: %d ports for %d nodes", len(ports), len(c.Nodes))
	}
	r := &Router{nodes: c.Nodes, ports: ports, byAddr: map[netip.Addr]int{}, mtu: c.MTU, now: time.Now}
	r.paths = make([][]*line, len(c.Nodes))
	for i, a := range c.Nodes {
		r.byAddr[a.addr] = i
		r.paths[i] = make([]*line, len(c.Nodes))
		for j, b := range c.Nodes {
			if i == j {
				continue
			}
			l, ok := c.LinkBetween(a.Name, b.Name)
			if !ok {
				return nil, fmt.Errorf("linkemu: no path from %s to %s", a.Name, b.Name)
			}
			// Each direction draws its own numbers, reproducibly from the seed.
			r.paths[i][j] = &line{path: NewPath(l, c.Seed+uint64(i*len(c.Nodes)+j)), q: make(chan packet, queueCap)}
		}
	}
	return r, nil
}

// Run forwards until ctx ends or a port fails, then closes every port and returns the first
// port error (nil when ctx ended first).
func (r *Router) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pool := sync.Pool{New: func() any { b := make([]byte, r.mtu); return &b }}
	var wg sync.WaitGroup
	errc := make(chan error, len(r.ports))
	for i := range r.ports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.read(i, &pool); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("linkemu: read from %s: %w", r.nodes[i].Name, err)
				cancel()
			}
		}()
		for j, l := range r.paths[i] {
			if l == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.deliver(ctx, l, r.ports[j], &pool)
			}()
		}
	}
	<-ctx.Done()
	for _, p := range r.ports {
		p.Close()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

func (r *Router) read(from int, pool *sync.Pool) error {
	for {
		buf := pool.Get().(*[]byte)
		n, err := r.ports[from].Read(*buf)
		if err != nil {
			pool.Put(buf)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
				return nil
			}
			return err
		}
		if !r.forward(from, buf, n) {
			pool.Put(buf)
		}
	}
}

// forward schedules one packet from node from; false when it was dropped.
func (r *Router) forward(from int, buf *[]byte, n int) bool {
	dst, err := Destination((*buf)[:n])
	if err != nil {
		r.notIP.Add(1)
		return false
	}
	to, ok := r.byAddr[dst]
	if !ok || to == from {
		r.unknown.Add(1)
		return false
	}
	l := r.paths[from][to]
	l.mu.Lock()
	defer l.mu.Unlock()
	at, v := l.path.Schedule(r.now(), n)
	if v != Forward {
		return false
	}
	select {
	case l.q <- packet{at: at, buf: buf, n: n}:
		return true
	default:
		l.full++
		return false
	}
}

// deliver writes a path's packets to their destination at their times. Times along one path
// never decrease (Path.Schedule), so a FIFO is enough.
func (r *Router) deliver(ctx context.Context, l *line, to Port, pool *sync.Pool) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var p packet
		select {
		case p = <-l.q:
		case <-ctx.Done():
			return
		}
		if d := time.Until(p.at); d > 50*time.Microsecond {
			t.Reset(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		// A failed write (the namespace's stack refused it) is a lost packet, as on a wire.
		_, _ = to.Write((*p.buf)[:p.n])
		pool.Put(p.buf)
	}
}

// Stats is what the router did, per directed path ("from>to").
type Stats struct {
	Paths   map[string]PathStats `json:"paths"`
	Unknown uint64               `json:"unknown_destination"`
	NotIP   uint64               `json:"not_ip"`
}

// Stats returns the counters so far.
func (r *Router) Stats() Stats {
	s := Stats{Paths: map[string]PathStats{}, Unknown: r.unknown.Load(), NotIP: r.notIP.Load()}
	for i, row := range r.paths {
		for j, l := range row {
			if l == nil {
				continue
			}
			l.mu.Lock()
			ps := l.path.Stats
			ps.QueueDrops += l.full
			l.mu.Unlock()
			if ps.Packets+ps.Lost+ps.QueueDrops > 0 {
				s.Paths[r.nodes[i].Name+">"+r.nodes[j].Name] = ps
			}
		}
	}
	return s
}
