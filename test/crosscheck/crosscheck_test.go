// Package crosscheck compares shared/xet/chunk and shared/xet/hash with the upstream
// implementation that @huggingface/hub uses for uploads (@huggingface/xetchunk-wasm), run by
// node through chunks.mjs. Install the packages with install.sh.
package crosscheck

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// upstreamFile is one line of chunks.mjs output.
type upstreamFile struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	FileHash string `json:"file_hash"`
	Chunks   []struct {
		Hash   string `json:"hash"`
		Length int    `json:"length"`
	} `json:"chunks"`
}

// requireUpstream returns the node binary, skipping the test when the upstream packages are not
// installed (neither here nor in XETCDN_TEST_NODE_DIR) and CI is unset; under CI a missing tool
// fails the test.
func requireUpstream(t *testing.T) string {
	t.Helper()
	installed := false
	for _, dir := range []string{".", os.Getenv(testenv.NodeModules)} {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@huggingface", "hub")); err == nil {
			installed = true
		}
	}
	if !installed {
		if testenv.InCI() {
			t.Fatalf("node_modules with @huggingface/hub not found here or in $%s: run test/crosscheck/install.sh", testenv.NodeModules)
		}
		t.Skip("upstream packages not installed: run test/crosscheck/install.sh")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node_modules is installed but node is not on PATH: %v", err)
	}
	return node
}

// input is one generated test file.
type input struct {
	name string
	data []byte
}

func inputs() []input {
	rng := rand.New(rand.NewChaCha8([32]byte{'x', 'e', 't'}))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := 0; i < n; i += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(b[i:], w[:])
		}
		return b
	}
	repeat := func(unit []byte, n int) []byte {
		return bytes.Repeat(unit, n/len(unit)+1)[:n]
	}
	var ins []input
	for _, n := range []int{0, 1, 63, 64, 65, 8126, 8127, 8128, 8191, 8192, 8193, 64<<10 - 1, 64 << 10,
		64<<10 + 1, 128<<10 - 1, 128 << 10, 128<<10 + 1, 256<<10 + 1} {
		ins = append(ins, input{fmt.Sprintf("random-%d", n), random(n)})
	}
	for _, n := range []int{8191, 8192, 8193, 128 << 10, 128<<10 + 1} {
		ins = append(ins, input{fmt.Sprintf("zeros-%d", n), make([]byte, n)})
	}
	ins = append(ins,
		input{"random-1MiB", random(1 << 20)},
		input{"random-7MiB+123", random(7<<20 + 123)},
		input{"splitmix-1000000", splitMix64(1_000_000, 0)},
		input{"const-59-1000000", bytes.Repeat([]byte{59}, 1_000_000)},
		input{"const-ff-3MiB+5", bytes.Repeat([]byte{0xff}, 3<<20+5)},
		input{"pattern-100-2MiB", repeat(random(100), 2<<20)},
		input{"pattern-64-1MiB", repeat(random(64), 1<<20)},
		input{"pattern-4096-2MiB", repeat(random(4096), 2<<20)},
		input{"pattern-70000-3MiB", repeat(random(70000), 3<<20)},
		input{"text-3MiB", textLike(rng, 3<<20)},
		input{"sparse-4MiB", sparse(rng, random, 4<<20)},
	)
	// The inputs of the upstream xet-core test test_correctness_100kb_hitting_data: a 128-byte
	// pattern that triggers boundaries, plus i zero bytes, repeated to 64 KiB.
	pattern := trigger[:]
	for pad := range 128 {
		unit := append(slices.Clone(pattern), make([]byte, pad)...)
		ins = append(ins, input{fmt.Sprintf("trigger-pad-%d", pad), repeat(unit, 64<<10)})
	}
	return ins
}

// trigger is the pattern of the upstream chunker test test_correctness_100kb_hitting_data.
var trigger = [128]byte{
	154, 52, 42, 34, 159, 75, 126, 224, 70, 236, 12, 196, 79, 236, 178, 124, 127, 50, 99, 178, 44, 176, 174,
	126, 250, 235, 205, 174, 252, 122, 35, 10, 20, 101, 214, 69, 193, 8, 115, 105, 158, 228, 120, 111, 136,
	162, 198, 251, 211, 183, 253, 252, 164, 147, 63, 16, 186, 162, 117, 23, 170, 36, 205, 187, 174, 76, 210,
	174, 211, 175, 12, 173, 145, 59, 2, 70, 222, 181, 159, 227, 182, 156, 189, 51, 226, 106, 24, 50, 183, 157,
	140, 10, 8, 23, 212, 70, 10, 234, 23, 33, 219, 254, 39, 236, 70, 49, 191, 116, 9, 115, 15, 101, 26, 159,
	165, 220, 15, 170, 56, 125, 92, 163, 94, 235, 38, 40, 49, 81,
}

// splitMix64 is the data generator of the upstream chunker tests (docs/protocol.md §12.1).
func splitMix64(n int, seed uint64) []byte {
	out := make([]byte, 0, n+8)
	s := seed
	for len(out) < n {
		s += 0x9E3779B97F4A7C15
		z := s
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		out = binary.LittleEndian.AppendUint64(out, z^z>>31)
	}
	return out[:n]
}

