package testenv

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves line echo on loopback until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// dialEcho connects through p to an echo service and checks that a line comes back; the
// connection is closed when the test ends.
func dialEcho(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if got, err := roundTrip(c, "one"); err != nil || got != "one\n" {
		t.Fatalf("through a working proxy: %q, %v", got, err)
	}
	return c
}

func roundTrip(c net.Conn, msg string) (string, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

func TestProxyCutAndRestore(t *testing.T) {
	p := NewProxy(t, echo(t))
	c := dialEcho(t, p)

	p.Cut()
	if got, err := roundTrip(c, "two"); err == nil {
		t.Fatalf("a connection open across the cut still answers %q", got)
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		c2.Close()
		t.Fatal("a cut proxy accepts connections")
	}
	p.Cut() // idempotent

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("after restore: %v", err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "three"); err != nil || got != "three\n" {
		t.Fatalf("after restore: %q, %v", got, err)
	}
}

func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := NewProxy(t, dead)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "x"); err == nil {
		t.Fatalf("a proxy to a dead service answered %q", got)
	}
}

func TestProxyStall(t *testing.T) {
	p := NewProxy(t, echo(t))
	c := dialEcho(t, p)

	p.Stall()
	stalled := func(c net.Conn) {
		t.Helper()
		c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		io.WriteString(c, "lost\n")
		var b [1]byte
		if n, err := c.Read(b[:]); n > 0 || !isTimeout(err) {
			t.Fatalf("during the stall: read %d bytes, %v; want a timeout", n, err)
		}
	}
	stalled(c)
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a stalled proxy refuses connections: %v", err)
	}
	defer c2.Close()
	stalled(c2)

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection held during the stall survives the restore")
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "three"); err != nil || got != "three\n" {
		t.Fatalf("after restore: %q, %v", got, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
