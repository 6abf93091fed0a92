package xorb

import (
	"encoding/binary"
	"math/bits"
)

// xxh32 is the 32-bit xxHash with seed 0, the checksum of LZ4 frames (frame header byte, block
// and content checksums). Written from the xxHash specification.
func xxh32(b []byte) uint32 {
	const (
		p1 = 0x9E3779B1
		p2 = 0x85EBCA77
		p3 = 0xC2B2AE3D
		p4 = 0x27D4EB2F
		p5 = 0x165667B1
	)
	n := len(b)
	var acc uint32
	if n >= 16 {
		var v1, v2, v3, v4 uint32 = p1, p2, 0, 0
		v1 += p2
		v4 -= p1
		for len(b) >= 16 {
			v1 = bits.RotateLeft32(v1+binary.LittleEndian.Uint32(b[0:])*p2, 13) * p1
			v2 = bits.RotateLeft32(v2+binary.LittleEndian.Uint32(b[4:])*p2, 13) * p1
			v3 = bits.RotateLeft32(v3+binary.LittleEndian.Uint32(b[8:])*p2, 13) * p1
			v4 = bits.RotateLeft32(v4+binary.LittleEndian.Uint32(b[12:])*p2, 13) * p1
			b = b[16:]
		}
		acc = bits.RotateLeft32(v1, 1) + bits.RotateLeft32(v2, 7) + bits.RotateLeft32(v3, 12) + bits.RotateLeft32(v4, 18)
	} else {
		acc = p5
	}
	acc += uint32(n)
	for len(b) >= 4 {
		acc = bits.RotateLeft32(acc+binary.LittleEndian.Uint32(b)*p3, 17) * p4
		b = b[4:]
	}
	for _, c := range b {
		acc = bits.RotateLeft32(acc+uint32(c)*p5, 11) * p1
	}
	acc ^= acc >> 15
	acc *= p2
	acc ^= acc >> 13
	acc *= p3
	acc ^= acc >> 16
	return acc
}
