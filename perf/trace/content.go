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

// MaxChangeSpan is the largest ChangeSpan a trace may give.
const MaxChangeSpan = 1 << 30

// MaxHead is the largest Head a trace may give.
const MaxHead = 64 << 20

// Content is the identity of a file's bytes. Version 0 is pseudo-random data derived from Repo
// and File; in version v each span of ChangeSpan bytes (aligned: span i holds bytes
// [i*ChangeSpan, (i+1)*ChangeSpan), the last one possibly shorter) is new with probability Change
// (decided per span and version from the same seed), else it holds the bytes of version v-1.
// Versions therefore share all but about Change of their bytes with the previous one (the chunks
// crossing a changed span's edges change too), and the same Content always gives the same bytes.
//
// ChangeSpan is a positive multiple of BlockSize (others are rounded down to whole blocks);
// 0 means BlockSize, where every 1 MiB block is decided on its own. A span of BlockSize gives the
// same bytes as 0. Larger spans model real partial fine-tunes, which replace whole tensors (tens
// of MiB in one piece) rather than scattered 1 MiB blocks: fewer changed regions, so fewer
// chunks straddling an unchanged neighbour, for the same share of changed bytes.
//
// Head, when positive, puts that many bytes of the version's own (new in every version, as a
// rewritten safetensors header or a resized first tensor) before the blocks: the blocks then
// start at file offset Head, and the file's Size - Head bytes after it are the blocks described
// above. Versions with different heads hold the same unchanged blocks at different offsets, as
// a fine-tune that changes the length of a file's first bytes does. Head 0 gives exactly the
// bytes of a content without one.
type Content struct {
	Repo, File string
	Version    int
	Size       int64
	Change     float64
	ChangeSpan int64 // bytes; 0: BlockSize
	Head       int64 // bytes, at most Size
}

// ContentOf returns the content a trace line names.
func ContentOf(r Record) Content {
	return Content{Repo: r.Repo, File: r.File, Version: r.Version, Size: r.Size, Change: r.Change, ChangeSpan: r.ChangeSpan, Head: r.Head}
}

// head is the length of c's head, within its size.
func (c Content) head() int64 { return min(max(c.Head, 0), c.Size) }

// body is the length of c's blocks.
func (c Content) body() int64 { return c.Size - c.head() }

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

// spanBlocks is the number of blocks in one span of c (at least 1).
func (c Content) spanBlocks() int64 { return spanBlocks(c.ChangeSpan) }

func spanBlocks(span int64) int64 { return max(1, span/BlockSize) }

// changed reports whether span s is new in version v (v >= 1). With spans of one block, s is
// the block's number: the decision, and so the bytes, are those of the per-block scheme.
func changed(seed uint64, change float64, v int, s int64) bool {
	if change <= 0 {
		return false
	}
	if change >= 1 {
		return true
	}
	r := rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(v)<<40|uint64(s)))
	return r.Float64() < change
}

// source returns the version whose data block b of c holds: the newest version, at most
// c.Version, in which b's span changed.
func (c Content) source(seed uint64, b int64) int {
	s := b / c.spanBlocks()
	for v := c.Version; v > 0; v-- {
		if changed(seed, c.Change, v, s) {
			return v
		}
	}
	return 0
}

// ChangedBlocks counts the blocks of c that differ from version Version-1 (all of them for
// version 0) and the bytes they hold; with spans, every block of a changed span counts. A head
// is new in every version: its bytes count, in blocks of BlockSize.
func (c Content) ChangedBlocks() (blocks, bytes int64) {
	seed := c.seed()
	n := c.spanBlocks()
	span := n * BlockSize
	body := c.body()
	for s := int64(0); s*span < body; s++ {
		if c.Version == 0 || changed(seed, c.Change, c.Version, s) {
			in := min(span, body-s*span)
			blocks += (in + BlockSize - 1) / BlockSize
			bytes += in
		}
	}
	if h := c.head(); h > 0 {
		blocks += (h + BlockSize - 1) / BlockSize
		bytes += h
	}
	return blocks, bytes
}

// fillBlock writes block b of version src into p (len(p) <= BlockSize, from the block's start).
func fillBlock(p []byte, seed uint64, src int, b int64) {
	fillStream(p, rand.NewPCG(seed, uint64(src)<<40|uint64(b)))
}

// headSalt keeps a head's stream apart from every block's.
const headSalt = 0x6a09e667f3bcc908

// fillHead writes block b of version v's head into p (len(p) <= BlockSize, from the block's
// start).
func fillHead(p []byte, seed uint64, v int, b int64) {
	fillStream(p, rand.NewPCG(seed^headSalt, uint64(v)<<40|uint64(b)))
}

func fillStream(p []byte, src *rand.PCG) {
	r := rand.New(src)
	var w [8]byte
	for i := 0; i < len(p); i += 8 {
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(p[i:], w[:])
	}
}

// piece locates file offset pos of c: the unit (a head block or a body block) holding it, that
// unit's length, and pos's offset in it.
type piece struct {
	head bool
	b    int64 // block number within the head or the body
	end  int64 // the unit's length
	in   int64 // pos's offset in the unit
}

func (c Content) piece(pos int64) piece {
	h := c.head()
	if pos < h {
		b := pos / BlockSize
		return piece{head: true, b: b, end: min(BlockSize, h-b*BlockSize), in: pos % BlockSize}
	}
	pos -= h
	b := pos / BlockSize
	return piece{b: b, end: min(BlockSize, c.body()-b*BlockSize), in: pos % BlockSize}
}

// fill writes the whole unit p names into buf (len(buf) >= p.end).
func (c Content) fill(buf []byte, seed uint64, p piece) {
	if p.head {
		fillHead(buf[:p.end], seed, c.Version, p.b)
	} else {
		fillBlock(buf[:p.end], seed, c.source(seed, p.b), p.b)
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
		u := c.piece(off + int64(n))
		take := min(len(p)-n, int(u.end-u.in))
		if u.in == 0 && take == int(u.end) {
			c.fill(p[n:n+take], seed, u)
		} else {
			if blk == nil {
				blk = make([]byte, BlockSize)
			}
			c.fill(blk, seed, u)
			copy(p[n:n+take], blk[u.in:])
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
	held piece // the unit in blk (its in ignored)
	ok   bool  // blk holds held
	// Mismatch is the offset of the first byte that differed, -1 while all matched.
	Mismatch int64
}

// NewVerifier returns a Verifier of c's bytes from off.
func NewVerifier(c Content, off int64) *Verifier {
	return &Verifier{c: c, seed: c.seed(), off: off, Mismatch: -1}
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
		u := v.c.piece(v.off)
		if !v.ok || u.head != v.held.head || u.b != v.held.b {
			if v.blk == nil {
				v.blk = make([]byte, BlockSize)
			}
			v.c.fill(v.blk, v.seed, u)
			v.held, v.ok = u, true
		}
		in, end := int(u.in), int(u.end)
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
