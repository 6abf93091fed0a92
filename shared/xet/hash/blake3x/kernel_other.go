//go:build !amd64 || purego

package blake3x

const haveKernel = false

func kernel16(base *byte, offs *[16]uint32, blocks int, key *[8]uint32, ctr *[32]uint32, flags, start, end uint32, out *[128]uint32) {
	panic("blake3x: no kernel in this build")
}
