package httpapi

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestStalledConnectionIsReset: a connection whose write hit its deadline is reset when
// closed, so the kernel drops the answer it still had queued (a plain close keeps it, and its
// memory, for as long as the peer stays connected); accepted TCP connections have their unsent
// queue bounded.
func TestStalledConnectionIsReset(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := NewConnLimiter(4, 0).Listener(raw)
	defer ln.Close()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	client, err := d.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := server.(*limitConn).Conn.(*net.TCPConn).SyscallConn()
	var v int
	rc.Control(func(fd uintptr) { v, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotsentLowat) })
	if v != maxUnsent {
		t.Errorf("TCP_NOTSENT_LOWAT = %d, want %d", v, maxUnsent)
	}
	server.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 1<<20)
	for {
		if _, err := server.Write(buf); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write to a non-reader: %v, want a deadline error", err)
			}
			break
		}
	}
	server.Close()
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, client)
	if err == nil || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the non-reader saw %v after the server closed, want a reset", err)
	}
}
