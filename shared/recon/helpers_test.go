package recon

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// newLayout builds a consistent layout from uncompressed chunk sizes; chunk i is stored as an
// 8-byte header plus stored[i] bytes (raw size when stored is nil). The chunk hashes derive from
// seed and the xorb hash is their merkle root, so Verify passes.
func newLayout(seed uint64, raw []uint32, stored []uint32) *xorb.Layout {
	l := &xorb.Layout{
		ChunkHashes: make([]hash.Hash, len(raw)),
		StoredEnds:  make([]uint32, len(raw)),
		RawEnds:     make([]uint32, len(raw)),
	}
	leaves := make([]hash.Leaf, len(raw))
	var se, re uint32
	for i, n := range raw {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:], seed)
		binary.LittleEndian.PutUint64(b[8:], uint64(i))
		l.ChunkHashes[i] = hash.Chunk(b[:])
		s := n
		if stored != nil {
			s = stored[i]
		}
		se += xorb.HeaderSize + s
		re += n
		l.StoredEnds[i], l.RawEnds[i] = se, re
		leaves[i] = hash.Leaf{Hash: l.ChunkHashes[i], Size: uint64(n)}
	}
	l.Hash = hash.Merkle(leaves)
	return l
}

// randomLayout makes a xorb of n chunks with random raw sizes in [1, maxRaw] and random stored
// sizes (compressible or not).
func randomLayout(r *rand.Rand, n int, maxRaw uint32) *xorb.Layout {
	raw := make([]uint32, n)
	stored := make([]uint32, n)
	for i := range raw {
		raw[i] = 1 + r.Uint32N(maxRaw)
		stored[i] = 1 + r.Uint32N(raw[i])
	}
	return newLayout(r.Uint64(), raw, stored)
}

// layoutSet is a LayoutFunc over a map that counts calls.
type layoutSet struct {
	m     map[hash.Hash]*xorb.Layout
	calls int
}

func (s *layoutSet) get(h hash.Hash) (*xorb.Layout, error) {
	s.calls++
	l, ok := s.m[h]
	if !ok {
		return nil, fmt.Errorf("no layout %s", h)
	}
	return l, nil
}

// fileOf makes a shard file over the given (layout, start, end) terms.
func fileOf(terms ...termSpec) shard.File {
	f := shard.File{Hash: hash.Chunk([]byte(strconv.Itoa(len(terms))))}
	for _, t := range terms {
		f.Terms = append(f.Terms, shard.Term{Xorb: t.l.Hash, Start: t.a, End: t.b, RawBytes: t.l.RawRange(t.a, t.b)})
	}
	return f
}

type termSpec struct {
	l    *xorb.Layout
	a, b uint32
}

func layoutMap(ls ...*xorb.Layout) map[hash.Hash]*xorb.Layout {
	m := make(map[hash.Hash]*xorb.Layout, len(ls))
	for _, l := range ls {
		m[l.Hash] = l
	}
	return m
}

// testSigner renders "https://t/{hash}?r=s-e,s-e" without signing anything.
type testSigner struct{}

func (testSigner) AppendURL(dst []byte, h hash.Hash, ranges []ByteRange) []byte {
	dst = append(dst, "https://t/"...)
	dst = h.AppendString(dst)
	dst = append(dst, "?r="...)
	for i, r := range ranges {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, r.Start, 10)
		dst = append(dst, '-')
		dst = strconv.AppendUint(dst, r.End, 10)
	}
	return dst
}
