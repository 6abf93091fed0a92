package main

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// synth is the synthetic index: xorb i and file j are pure functions of (seed, i) and (seed, j),
// so a run can be reproduced and a benchmark can find any file again without reading the
// database.
//
// Xorb i has Chunks chunks of 32-128 KiB (uncompressed, stored with their 8-byte header), chunk
// hashes derived from (seed, i, c), and the merkle root of those as its hash (an edge checks it).
// File j has a term count drawn as model repositories have them: 60 % single-term files
// (configs), the rest log-uniform in [2, MaxTerms]; each term a run of 1-8 chunks at a random
// place of a uniformly chosen xorb.
type synth struct {
	seed     uint64
	xorbs    int
	chunks   int
	maxTerms int
	repos    int
	hashes   []hash.Hash // xorb hashes, filled by layout as xorbs are built
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// rnd returns the k-th random number of stream (kind, id).
func (s *synth) rnd(kind, id, k uint64) uint64 {
	return splitmix(s.seed ^ splitmix(kind<<56^id) ^ splitmix(k+0x51))
}

// raw is the size of chunk c of xorb x.
func (s *synth) raw(x, c int) uint32 {
	return 32<<10 + uint32(s.rnd(1, uint64(x), uint64(c))%(96<<10+1))
}

// layout builds xorb x and records its hash.
func (s *synth) layout(x int) *xorb.Layout {
	l := &xorb.Layout{ChunkHashes: make([]hash.Hash, s.chunks), StoredEnds: make([]uint32, s.chunks), RawEnds: make([]uint32, s.chunks)}
	leaves := make([]hash.Leaf, s.chunks)
	var se, re uint32
	for c := range s.chunks {
		h := &l.ChunkHashes[c]
		for k := 0; k < 4; k++ {
			binary.LittleEndian.PutUint64(h[8*k:], s.rnd(2, uint64(x)<<16|uint64(c), uint64(k)))
		}
		n := s.raw(x, c)
		se += xorb.HeaderSize + n
		re += n
		l.StoredEnds[c], l.RawEnds[c] = se, re
		leaves[c] = hash.Leaf{Hash: *h, Size: uint64(n)}
	}
	l.Hash = hash.Merkle(leaves)
	s.hashes[x] = l.Hash
	return l
}

// terms returns the term count of file j.
func (s *synth) terms(j int) int {
	r := s.rnd(3, uint64(j), 0)
	if r%100 < 60 || s.maxTerms < 2 {
		return 1
	}
	u := float64(s.rnd(3, uint64(j), 1)>>11) / (1 << 53)
	return min(s.maxTerms, int(math.Exp(math.Log(2)+u*(math.Log(float64(s.maxTerms))-math.Log(2)))))
}

// fileHash is the hash of file j (not a hash of any content: no bytes exist).
func (s *synth) fileHash(j int) hash.Hash {
	var h hash.Hash
	for k := 0; k < 4; k++ {
		binary.LittleEndian.PutUint64(h[8*k:], s.rnd(4, uint64(j), uint64(k)))
	}
	return h
}

// scope is the repository file j is visible in.
func (s *synth) scope(j int) string { return fmt.Sprintf("models/load/r%d", j%s.repos) }

// record builds the record of file j; every xorb must have been built (hashes filled).
func (s *synth) record(j int) *recon.FileRecord {
	n := s.terms(j)
	rec := &recon.FileRecord{Hash: s.fileHash(j), Terms: make([]recon.Term, n)}
	for t := range rec.Terms {
		r := s.rnd(5, uint64(j), uint64(t))
		x := int(r % uint64(s.xorbs))
		run := 1 + int(r>>32%8)
		run = min(run, s.chunks)
		start := int(r >> 40 % uint64(s.chunks-run+1))
		var byteStart, raw, stored uint32
		for c := 0; c < start+run; c++ {
			sz := s.raw(x, c)
			if c < start {
				byteStart += xorb.HeaderSize + sz
			} else {
				raw += sz
				stored += xorb.HeaderSize + sz
			}
		}
		rec.Terms[t] = recon.Term{Xorb: s.hashes[x], Start: uint32(start), End: uint32(start + run), RawBytes: raw,
			ByteStart: byteStart, ByteEnd: byteStart + stored}
		rec.Size += uint64(raw)
	}
	return rec
}
