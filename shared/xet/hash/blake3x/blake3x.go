// Package blake3x computes keyed BLAKE3 hashes of whole messages of at least two BLAKE3 chunks
// (more than 1 KiB) with an AVX-512 kernel that runs the compression function for 16 inputs at
// once, one per 32-bit lane of the zmm registers: first 16 chunks at a time, then the parent
// nodes of the tree level by level, 16 at a time. A partial last chunk and the root node are
// compressed by the portable code in this package.
//
// It is the fast path of package hash for long messages (chunk hashes of Xet chunks are
// 8-128 KiB); package hash falls back to github.com/zeebo/blake3 for short messages and where
// Enabled reports false: a CPU or OS without AVX512F/VL/BW, a non-amd64 build, the purego build
// tag, or XETCDN_BLAKE3=generic in the environment. Why the project carries its own kernel:
// docs/decisions.md (2026-12-02, AVX-512 BLAKE3).
//
// The kernel, kernel_amd64.s, is written by gen_kernel.go; regenerate it with `go generate`.
package blake3x

//go:generate go run gen_kernel.go -out kernel_amd64.s -goout compress_gen.go

import (
	"encoding/binary"
	"os"
	"unsafe"
)

const (
	// ChunkLen is the length of a BLAKE3 chunk.
	ChunkLen = 1024
	blockLen = 64

	flagChunkStart = 1 << 0
	flagChunkEnd   = 1 << 1
	flagParent     = 1 << 2
	flagRoot       = 1 << 3
	flagKeyed      = 1 << 4

	// MinLen is the shortest message worth the kernel: 16 chunks fill its 16 lanes. Below it
	// zeebo/blake3's 8-lane AVX2 code is as fast.
	MinLen = 16 * ChunkLen

	// keepCVs bounds the chaining-value scratch a Hasher keeps between messages (in words:
	// 8 per chunk, 256 KiB messages); longer messages use a temporary one.
	keepCVs = 8 * 256
)

// enabled reports whether Sum may use the kernel: the CPU has it and it was not switched off.
var enabled = haveKernel && os.Getenv("XETCDN_BLAKE3") != "generic"

// Enabled reports whether the AVX-512 kernel is in use on this machine (see the package comment).
func Enabled() bool { return enabled }

// Hasher hashes messages under one key. It is not safe for concurrent use.
type Hasher struct {
	key [8]uint32
	cvs []uint32 // chaining values, 8 words per chunk
}

