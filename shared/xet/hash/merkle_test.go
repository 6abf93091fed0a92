package hash

import (
	"encoding/json"
	"os"
	"testing"
)

// merkleCase is one entry of testdata/merkle_vectors.json: the 18 reference cases of upstream
// xet-core test_correctness (aggregated_hashes.rs). Leaves are (hash string, size); each case
// gives the xorb hash (Merkle) and the file hash under three salts (FileWithSalt, the salt used
// as a key in its raw form).
type merkleCase struct {
	Leaves []struct {
		Hash Hash   `json:"hash"`
		Size uint64 `json:"size"`
	} `json:"leaves"`
	XorbHash   Hash `json:"xorb_hash"`
	FileHashes []struct {
		Salt     Hash `json:"salt"`
		FileHash Hash `json:"file_hash"`
	} `json:"file_hashes"`
}

func loadMerkleCases(t testing.TB) []merkleCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/merkle_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []merkleCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) != 18 {
		t.Fatalf("%d cases, want 18", len(cases))
	}
	return cases
}

func TestMerkleUpstreamVectors(t *testing.T) {
	wantSizes := []int{0, 1, 1, 3, 4, 4, 6, 4, 5, 2, 4, 5, 8, 64, 32, 12, 16, 100}
	for i, c := range loadMerkleCases(t) {
		if len(c.Leaves) != wantSizes[i] || len(c.FileHashes) != 3 {
			t.Fatalf("case %d: %d leaves, %d salts: vectors file damaged", i, len(c.Leaves), len(c.FileHashes))
		}
		leaves := make([]Leaf, len(c.Leaves))
		for j, l := range c.Leaves {
			leaves[j] = Leaf{Hash: l.Hash, Size: l.Size}
		}
		if got := Merkle(leaves); got != c.XorbHash {
			t.Errorf("case %d (%d leaves): Merkle = %v, want %v", i, len(leaves), got, c.XorbHash)
		}
		for _, f := range c.FileHashes {
			if got := FileWithSalt(leaves, f.Salt); got != f.FileHash {
				t.Errorf("case %d (%d leaves), salt %v: FileWithSalt = %v, want %v", i, len(leaves), f.Salt, got, f.FileHash)
			}
			if f.Salt.IsZero() {
				if got := File(leaves); got != f.FileHash {
					t.Errorf("case %d: File = %v, want %v", i, got, f.FileHash)
				}
			}
		}
	}
}

// TestMerkleDoesNotModifyInput guards the in-place level reduction.
func TestMerkleDoesNotModifyInput(t *testing.T) {
	leaves := make([]Leaf, 50)
	for i := range leaves {
		leaves[i] = Leaf{Hash: Chunk([]byte{byte(i)}), Size: uint64(i + 1)}
	}
	before := append([]Leaf(nil), leaves...)
	_ = Merkle(leaves)
	for i := range leaves {
		if leaves[i] != before[i] {
			t.Fatalf("leaf %d modified", i)
		}
	}
}

func BenchmarkChunkHash64K(b *testing.B) {
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i * 31)
	}
	c := NewChunker()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		_ = c.Sum(data)
	}
}

func BenchmarkMerkle1000(b *testing.B) {
	leaves := make([]Leaf, 1000)
	for i := range leaves {
		leaves[i] = Leaf{Hash: Chunk([]byte{byte(i), byte(i >> 8)}), Size: 65536}
	}
	b.SetBytes(1000 * 65536) // bytes of file content covered per aggregation
	for b.Loop() {
		_ = Merkle(leaves)
	}
}

// TestFileInPlace: FileInPlace gives File's hash (upstream vectors and longer lists) on a
// scratch copy, without allocating the level copy Merkle makes.
func TestFileInPlace(t *testing.T) {
	var lists [][]Leaf
	for _, c := range loadMerkleCases(t) {
		leaves := make([]Leaf, len(c.Leaves))
		for j, l := range c.Leaves {
			leaves[j] = Leaf{Hash: l.Hash, Size: l.Size}
		}
		lists = append(lists, leaves)
	}
	long := make([]Leaf, 5000)
	for i := range long {
		long[i] = Leaf{Hash: Chunk([]byte{byte(i), byte(i >> 8)}), Size: uint64(1 + i%70000)}
	}
	lists = append(lists, long, long[:2], long[:9], long[:1000])
	for i, leaves := range lists {
		scratch := append([]Leaf(nil), leaves...)
		if got, want := FileInPlace(scratch), File(leaves); got != want {
			t.Errorf("list %d (%d leaves): FileInPlace = %v, File = %v", i, len(leaves), got, want)
		}
	}
	scratch := append([]Leaf(nil), long...)
	if n := testing.AllocsPerRun(20, func() { copy(scratch, long); FileInPlace(scratch) }); n > 0 && !raceEnabled {
		t.Errorf("FileInPlace of %d leaves: %.0f allocations, want none", len(long), n)
	}
}
