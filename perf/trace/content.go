package trace

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
)

// BlockSize is the unit in which versions of a file differ.
const BlockSize = 1 << 20

// Content is the identity of a file's bytes. Version 0 is pseudo-random data derived from Repo
// and File; in version v each 1 MiB block is new with probability Change (decided per block and
// version from the same seed), else it is the block of version v-1. Versions therefore share all
// but about Change of their blocks with the previous one (the chunks crossing a changed block's
// edges change too), and the same Content always gives the same bytes.
type Content struct {
	Repo, File string
	Version    int
	Size       int64
	Change     float64
}

// ContentOf returns the content a trace line names.
func ContentOf(r Record) Content {
	return Content{Repo: r.Repo, File: r.File, Version: r.Version, Size: r.Size, Change: r.Change}
}

func (c Content) String() string {
	return fmt.Sprintf("%s/%s@%d (%d bytes)", c.Repo, c.File, c.Version, c.Size)
}

func (c Content) seed() uint64 {
	h := fnv.New64a()
	h.Write([]byte(c.Repo))
	h.Write([]byte{0})
	h.Write([]byte(c.File))
	return h.Sum64()
}

// changed reports whether block b is new in version v (v >= 1).
func changed(seed uint64, change float64, v int, b int64) bool {
	if change <= 0 {
		return false
	}
	if change >= 1 {
		return true
	}
	r := rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(v)<<40|uint64(b)))
	return r.Float64() < change
}

// source returns the version whose data block b of c holds.
func (c Content) source(seed uint64, b int64) int {
	for v := c.Version; v > 0; v-- {
		if changed(seed, c.Change, v, b) {
			return v
		}
	}
	return 0
}

// ChangedBlocks counts the blocks of c that differ from version Version-1 (all of them for
// version 0) and the bytes they hold.
func (c Content) ChangedBlocks() (blocks, bytes int64) {
	seed := c.seed()
	for b := int64(0); b*BlockSize < c.Size; b++ {
		if c.Version == 0 || changed(seed, c.Change, c.Version, b) {
			blocks++
			bytes += min(BlockSize, c.Size-b*BlockSize)
		}
	}
	return blocks, bytes
}

// fillBlock writes block b of version src into p (len(p) <= BlockSize, from the block's start).
func fillBlock(p []byte, seed uint64, src int, b int64) {
	r := rand.New(rand.NewPCG(seed, uint64(src)<<40|uint64(b)))
	var w [8]byte
	for i := 0; i < len(p); i += 8 {
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(p[i:], w[:])
	}
}

// ReadAt fills p with the content's bytes from off; it returns io.EOF when p reaches past the end.
func (c Content) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("trace: negative offset %d", off)
	}
	if off >= c.Size {
		return 0, io.EOF
	}
	want := len(p)
	if rest := c.Size - off; int64(want) > rest {
		p = p[:rest]
	}
	seed := c.seed()
	var blk []byte
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		b := pos / BlockSize
		in := int(pos % BlockSize)
		end := min(int64(BlockSize), c.Size-b*BlockSize)
		take := min(len(p)-n, int(end)-in)
		if in == 0 && take == int(end) {
			fillBlock(p[n:n+take], seed, c.source(seed, b), b)
		} else {
			if blk == nil {
				blk = make([]byte, BlockSize)
			}
			fillBlock(blk[:end], seed, c.source(seed, b), b)
			copy(p[n:n+take], blk[in:])
		}
		n += take
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// Reader returns the content as a stream (for uploads).
func (c Content) Reader() io.Reader { return io.NewSectionReader(c, 0, c.Size) }

// Verifier is an io.Writer that checks the bytes written to it against the content from an
// offset, block by block: a download is checked without holding the file twice.
type Verifier struct {
	c    Content
	seed uint64
	off  int64 // next expected offset
	blk  []byte
	bNum int64 // block held in blk, -1: none
	// Mismatch is the offset of the first byte that differed, -1 while all matched.
	Mismatch int64
}

// NewVerifier returns a Verifier of c's bytes from off.
func NewVerifier(c Content, off int64) *Verifier {
	return &Verifier{c: c, seed: c.seed(), off: off, bNum: -1, Mismatch: -1}
}

// Write compares p with the next bytes of the content. It never fails: check Mismatch and
// Offset when the download ends.
func (v *Verifier) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if v.off >= v.c.Size {
			if v.Mismatch < 0 {
				v.Mismatch = v.off
			}
			v.off += int64(len(p))
			return n, nil
		}
		b := v.off / BlockSize
		if b != v.bNum {
			if v.blk == nil {
				v.blk = make([]byte, BlockSize)
			}
			end := min(int64(BlockSize), v.c.Size-b*BlockSize)
			fillBlock(v.blk[:end], v.seed, v.c.source(v.seed, b), b)
			v.bNum = b
		}
		in := int(v.off % BlockSize)
		end := int(min(int64(BlockSize), v.c.Size-b*BlockSize))
		take := min(len(p), end-in)
		if v.Mismatch < 0 && !bytes.Equal(p[:take], v.blk[in:in+take]) {
			for i := 0; i < take; i++ {
				if p[i] != v.blk[in+i] {
					v.Mismatch = v.off + int64(i)
					break
				}
			}
		}
		p = p[take:]
		v.off += int64(take)
	}
	return n, nil
}

// Offset is the offset after the last byte written.
func (v *Verifier) Offset() int64 { return v.off }
