// Package blake3x computes keyed BLAKE3 hashes of whole messages of at least two BLAKE3 chunks
// (more than 1 KiB) with an AVX-512 kernel that runs the compression function for 16 inputs at
// once, one per 32-bit lane of the zmm registers: first 16 chunks at a time, then the parent
// nodes of the tree level by level, 16 at a time; batches of at most 8 inputs run on the same
// kernel written for 8 lanes of the ymm registers. A partial last chunk is a lane of the last
// batch that stops early; the root node is compressed by the portable code in this package.
//
// It is the fast path of package hash for long messages (chunk hashes of Xet chunks are
// 8-128 KiB); package hash falls back to github.com/zeebo/blake3 for one-chunk messages and where
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

	// MinLen is the shortest message worth the kernel: every message of two chunks or more.
	// Up to 8 chunks run on the 8-lane kernel, which even with idle lanes beats zeebo/blake3
	// (its 8-lane AVX2 code only starts at 8 chunks; measured 1.35x at 2 KiB + 1, 1.5x at
	// 4-8 KiB, 1.9x at 12 KiB: perf/BENCHMARKS.md, 2026-12-02, blake3x tuning).
	MinLen = ChunkLen + 1

	// inlineCVs is the chaining-value scratch a Hasher holds inline (in words: 8 per chunk, up to
	// 128 KiB messages, the largest Xet chunk), so hashing allocates nothing; longer messages use
	// a temporary one.
	inlineCVs = 8 * 128
)

// enabled reports whether Sum may use the kernel: the CPU has it and it was not switched off.
var enabled = haveKernel && os.Getenv("XETCDN_BLAKE3") != "generic"

// Enabled reports whether the AVX-512 kernel is in use on this machine (see the package comment).
func Enabled() bool { return enabled }

// Hasher hashes messages under one key. It is not safe for concurrent use.
type Hasher struct {
	key [8]uint32
	cvs [inlineCVs]uint32 // chaining values, 8 words per chunk
	pad [ChunkLen]byte    // a partial last chunk, zero-padded to whole blocks
}

// New returns a Hasher for the 32-byte key.
func New(key *[32]byte) *Hasher {
	h := &Hasher{}
	h.Init(key)
	return h
}

// Init sets h up for the 32-byte key; a Hasher may live inside another value or on the stack
// (it holds its scratch inline).
func (h *Hasher) Init(key *[32]byte) {
	for i := range h.key {
		h.key[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
}

// Sum returns the keyed BLAKE3 hash of msg, which must be longer than ChunkLen. It uses the
// kernel where Enabled, the portable compression function elsewhere (slow: for tests).
func (h *Hasher) Sum(msg []byte) [32]byte {
	if len(msg) <= ChunkLen {
		panic("blake3x: Sum of a single-chunk message")
	}
	n := (len(msg) + ChunkLen - 1) / ChunkLen // chunks, at least 2
	full := len(msg) / ChunkLen               // complete chunks
	var cvs []uint32
	if 8*n <= len(h.cvs) {
		cvs = h.cvs[:8*n]
	} else {
		cvs = make([]uint32, 8*n)
	}

	var (
		lanes [16]unsafe.Pointer // per lane: its input
		ctr   [32]uint32         // per lane: counter low words, then high words
		out   [128]uint32        // chaining values out of the kernel: word w of lane l at 8*l+w
	)
	// Chunks, 16 at a time. A partial last chunk rides in the last batch as its tail lane,
	// read from a zero-padded copy.
	for i := 0; i < n; i += 16 {
		used := min(16, n-i)
		t := tail{last: -1}
		blocks := ChunkLen / blockLen
		for l := range 16 {
			c := i + l
			ctr[l], ctr[16+l] = uint32(c), uint32(uint64(c)>>32)
			switch {
			case c < full:
				lanes[l] = unsafe.Pointer(&msg[c*ChunkLen])
			case c == full && l < used:
				r := len(msg) - full*ChunkLen
				clear(h.pad[:])
				copy(h.pad[:], msg[full*ChunkLen:])
				lanes[l] = unsafe.Pointer(&h.pad[0])
				k := (r + blockLen - 1) / blockLen
				t = tail{mask: 1 << l, last: k - 1, blen: uint32(r - (k-1)*blockLen), flags: flagKeyed | flagChunkEnd}
				if k == 1 {
					t.flags |= flagChunkStart
				}
				if used == 1 {
					blocks = k // the tail alone: no need to run the other lanes' blocks
				}
			default:
				lanes[l] = lanes[0] // idle: any valid input; the output is dropped
			}
		}
		h.compress16(&lanes, used, blocks, &ctr, flagKeyed, flagChunkStart, flagChunkEnd, t, &out)
		copy(cvs[8*i:8*(i+used)], out[:8*used])
	}

	// Parent levels: pair neighbours, carry an odd last node up unchanged. This builds the same
	// left-complete tree the specification defines by splitting off the largest power of two.
	// Written in place: batch j reads nodes 2j.. and writes nodes j.., which earlier batches
	// have already read.
	ctr = [32]uint32{}
	for n > 2 {
		pairs := n / 2
		for j := 0; j < pairs; j += 16 {
			used := min(16, pairs-j)
			for l := range 16 {
				lanes[l] = lanes[0]
				if l < used {
					lanes[l] = unsafe.Pointer(&cvs[16*(j+l)])
				}
			}
			h.compress16(&lanes, used, 1, &ctr, flagKeyed|flagParent, 0, 0, tail{last: -1}, &out)
			copy(cvs[8*j:8*(j+used)], out[:8*used])
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

// tail describes the lane of a compress16 call whose input ends early (a partial last chunk):
// it stops after block last, which has length blen and the given flags. mask is its lane's bit,
// 0 (and last -1) for none.
type tail struct {
	mask  uint32
	last  int
	blen  uint32
	flags uint32
}

// compress16 compresses blocks consecutive 64-byte blocks in each of the first used lanes (at
// most 16; the kernel may run idle lanes too): lane l reads lanes[l], starts from the key, uses
// counter ctr[l] | ctr[16+l]<<32 and flags (start added on the first block, end on the last,
// except for the tail lane: see tail), and leaves word w of its chaining value in out[8*l+w].
// It runs the kernel where enabled (the 8-lane one for up to 8 lanes), portable code elsewhere.
func (h *Hasher) compress16(lanes *[16]unsafe.Pointer, used, blocks int, ctr *[32]uint32, flags, start, end uint32, t tail, out *[128]uint32) {
	if enabled {
		if used <= 8 {
			kernel8(lanes, blocks, &h.key, ctr, flags, start, end, t.mask, t.last, t.blen, t.flags, out)
		} else {
			kernel16(lanes, blocks, &h.key, ctr, flags, start, end, t.mask, t.last, t.blen, t.flags, out)
		}
		return
	}
	for l := range used {
		cv := h.key
		var m [16]uint32
		for b := range blocks {
			p := unsafe.Slice((*byte)(unsafe.Add(lanes[l], b*blockLen)), blockLen)
			for w := range m {
				m[w] = binary.LittleEndian.Uint32(p[4*w:])
			}
			f, blen := flags, uint32(blockLen)
			if b == 0 {
				f |= start
			}
			if b == blocks-1 {
				f |= end
			}
			if t.mask == 1<<l && b == t.last {
				f, blen = t.flags, t.blen
			}
			v := compress(&cv, &m, uint64(ctr[l])|uint64(ctr[16+l])<<32, blen, f)
			copy(cv[:], v[:8])
			if t.mask == 1<<l && b == t.last {
				break
			}
		}
		copy(out[8*l:8*l+8], cv[:])
	}
}
