// Package hash implements the 32-byte Xet hash and every hash the protocol derives from it:
// chunk hashes, merkle aggregation (xorb hash), file hashes, term verification hashes and the
// HMAC keying used by global-dedup answers.
//
// A Hash holds the raw 32 bytes. Its string form (String, Parse) is the protocol's: four
// little-endian u64 words, each printed as 16 hex digits, so every 8-byte group appears
// byte-reversed relative to naive hex (docs/protocol.md §1). Binary formats carry the raw bytes.
//
// The package does no I/O and keeps no mutable package state; every function is safe for
// concurrent use.
package hash

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"github.com/zeebo/blake3"

	"github.com/xetcdn/xetcdn/shared/xet/hash/blake3x"
)

// Size is the length of a hash in bytes.
const Size = 32

// Hash is a raw 32-byte Xet hash (MerkleHash / DataHash upstream).
type Hash [Size]byte

// Zero is the all-zero hash: the hash of an empty xorb and the file id of an empty file.
var Zero Hash

// Keys of the keyed blake3 hashes (docs/protocol.md §0).
var (
	DataKey = Hash{102, 151, 245, 119, 91, 149, 80, 222, 49, 53, 203, 172, 165, 151, 24, 28,
		157, 228, 33, 16, 155, 235, 43, 88, 180, 208, 176, 75, 147, 173, 242, 41}
	InternalNodeKey = Hash{1, 126, 197, 199, 165, 71, 41, 150, 253, 148, 102, 102, 180, 138, 2, 230,
		93, 221, 83, 111, 55, 199, 109, 210, 248, 99, 82, 230, 74, 83, 113, 63}
	VerificationKey = Hash{127, 24, 87, 214, 206, 86, 237, 102, 18, 127, 249, 19, 231, 165, 195, 243,
		164, 205, 38, 213, 181, 219, 73, 230, 65, 36, 152, 127, 40, 251, 148, 195}
)

// ErrSyntax reports a string that is not 64 hex digits.
var ErrSyntax = errors.New("hash: want 64 hex digits")

const hexDigits = "0123456789abcdef"

// String renders h in the protocol's string form (lowercase).
func (h Hash) String() string {
	var out [2 * Size]byte
	h.appendString(out[:0])
	return string(out[:])
}

// AppendString appends the string form of h to dst.
func (h Hash) AppendString(dst []byte) []byte { return h.appendString(dst) }

func (h Hash) appendString(dst []byte) []byte {
	// Written eight digits at a time, not appended digit by digit: the merkle aggregation
	// formats every node's children this way, and the appends were most of it. Each word is
	// printed most significant digit first (the string form, docs/protocol.md §1).
	dst = slices.Grow(dst, 2*Size)
	n := len(dst)
	out := dst[n : n+2*Size]
	for w := 0; w < 4; w++ {
		v := binary.LittleEndian.Uint64(h[8*w:])
		binary.BigEndian.PutUint64(out[16*w:], hex8(uint32(v>>32)))
		binary.BigEndian.PutUint64(out[16*w+8:], hex8(uint32(v)))
	}
	return dst[:n+2*Size]
}

// hex8 returns the eight lowercase hex digits of v, most significant first, as the bytes of a
// big-endian word: each nibble spread into its own byte, then '0' added, and 'a'-'0'-10 more
// where the nibble is 10 or above.
func hex8(v uint32) uint64 {
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	x = (x | x<<8) & 0x00ff00ff00ff00ff
	x = (x | x<<4) & 0x0f0f0f0f0f0f0f0f
	letters := ((x + 0x0606060606060606) >> 4) & 0x0101010101010101
	return x + 0x3030303030303030 + letters*('a'-'0'-10)
}

// MarshalText implements encoding.TextMarshaler with the protocol's string form.
func (h Hash) MarshalText() ([]byte, error) { return h.appendString(make([]byte, 0, 2*Size)), nil }

