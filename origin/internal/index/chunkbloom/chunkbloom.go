// Package chunkbloom is the Bloom filter of chunk hashes behind the index backends' dedup
// filters (index.DedupFilter; docs/decisions.md, "a dedup filter on SQLite" and "a dedup filter
// on Postgres"): a "no" is always right, a "maybe" must be asked of the table.
//
// 16 bits and 8 probes per chunk it is sized for: about 1 false "maybe" in 1,700 when full,
// fewer before. Probe positions are mixed with a per-process random seed, so that they cannot
// be chosen from outside.
package chunkbloom

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"sync/atomic"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

const (
	bitsPerChunk = 16
	probes       = 8
)

// MinChunks is the least a filter is sized for (128 KiB of bits); a variable for tests.
var MinChunks int64 = 1 << 16

// Seed mixes a process's probe positions.
type Seed [2]uint64

// NewSeed returns a random seed.
func NewSeed() Seed {
	var s [16]byte
	_, _ = rand.Read(s[:]) // never fails (crypto/rand)
	return Seed{binary.LittleEndian.Uint64(s[:8]), binary.LittleEndian.Uint64(s[8:])}
}

// Probes returns the double-hashing start and step of c (chunk hashes are uniform, so their
// own bits serve, mixed with the seed).
func (s Seed) Probes(c *hash.Hash) (h1, h2 uint64) {
	return binary.LittleEndian.Uint64(c[0:8]) ^ s[0], (binary.LittleEndian.Uint64(c[8:16]) ^ s[1]) | 1
}

// AddTo adds chunks to the filter in use and to the one being built, either of which may be
// nil: while a filter is rebuilt from its table, every new entry goes to both (the backends'
// dedup filters hold their lock around it, so that the switch to the new one loses none).
func (s Seed) AddTo(chunks []hash.Hash, cur, pending *Bloom) {
	for i := range chunks {
		h1, h2 := s.Probes(&chunks[i])
		if cur != nil {
			cur.Add(h1, h2)
		}
		if pending != nil {
			pending.Add(h1, h2)
		}
	}
}

// Bloom is a fixed-size Bloom filter of chunk hashes; safe for concurrent adds and tests.
type Bloom struct {
	words []atomic.Uint64
	nbits uint64       // len(words) * 64
	cap   int64        // chunks it is sized for
	n     atomic.Int64 // chunks added
}

// New returns an empty filter sized for chunks (at least MinChunks): 2 bytes per chunk.
func New(chunks int64) *Bloom {
	chunks = max(chunks, MinChunks)
	words := (chunks*bitsPerChunk + 63) / 64
	return &Bloom{words: make([]atomic.Uint64, words), nbits: uint64(words) * 64, cap: chunks}
}

// bit maps a probe onto the filter's bits (the high half of a 128-bit product: uniform
// without a power-of-two size).
func (b *Bloom) bit(h uint64) uint64 {
	hi, _ := bits.Mul64(h, b.nbits)
	return hi
}

// Add adds the chunk whose probes are h1, h2 (Seed.Probes).
func (b *Bloom) Add(h1, h2 uint64) {
	for i := uint64(0); i < probes; i++ {
		p := b.bit(h1 + i*h2)
		b.words[p>>6].Or(1 << (p & 63))
	}
	b.n.Add(1)
}

// Has reports whether the chunk whose probes are h1, h2 may have been added; false is certain.
func (b *Bloom) Has(h1, h2 uint64) bool {
	for i := uint64(0); i < probes; i++ {
		p := b.bit(h1 + i*h2)
		if b.words[p>>6].Load()&(1<<(p&63)) == 0 {
			return false
		}
	}
	return true
}

// Len is the number of adds so far (a chunk added twice counts twice).
func (b *Bloom) Len() int64 { return b.n.Load() }

// Cap is the number of chunks the filter is sized for.
func (b *Bloom) Cap() int64 { return b.cap }

// Full reports whether more chunks were added than it is sized for.
func (b *Bloom) Full() bool { return b.n.Load() > b.cap }

// Bytes is the filter's memory.
func (b *Bloom) Bytes() int64 { return int64(len(b.words)) * 8 }
