package shard

import (
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// uploadLike is an hf_xet-style upload: files with verification and sha256, and new xorbs of
// chunksPerXorb chunks each.
func uploadLike(files, termsPerFile, xorbs, chunksPerXorb int) *Shard {
	s := &Shard{Files: make([]File, files), Xorbs: make([]Xorb, xorbs)}
	for i := range s.Xorbs {
		x := &s.Xorbs[i]
		x.Hash = testHash(1_000_000 + i)
		x.Chunks = make([]XorbChunk, chunksPerXorb)
		var off uint32
		for j := range x.Chunks {
			x.Chunks[j] = XorbChunk{Hash: testHash(2_000_000 + i*chunksPerXorb + j), RawStart: off, RawLen: 65536}
			off += 65536
		}
		x.RawBytes = off
	}
	for i := range s.Files {
		f := &s.Files[i]
		f.Hash = testHash(i)
		f.Terms = make([]Term, termsPerFile)
		f.Verification = make([]hash.Hash, termsPerFile)
		for j := range f.Terms {
			f.Terms[j] = Term{Xorb: testHash(1_000_000 + j%max(xorbs, 1)), RawBytes: 65536 * 8, Start: 0, End: 8}
			f.Verification[j] = testHash(3_000_000 + j)
		}
		sha := testHash(4_000_000 + i)
		f.SHA256 = &sha
	}
	return s
}

func benchParse(b *testing.B, s *Shard) {
	body := s.AppendUpload(nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse4Files: four files of 16 terms and four xorbs of 1024 chunks (a 64 MiB-xorb
// upload of four files), about 200 KB.
func BenchmarkParse4Files(b *testing.B) { benchParse(b, uploadLike(4, 16, 4, 1024)) }

// BenchmarkParse100kTerms: one file of 100,000 terms with verification, about 9.6 MB.
func BenchmarkParse100kTerms(b *testing.B) { benchParse(b, uploadLike(1, 100_000, 0, 0)) }

func BenchmarkAppendUpload100kTerms(b *testing.B) {
	s := uploadLike(1, 100_000, 0, 0)
	buf := s.AppendUpload(nil)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = s.AppendUpload(buf[:0])
	}
}
