package httpapi

import (
	"net"
	"syscall"
)

// maxUnsent bounds the bytes a TCP connection keeps queued in the kernel beyond what the
// peer's window lets it send (TCP_NOTSENT_LOWAT). Without it the kernel grows a connection's
// send queue up to tcp_wmem's maximum (4 MiB by default) whether or not the peer reads: a
// thousand clients that stop reading then hold gigabytes of kernel memory, push TCP into
// memory pressure and slow every other connection of the host. In-flight data (the
// congestion window) is not limited by it, so fast clients keep their throughput.
const maxUnsent = 128 << 10

// tcpNotsentLowat is TCP_NOTSENT_LOWAT (linux/tcp.h); package syscall does not name it.
const tcpNotsentLowat = 25

// limitUnsent sets maxUnsent on c when it is a TCP connection; errors are ignored (an older
// kernel keeps its default).
func limitUnsent(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotsentLowat, maxUnsent)
	})
}
