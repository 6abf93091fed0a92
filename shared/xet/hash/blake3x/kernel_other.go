//go:build !amd64 || purego

package blake3x

import "unsafe"

const haveKernel = false

func kernel16(lanes *[16]unsafe.Pointer, blocks int, key *[8]uint32, ctr *[32]uint32, flags, start, end, tailMask uint32, tailLast int, tailLen, tailFlags uint32, out *[128]uint32) {
	panic("blake3x: no kernel in this build")
}

func kernel8(lanes *[16]unsafe.Pointer, blocks int, key *[8]uint32, ctr *[32]uint32, flags, start, end, tailMask uint32, tailLast int, tailLen, tailFlags uint32, out *[128]uint32) {
	panic("blake3x: no kernel in this build")
}