// New returns a Hasher for the 32-byte key.
func New(key *[32]byte) *Hasher {
	h := &Hasher{}
	for i := range h.key {
		h.key[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	return h
}

// Sum returns the keyed BLAKE3 hash of msg, which must be longer than ChunkLen. It uses the
// kernel where Enabled, the portable compression function elsewhere (slow: for tests).
func (h *Hasher) Sum(msg []byte) [32]byte {
	if len(msg) <= ChunkLen {
		panic("blake3x: Sum of a single-chunk message")
	}
	n := (len(msg) + ChunkLen - 1) / ChunkLen // chunks, at least 2
	full := len(msg) / ChunkLen               // complete chunks
	cvs := h.cvs
	if cap(cvs) < 8*n {
		cvs = make([]uint32, 8*n)
		if 8*n <= keepCVs {
			h.cvs = cvs
		}
	}
	cvs = cvs[:8*n]

	var ctr [32]uint32  // per lane: counter low words, then high words
	var offs [16]uint32 // per lane: byte offset from the batch's first input
	var out [128]uint32 // chaining values out of the kernel: word w of lane l at 16*w+l
	for i := 0; i < full; i += 16 {
		lanes := min(16, full-i)
		for l := range 16 {
			c := uint64(i + l)
			ctr[l], ctr[16+l] = uint32(c), uint32(c>>32)
			offs[l] = 0 // idle lanes read lane 0's input; their output is dropped
			if l < lanes {
				offs[l] = uint32(l * ChunkLen)
			}
		}
		h.compress16(&msg[i*ChunkLen], &offs, ChunkLen/blockLen, &ctr, flagKeyed, flagChunkStart, flagChunkEnd, &out)
		untranspose(cvs[8*i:], &out, lanes)
	}
	if full < n {
		cv := chunkCV(&h.key, msg[full*ChunkLen:], uint64(full))
		copy(cvs[8*full:], cv[:])
	}

	// Parent levels: pair neighbours, carry an odd last node up unchanged. This builds the same
	// left-complete tree the specification defines by splitting off the largest power of two.
	// Written in place: batch j reads nodes 2j.. and writes nodes j.., which earlier batches
	// have already read.
	ctr = [32]uint32{}
	for n > 2 {
		pairs := n / 2
		for j := 0; j < pairs; j += 16 {
			lanes := min(16, pairs-j)
			for l := range 16 {
				offs[l] = 0
				if l < lanes {
					offs[l] = uint32(l * blockLen)
				}
			}
			h.compress16((*byte)(unsafe.Pointer(&cvs[16*j])), &offs, 1, &ctr, flagKeyed|flagParent, 0, 0, &out)
			untranspose(cvs[8*j:], &out, lanes)
		}
		if n%2 == 1 {
			copy(cvs[8*pairs:8*pairs+8], cvs[8*(n-1):8*n])
		}
		n = pairs + n%2
	}
	var block [16]uint32
	copy(block[:], cvs[:16])
	root := compress(&h.key, &block, 0, blockLen, flagKeyed|flagParent|flagRoot)
	var sum [32]byte
	for i := range 8 {
		binary.LittleEndian.PutUint32(sum[4*i:], root[i])
	}
	return sum
}

// compress16 runs the kernel where enabled and its portable equivalent elsewhere.
func (h *Hasher) compress16(base *byte, offs *[16]uint32, blocks int, ctr *[32]uint32, flags, start, end uint32, out *[128]uint32) {
	if enabled {
		kernel16(base, offs, blocks, &h.key, ctr, flags, start, end, out)
		return
	}
	for l := range 16 {
		cv := h.key
		var m [16]uint32
		for b := range blocks {
			p := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(base), int(offs[l])+b*blockLen)), blockLen)
			for w := range m {
				m[w] = binary.LittleEndian.Uint32(p[4*w:])
			}
			f := flags
			if b == 0 {
				f |= start
			}
			if b == blocks-1 {
				f |= end
			}
			v := compress(&cv, &m, uint64(ctr[l])|uint64(ctr[16+l])<<32, blockLen, f)
			copy(cv[:], v[:8])
		}
		for w := range 8 {
			out[16*w+l] = cv[w]
		}
	}
}

// untranspose copies the chaining values of the first lanes of out to dst, 8 words each.
func untranspose(dst []uint32, out *[128]uint32, lanes int) {
	dst = dst[:8*lanes]
	for l := range lanes {
		d := dst[8*l : 8*l+8]
		d[0], d[1], d[2], d[3] = out[l], out[16+l], out[32+l], out[48+l]
		d[4], d[5], d[6], d[7] = out[64+l], out[80+l], out[96+l], out[112+l]
	}
}

// chunkCV returns the (non-root) chaining value of a chunk of 1..ChunkLen bytes.
func chunkCV(key *[8]uint32, chunk []byte, counter uint64) [8]uint32 {
	cv := *key
	var m [16]uint32
	for b := 0; b < len(chunk) || b == 0; b += blockLen {
		var blk [blockLen]byte
		n := copy(blk[:], chunk[b:])
		for w := range m {
			m[w] = binary.LittleEndian.Uint32(blk[4*w:])
		}
		f := uint32(flagKeyed)
		if b == 0 {
			f |= flagChunkStart
		}
		if b+blockLen >= len(chunk) {
			f |= flagChunkEnd
		}
		v := compress(&cv, &m, counter, uint32(n), f)
		copy(cv[:], v[:8])
	}
	return cv
}
