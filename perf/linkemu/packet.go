package linkemu

import (
	"errors"
	"net/netip"
)

// ErrNotIP is returned by Destination for a packet that is not a whole IPv4 or IPv6 header.
var ErrNotIP = errors.New("not an IPv4 or IPv6 packet")

// Destination is the destination address of an IP packet as a TUN device without packet
// information (IFF_NO_PI) hands it over: the IP header first.
func Destination(pkt []byte) (netip.Addr, error) {
	if len(pkt) == 0 {
		return netip.Addr{}, ErrNotIP
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 || int(pkt[0]&0x0f)*4 < 20 || int(pkt[0]&0x0f)*4 > len(pkt) {
			return netip.Addr{}, ErrNotIP
		}
		return netip.AddrFrom4([4]byte(pkt[16:20])), nil
	case 6:
		if len(pkt) < 40 {
			return netip.Addr{}, ErrNotIP
		}
		return netip.AddrFrom16([16]byte(pkt[24:40])), nil
	}
	return netip.Addr{}, ErrNotIP
}