// UnmarshalText implements encoding.TextUnmarshaler; see Parse.
func (h *Hash) UnmarshalText(b []byte) error {
	v, err := parseBytes(b)
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// Parse reads the protocol's string form: exactly 64 hex digits, either case.
func Parse(s string) (Hash, error) {
	if len(s) != 2*Size {
		return Zero, fmt.Errorf("%w: got %d characters", ErrSyntax, len(s))
	}
	return parseBytes([]byte(s))
}

func parseBytes(s []byte) (Hash, error) {
	var h Hash
	if len(s) != 2*Size {
		return Zero, fmt.Errorf("%w: got %d characters", ErrSyntax, len(s))
	}
	for w := 0; w < 4; w++ {
		for i := 0; i < 8; i++ {
			hi, ok1 := unhex(s[16*w+2*i])
			lo, ok2 := unhex(s[16*w+2*i+1])
			if !ok1 || !ok2 {
				return Zero, fmt.Errorf("%w: bad digit near position %d", ErrSyntax, 16*w+2*i)
			}
			h[8*w+7-i] = hi<<4 | lo
		}
	}
	return h, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// FromHex reads naive hex of the raw bytes (the form a SHA-256 digest is usually printed in).
// It is the inverse of RawHex, not of String.
func FromHex(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*Size {
		return Zero, fmt.Errorf("%w: got %d characters", ErrSyntax, len(s))
	}
	for i := 0; i < Size; i++ {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return Zero, fmt.Errorf("%w: bad digit near position %d", ErrSyntax, 2*i)
		}
		h[i] = hi<<4 | lo
	}
	return h, nil
}

// RawHex renders the raw bytes as naive hex (for debugging and byte-level test vectors).
func (h Hash) RawHex() string {
	out := make([]byte, 0, 2*Size)
	for _, b := range h {
		out = append(out, hexDigits[b>>4], hexDigits[b&0x0f])
	}
	return string(out)
}

// IsZero reports whether h is all zero bytes.
func (h Hash) IsZero() bool { return h == Zero }

// Word returns the i-th little-endian u64 word (0..3).
func (h Hash) Word(i int) uint64 { return binary.LittleEndian.Uint64(h[8*i:]) }

// Mod returns h % n as the protocol defines it: the fourth word modulo n.
func (h Hash) Mod(n uint64) uint64 { return h.Word(3) % n }

// Truncated returns word 0, the key of shard lookup tables.
func (h Hash) Truncated() uint64 { return h.Word(0) }

// FromSHA256 converts a standard SHA-256 digest to the form shards carry: each 8-byte group
// reversed, so that String() prints the ordinary sha256 hex.
func FromSHA256(d [32]byte) Hash {
	var h Hash
	for w := 0; w < 4; w++ {
		for i := 0; i < 8; i++ {
			h[8*w+i] = d[8*w+7-i]
		}
	}
	return h
}

// Keyed returns blake3 keyed with key over msg.
func Keyed(key Hash, msg []byte) Hash {
	if useX(len(msg)) {
		k := [Size]byte(key)
		var x blake3x.Hasher // on the stack: its scratch is inline
		x.Init(&k)
		return Hash(x.Sum(msg))
	}
	hs, _ := blake3.NewKeyed(key[:]) // cannot fail: the key has the right length
	_, _ = hs.Write(msg)
	var out Hash
	hs.Sum(out[:0])
	return out
}

// useX reports whether a message of n bytes is hashed by blake3x's AVX-512 kernel (16 or 8
// chunks at once) rather than zeebo/blake3 (8 at once with AVX2): on CPUs that have it, from two
// chunks up (docs/decisions.md, 2026-12-02, AVX-512 BLAKE3, and the blake3x tuning after it).
func useX(n int) bool { return n >= blake3x.MinLen && blake3x.Enabled() }

// KeyedHasher hashes many messages under one key, paying the key schedule and the hasher's
// allocation once instead of per message. A KeyedHasher is not safe for concurrent use.
type KeyedHasher struct {
	h  *blake3.Hasher // short messages
	x  blake3x.Hasher // long messages where blake3x.Enabled (inline: no allocation of its own)
	xk bool           // x is set up
}

// NewKeyedHasher returns a KeyedHasher for key.
func NewKeyedHasher(key Hash) *KeyedHasher {
	hs, _ := blake3.NewKeyed(key[:]) // cannot fail: the key has the right length
	k := &KeyedHasher{h: hs}
	if blake3x.Enabled() {
		kb := [Size]byte(key)
		k.x.Init(&kb)
		k.xk = true
	}
	return k
}

// Sum returns Keyed(key, msg).
func (k *KeyedHasher) Sum(msg []byte) Hash {
	if k.xk && len(msg) >= blake3x.MinLen {
		return Hash(k.x.Sum(msg))
	}
	k.h.Reset()
	_, _ = k.h.Write(msg)
	var out Hash
	k.h.Sum(out[:0])
	return out
}

// SumHashes returns Keyed(key, concatenation of the raw hashes) without building the
// concatenation: a []Hash is that concatenation in memory, hashed as one message (one write
// instead of one per hash, and the long-message kernel from blake3x.MinLen).
func (k *KeyedHasher) SumHashes(hs []Hash) Hash {
	if len(hs) == 0 {
		return k.Sum(nil)
	}
	return k.Sum(unsafe.Slice(&hs[0][0], len(hs)*Size))
}

// Chunker hashes many chunks with one keyed hasher; see KeyedHasher.
type Chunker = KeyedHasher

// NewChunker returns a KeyedHasher for DataKey.
func NewChunker() *Chunker { return NewKeyedHasher(DataKey) }

// Pools of hashers for the fixed keys, so the one-shot functions below cost no key schedule.
var (
	chunkPool  = sync.Pool{New: func() any { return NewKeyedHasher(DataKey) }}
	verifyPool = sync.Pool{New: func() any { return NewKeyedHasher(VerificationKey) }}
	nodePool   = sync.Pool{New: func() any { return NewKeyedHasher(InternalNodeKey) }}
	filePool   = sync.Pool{New: func() any { return NewKeyedHasher(Zero) }}
)

// Chunk returns the chunk hash: blake3 keyed with DataKey over the uncompressed chunk bytes.
func Chunk(data []byte) Hash {
	k := chunkPool.Get().(*KeyedHasher)
	defer chunkPool.Put(k)
	return k.Sum(data)
}

// HMAC keys a chunk hash for a global-dedup answer: blake3 keyed with key over the raw hash.
func HMAC(key, h Hash) Hash { return Keyed(key, h[:]) }

// Leaf is one input of the merkle aggregation: a hash and the uncompressed size it covers.
type Leaf struct {
	Hash Hash
	Size uint64
}

// Merkle aggregates leaves into one node hash (docs/protocol.md §5.2). It returns Zero for no
// leaves and the leaf itself for one leaf.
func Merkle(leaves []Leaf) Hash {
	switch len(leaves) {
	case 0:
		return Zero
	case 1:
		return leaves[0].Hash
	}
	level := make([]Leaf, len(leaves))
	copy(level, leaves)
	return merkleInPlace(level)
}

// merkleInPlace is Merkle over level, which it overwrites with the inner levels.
func merkleInPlace(level []Leaf) Hash {
	if len(level) < 2 {
		return Merkle(level)
	}
	buf := make([]byte, 0, 9*(2*Size+24))
	// One pooled keyed hasher for every node: a fresh one costs a key schedule and an allocation.
	node := nodePool.Get().(*KeyedHasher)
	defer nodePool.Put(node)
	for len(level) > 1 {
		next := level[:0]
		for i := 0; i < len(level); {
			n := groupLen(level[i:])
			var parent Leaf
			buf = buf[:0]
			for _, l := range level[i : i+n] {
				buf = l.Hash.appendString(buf)
				buf = append(buf, " : "...)
				buf = strconv.AppendUint(buf, l.Size, 10)
				buf = append(buf, '\n')
				parent.Size += l.Size
			}
			parent.Hash = node.Sum(buf)
			next = append(next, parent) // writes at or before index i: safe in place
			i += n
		}
		level = next
	}
	return level[0].Hash
}

// groupLen applies the variable-fanout cut rule to the nodes starting at rest[0].
func groupLen(rest []Leaf) int {
	if len(rest) <= 2 {
		return len(rest)
	}
	end := min(9, len(rest))
	for i := 2; i < end; i++ {
		if rest[i].Hash.Mod(4) == 0 {
			return i + 1
		}
	}
	return end
}

// File returns the file hash of a file made of the given chunks (docs/protocol.md §5.4):
// Zero for an empty file, otherwise blake3 keyed with 32 zero bytes over the merkle root.
func File(chunks []Leaf) Hash { return FileWithSalt(chunks, Zero) }

// FileWithSalt is File with another key (hf_xet always uses the zero salt).
func FileWithSalt(chunks []Leaf, salt Hash) Hash {
	if len(chunks) == 0 {
		return Zero
	}
	return fileOfRoot(Merkle(chunks), salt)
}

// FileInPlace is File for a caller that no longer needs chunks: it computes the merkle levels
// in chunks' own memory (no copy of them; a shard check hashes files of thousands of chunks)
// and leaves its contents undefined.
func FileInPlace(chunks []Leaf) Hash {
	if len(chunks) == 0 {
		return Zero
	}
	return fileOfRoot(merkleInPlace(chunks), Zero)
}

func fileOfRoot(root, salt Hash) Hash {
	if salt != Zero {
		return Keyed(salt, root[:])
	}
	k := filePool.Get().(*KeyedHasher)
	defer filePool.Put(k)
	return k.Sum(root[:])
}

// Verification returns the term verification (range) hash of the given chunk hashes, in order.
func Verification(chunkHashes []Hash) Hash {
	k := verifyPool.Get().(*KeyedHasher)
	defer verifyPool.Put(k)
	return k.SumHashes(chunkHashes)
}
