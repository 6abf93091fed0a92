//go:build amd64 && !purego

package blake3x

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveKernel: the kernels need AVX512F (zmm arithmetic, rotates, dword moves) and AVX512VL
// (kernel8: the same on ymm registers, Y16-Y31); AVX512BW is checked too, as the set every
// AVX-512 CPU since Skylake-SP has; x/sys/cpu also checks that the OS saves the zmm and mask
// registers.
var haveKernel = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW

// kernel16 is compress16 in AVX-512 (see there).
//
//go:noescape
func kernel16(lanes *[16]unsafe.Pointer, blocks int, key *[8]uint32, ctr *[32]uint32, flags, start, end, tailMask uint32, tailLast int, tailLen, tailFlags uint32, out *[128]uint32)

// kernel8 is kernel16 on ymm registers for the first 8 lanes only (lanes[8:] and the upper
// halves of ctr and out are not touched): the cheaper kernel for batches of at most 8 inputs.
//
//go:noescape
func kernel8(lanes *[16]unsafe.Pointer, blocks int, key *[8]uint32, ctr *[32]uint32, flags, start, end, tailMask uint32, tailLast int, tailLen, tailFlags uint32, out *[128]uint32)
