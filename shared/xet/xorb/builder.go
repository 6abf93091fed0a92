package xorb

import "github.com/xetcdn/xetcdn/shared/xet/hash"

// Builder assembles an upload body from raw chunks, the way a client builds a xorb: it keeps the
// limits, compresses every chunk and records the layout. The zero value is not ready; use
// NewBuilder. A Builder is not safe for concurrent use.
type Builder struct {
	scheme   Scheme // Auto, or a fixed scheme
	enc      Encoder
	body     []byte
	leaves   []hash.Leaf
	stored   []uint32
	raw      []uint32
	rawTotal uint64
	current  Scheme // scheme chosen for the current run (Auto mode)
	run      int    // chunks compressed with current
}

// NewBuilder returns an empty Builder that compresses with s: Auto chooses per run of
// RetestInterval chunks like the upstream client (see ChooseScheme); None, LZ4 or BG4 force
// that scheme for every chunk (still falling back to None when it does not help).
func NewBuilder(s Scheme) *Builder { return &Builder{scheme: s} }

// StartFile tells the builder that the next chunk starts a new file; in Auto mode the next chunk
// then picks a fresh scheme, as the upstream client does at file boundaries.
func (b *Builder) StartFile() { b.run = 0 }

// Add appends a chunk. h must be hash.Chunk(raw) (the client computed it while chunking).
// It returns false, and changes nothing, if raw is empty or larger than MaxChunkRaw, or if adding
// it would exceed MaxChunks or MaxRawBytes: the caller then finishes this xorb and starts another.
func (b *Builder) Add(raw []byte, h hash.Hash) bool {
	if len(raw) == 0 || len(raw) > MaxChunkRaw || len(b.leaves) >= MaxChunks ||
		b.rawTotal+uint64(len(raw)) > MaxRawBytes {
		return false
	}
	s := b.scheme
	if s == Auto {
		if b.run%RetestInterval == 0 {
			b.current = ChooseScheme(raw)
			b.run = 0
		}
		b.run++
		s = b.current
	}
	b.body, _ = b.enc.AppendCompressed(b.body, raw, s)
	b.rawTotal += uint64(len(raw))
	b.leaves = append(b.leaves, hash.Leaf{Hash: h, Size: uint64(len(raw))})
	b.stored = append(b.stored, uint32(len(b.body)))
	b.raw = append(b.raw, uint32(b.rawTotal))
	return true
}

// NumChunks is the number of chunks added since the last Finish.
func (b *Builder) NumChunks() int { return len(b.leaves) }

// RawLen is the number of raw bytes added since the last Finish.
func (b *Builder) RawLen() uint64 { return b.rawTotal }

// Finish returns the upload body (chunks only, no footer) and its layout, and resets the builder
// for the next xorb. With no chunks added it returns an empty body and a layout of zero chunks
// (which the server would reject). The results do not alias the builder's buffers.
func (b *Builder) Finish() ([]byte, *Layout) {
	l := &Layout{
		Hash:        hash.Merkle(b.leaves),
		ChunkHashes: make([]hash.Hash, len(b.leaves)),
		StoredEnds:  b.stored,
		RawEnds:     b.raw,
	}
	for i := range b.leaves {
		l.ChunkHashes[i] = b.leaves[i].Hash
	}
	body := b.body
	*b = Builder{scheme: b.scheme, enc: b.enc, leaves: b.leaves[:0]}
	return body, l
}
