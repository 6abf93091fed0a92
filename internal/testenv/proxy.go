package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback that a test puts between the component under test and a
// real service (PostgreSQL, MinIO) to take the service away and give it back: Cut is an outage
// as the component sees it when the service dies (open connections are reset, new ones are
// refused), Stall one where it hangs or the network drops packets (connections open, but no
// byte ever comes back), and Restore ends either on the same address, so the component
// reconnects without being reconfigured.
//
// A Proxy is safe for concurrent use. It is closed when the test ends.
type Proxy struct {
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener // nil while cut
	stalled bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup // accept loop and connection pumps
}

// NewProxy listens on a free loopback port and forwards every connection to target (host:port).
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy to %s: %v", target, err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's host:port; it does not change across Cut and Restore.
func (p *Proxy) Addr() string { return p.addr }

// Cut stops forwarding: the listener is closed (new connections are refused) and every live
// connection is reset on both sides. It returns once no byte can pass any more. Cutting a cut
// proxy does nothing.
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	p.stalled = false
	p.resetLocked()
	p.mu.Unlock()
	p.wg.Wait()
}

// resetLocked resets every live connection.
func (p *Proxy) resetLocked() {
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, as from a dead peer, rather than an orderly FIN
		}
		c.Close()
	}
}

// Stall stops forwarding but closes nothing: bytes sent either way are dropped, and new
// connections are accepted (the dial succeeds) but never reach the service. Only the
// component's own timeouts end its waits.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// Restore ends a Cut or a Stall. After a Cut it listens again on the same address; after a
// Stall it resets the connections that were open during the stall (their bytes were lost).
// New connections are forwarded again. Restoring a working proxy does nothing.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		p.resetLocked()
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serveLocked(ln)
	return nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Cut
			}
			p.forward(c)
		}
	}()
}

// forward dials the target for the accepted connection c and pumps both ways; a failed dial
// closes c (the service itself is down). During a stall c is only held.
func (p *Proxy) forward(c net.Conn) {
	p.mu.Lock()
	if p.stalled {
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() { // drop what c sends until the stall ends by closing it
			defer p.wg.Done()
			io.Copy(io.Discard, c)
			c.Close()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
		return
	}
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut while dialling
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			c.Close()
			up.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, up)
			p.mu.Unlock()
		})
	}
	// The services behind the proxy (PostgreSQL, S3 over HTTP) do not half-close: when one
	// direction ends, the connection is over.
	pump := func(dst, src net.Conn) {
		defer p.wg.Done()
		defer closeBoth()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			p.mu.Lock()
			stalled := p.stalled
			p.mu.Unlock()
			if n > 0 && !stalled {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pump(up, c)
	go pump(c, up)
}
