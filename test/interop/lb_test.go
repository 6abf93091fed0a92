package interop

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tcpBalancer is the load balancer of the replica tests: a round-robin TCP proxy (what HAProxy
// does in `mode tcp` with `balance roundrobin`, `option redispatch` and `retries`): each new
// client connection goes to the next backend marked up; a backend that refuses the connection
// is marked down and the connection is redispatched to the next one; every backend is checked
// every checkEvery, marked down after two failed checks in a row and up again when it accepts. Connections open to a backend
// that dies are cut (the clients see a reset or EOF, as behind a real balancer).
type tcpBalancer struct {
	ln       net.Listener
	backends []string
	up       []atomic.Bool
	next     atomic.Uint64

	redispatched atomic.Int64 // connections that went elsewhere than their round-robin pick
	refused      atomic.Int64 // connections no backend accepted

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// busy[i] holds, per connection to backend i, when it last carried bytes (Unix ns).
	busy []map[*atomic.Int64]struct{}
}

// active counts the connections to backend i that carried bytes within the last d.
func (b *tcpBalancer) active(i int, d time.Duration) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, since := 0, time.Now().Add(-d).UnixNano()
	for last := range b.busy[i] {
		if last.Load() >= since {
			n++
		}
	}
	return n
}

// copyNoting copies src to dst like io.Copy, noting the time of each read in last.
func copyNoting(dst io.Writer, src io.Reader, last *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

const checkEvery = 200 * time.Millisecond

func newTCPBalancer(t *testing.T, backends ...string) *tcpBalancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &tcpBalancer{ln: ln, backends: backends, up: make([]atomic.Bool, len(backends)), conns: map[net.Conn]struct{}{},
		busy: make([]map[*atomic.Int64]struct{}, len(backends))}
	for i := range b.busy {
		b.busy[i] = map[*atomic.Int64]struct{}{}
	}
	for i := range b.up {
		b.up[i].Store(true)
	}
	done := make(chan struct{})
	go b.serve()
	go b.check(done)
	t.Cleanup(func() {
		close(done)
		ln.Close()
		b.mu.Lock()
		for c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	return b
}

func (b *tcpBalancer) URL() string { return "http://" + b.ln.Addr().String() }

// check marks down backends up again once they accept (and up ones down once they refuse).
func (b *tcpBalancer) check(done <-chan struct{}) {
	tick := time.NewTicker(checkEvery)
	defer tick.Stop()
	fails := make([]int, len(b.backends))
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		for i, addr := range b.backends {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				fails[i] = 0
			} else {
				fails[i]++
			}
			b.up[i].Store(fails[i] < 2) // down after two failed checks in a row, as HAProxy's fall 2
		}
	}
}

func (b *tcpBalancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		go b.forward(c)
	}
}

func (b *tcpBalancer) track(c net.Conn, add bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if add {
		b.conns[c] = struct{}{}
	} else {
		delete(b.conns, c)
	}
}

func (b *tcpBalancer) forward(c net.Conn) {
	b.track(c, true)
	defer b.track(c, false)
	defer c.Close()
	n := len(b.backends)
	start := int(b.next.Add(1) % uint64(n))
	var up net.Conn
	chosen := -1
	// The backends marked up in turn; when none accepts, every backend once more (a check may
	// lag behind a backend that came back).
	for k := range 2 * n {
		i := (start + k) % n
		if k < n && !b.up[i].Load() {
			continue
		}
		conn, err := net.DialTimeout("tcp", b.backends[i], 2*time.Second)
		if err == nil {
			up, chosen = conn, i
			break
		}
		b.up[i].Store(false)
	}
	if up != nil && chosen != start {
		b.redispatched.Add(1)
	}
	if up == nil {
		b.refused.Add(1)
		return
	}
	b.track(up, true)
	defer b.track(up, false)
	defer up.Close()
	// Client to backend: a half close is passed on (the answer may still come). Backend to
	// client: when the backend closes (or dies), the client connection is closed whole, as a
	// balancer does: no further answer can come on it.
	last := new(atomic.Int64)
	b.mu.Lock()
	b.busy[chosen][last] = struct{}{}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.busy[chosen], last)
		b.mu.Unlock()
	}()
	go func() {
		copyNoting(up, c, last)
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	copyNoting(c, up, last)
}
