//go:build amd64 && !purego

package blake3x

import "golang.org/x/sys/cpu"

// haveKernel: the kernel needs AVX512F (zmm arithmetic, rotates, dword moves) and AVX512BW/VL
// are checked too, as the set every AVX-512 CPU since Skylake-SP has; x/sys/cpu also checks that
// the OS saves the zmm and mask registers.
var haveKernel = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW

// kernel16 compresses blocks consecutive 64-byte blocks for each of 16 lanes: lane l reads
// base+offs[l], starts from key, uses counter ctr[l] | ctr[16+l]<<32 and flags (start added to
// the first block, end to the last), and leaves word w of its chaining value in out[16*w+l].
//
//go:noescape
func kernel16(base *byte, offs *[16]uint32, blocks int, key *[8]uint32, ctr *[32]uint32, flags, start, end uint32, out *[128]uint32)