// textLike is lines of words drawn from a small vocabulary, like logs or source text.
func textLike(rng *rand.Rand, n int) []byte {
	words := strings.Fields("the a model weight tensor layer xet chunk hash of and to in for with " +
		"attention head bias float16 bfloat16 shard xorb file reconstruction term range 0 1 42 1024 {} [] : ,")
	var b bytes.Buffer
	for b.Len() < n {
		for k := rng.IntN(12) + 1; k > 0; k-- {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		b.WriteByte('\n')
	}
	return b.Bytes()[:n]
}

// sparse is random data with long zero runs, like a preallocated or partly written file.
func sparse(rng *rand.Rand, random func(int) []byte, n int) []byte {
	out := make([]byte, 0, n)
	for len(out) < n {
		k := min(rng.IntN(300_000)+1, n-len(out))
		if rng.IntN(2) == 0 {
			out = append(out, make([]byte, k)...)
		} else {
			out = append(out, random(k)...)
		}
	}
	return out
}

func TestCrossCheckUpstream(t *testing.T) {
	node := requireUpstream(t)
	dir := t.TempDir()
	ins := inputs()
	paths := make([]string, len(ins))
	for i, in := range ins {
		paths[i] = filepath.Join(dir, in.name)
		if err := os.WriteFile(paths[i], in.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// 65536 is how a Blob stream feeds the hub library; odd piece sizes stress its streaming.
	for _, piece := range []int{65536, 1_000_003, 4099} {
		t.Run(fmt.Sprintf("piece-%d", piece), func(t *testing.T) {
			got := runUpstream(t, node, piece, paths)
			if len(got) != len(ins) {
				t.Fatalf("upstream printed %d results for %d files", len(got), len(ins))
			}
			var divergent []string
			for i, in := range ins {
				if compare(t, in, got[i]) {
					divergent = append(divergent, in.name)
				}
			}
			// Guard against a vacuous pass: most inputs never meet the divergent case.
			if len(divergent) > len(ins)/2 {
				t.Errorf("%d of %d inputs needed the legacy rule: %v", len(divergent), len(ins), divergent)
			}
			t.Logf("%d of %d inputs identical to upstream; %d chunked by the legacy rule upstream: %v",
				len(ins)-len(divergent), len(ins), len(divergent), divergent)
		})
	}
}

func runUpstream(t *testing.T, node string, piece int, paths []string) []upstreamFile {
	t.Helper()
	cmd := exec.Command(node, append([]string{"chunks.mjs", "--piece", fmt.Sprint(piece)}, paths...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node chunks.mjs: %v\n%s", err, stderr.String())
	}
	var res []upstreamFile
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var f upstreamFile
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("bad line from chunks.mjs: %v", err)
		}
		res = append(res, f)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return res
}

// compare checks one file against the upstream result.
//
// Hashing must agree exactly: for the upstream boundaries, hash.Chunk gives the upstream chunk
// hashes and hash.File the upstream file hash. Boundaries must agree exactly too, with one
// documented exception: huggingface.js still chunks by the pre-v1.1.10 xet-core rule, which may
// cut a chunk at 8128..8191 bytes where xet-core (hf_xet) and chunk.Boundaries do not. Where the
// two differ, the upstream boundaries must equal chunk.LegacyBoundaries exactly; the function
// reports whether the file was such a case.
func compare(t *testing.T, in input, up upstreamFile) (divergent bool) {
	t.Helper()
	if filepath.Base(up.Path) != in.name {
		t.Fatalf("result for %s where %s was expected", up.Path, in.name)
	}
	if up.Size != int64(len(in.data)) {
		t.Errorf("%s: upstream read %d bytes of %d", in.name, up.Size, len(in.data))
		return false
	}

	// Hashes over the upstream boundaries.
	upEnds := make([]int, len(up.Chunks))
	leaves := make([]hash.Leaf, len(up.Chunks))
	prev := 0
	for i, c := range up.Chunks {
		end := prev + c.Length
		if c.Length <= 0 || end > len(in.data) {
			t.Errorf("%s: upstream chunk %d has length %d at offset %d", in.name, i, c.Length, prev)
			return false
		}
		h := hash.Chunk(in.data[prev:end])
		if h.String() != c.Hash {
			t.Errorf("%s: chunk %d [%d,%d): hash.Chunk %s, upstream %s", in.name, i, prev, end, h, c.Hash)
			return false
		}
		leaves[i] = hash.Leaf{Hash: h, Size: uint64(c.Length)}
		upEnds[i] = end
		prev = end
	}
	if prev != len(in.data) {
		t.Errorf("%s: upstream chunks cover %d of %d bytes", in.name, prev, len(in.data))
		return false
	}
	if fh := hash.File(leaves).String(); fh != up.FileHash {
		t.Errorf("%s: hash.File %s, upstream %s", in.name, fh, up.FileHash)
	}

	// Boundaries, and our streaming path (HashAll) over the same bytes.
	ours := chunk.Boundaries(in.data)
	chunks, info, err := chunk.HashAll(bytes.NewReader(in.data))
	if err != nil {
		t.Fatalf("%s: HashAll: %v", in.name, err)
	}
	if len(chunks) != len(ours) || hash.File(chunk.Leaves(chunks)) != info.FileHash {
		t.Errorf("%s: HashAll disagrees with Boundaries", in.name)
	}
	for i := range chunks {
		start := 0
		if i > 0 {
			start = ours[i-1]
		}
		if chunks[i].Len != ours[i]-start || chunks[i].Hash != hash.Chunk(in.data[start:ours[i]]) {
			t.Errorf("%s: HashAll chunk %d differs from Boundaries", in.name, i)
			break
		}
	}
	if slices.Equal(ours, upEnds) {
		if info.FileHash.String() != up.FileHash {
			t.Errorf("%s: HashAll file hash %s, upstream %s", in.name, info.FileHash, up.FileHash)
		}
		return false
	}
	if legacy := chunk.LegacyBoundaries(in.data); !slices.Equal(legacy, upEnds) {
		t.Errorf("%s: upstream boundaries match neither rule\nours     %v\nlegacy   %v\nupstream %v",
			in.name, ours, legacy, upEnds)
		return false
	}
	return true
}
