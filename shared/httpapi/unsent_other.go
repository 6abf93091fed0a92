//go:build !linux

package httpapi

import "net"

// limitUnsent bounds a connection's unsent kernel queue on Linux only.
func limitUnsent(net.Conn) {}
