package linkemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on a thread inside the named namespace; sockets fn creates stay there.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

// TestTUNBetweenNamespaces runs the emulator on real TUN devices in two network namespaces (root
// only: the simulated-region runs need root too) and checks what a TCP connection sees: the
// handshake takes the configured RTT and a transfer is held to the configured rate.
func TestTUNBetweenNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN devices); perf/regions.sh runs as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	a, b := fmt.Sprintf("lkt%d-a", os.Getpid()), fmt.Sprintf("lkt%d-b", os.Getpid())
	for _, ns := range []string{a, b} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			// A root shell inside a container may be denied namespaces; that machine cannot
			// run perf/regions.sh either, so this says so rather than failing the suite.
			t.Skipf("network namespaces unavailable here (ip netns add %s: %v: %s)", ns, err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	c, err := ParseConfig([]byte(fmt.Sprintf(`{"nodes": [
	  {"name": "a", "netns": %q, "addr": "10.79.0.1", "region": "x"},
	  {"name": "b", "netns": %q, "addr": "10.79.0.2", "region": "y"}],
	 "paths": [{"regions": ["x", "y"], "rtt": "60ms", "rate_mbit": 40, "queue": "200ms"}]}`, a, b)))
	if err != nil {
		t.Fatal(err)
	}
	var ports []Port
	for _, n := range c.Nodes {
		f, err := OpenTUN(n.Netns, "emu0", n.Address().String(), c.Prefix, c.MTU)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, f)
	}
	r, err := NewRouter(c, ports)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	var ln net.Listener
	inNetns(t, b, func() { ln, err = net.Listen("tcp", "10.79.0.2:0") })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 1 << 20
	data := make([]byte, size)
	rand.Read(data)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Write(data)
	}()
	var conn net.Conn
	var dial time.Duration
	inNetns(t, a, func() {
		start := time.Now()
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		dial = time.Since(start)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The handshake is one round trip: 60 ms, plus scheduling on a busy machine.
	if dial < 60*time.Millisecond || dial > 2*time.Second {
		t.Fatalf("TCP handshake took %v over a 60ms RTT path", dial)
	}
	start := time.Now()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(conn)
	el := time.Since(start)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, err %v; want the %d bytes sent", len(got), err, size)
	}
	// 1 MiB at 40 Mbit/s is 210 ms on the wire alone (plus slow start over 60 ms rounds).
	if el < 210*time.Millisecond {
		t.Fatalf("1 MiB in %v: faster than the 40 Mbit/s path allows", el)
	}
	if s := r.Stats().Paths["b>a"]; s.Bytes < size {
		t.Fatalf("b>a carried %d bytes, want ≥ %d", s.Bytes, size)
	}
	t.Logf("handshake %v, 1 MiB in %v", dial, el)
}
