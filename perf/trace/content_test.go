package trace

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"testing"
)

// TestContentSpanOneBlockUnchanged: a change span of 0 or 1 MiB gives the bytes and changed
// blocks the per-block scheme gave before spans existed. The digests were taken from that code.
func TestContentSpanOneBlockUnchanged(t *testing.T) {
	for _, g := range []struct {
		repo, file     string
		size           int64
		change         float64
		version        int
		blocks, nbytes int64
		sha256         string
	}{
		{"models/a/b", "model.safetensors", 41955385, 0.1, 0, 41, 41955385, "7648b766ae77f1bfdc246505a5d278e7f78619c1baad8405e6d762fa1fc74d62"},
		{"models/a/b", "model.safetensors", 41955385, 0.1, 1, 2, 2097152, "8c7a82c1e8388a73380146e42ee699a5296c6af1998a98e01a51a93636cdd58d"},
		{"models/a/b", "model.safetensors", 41955385, 0.1, 2, 5, 5242880, "ffc159de7e8c175740c5e1b10eab5d674f24bfd79942ce68ae2f242b174c3098"},
		{"models/a/b", "model.safetensors", 41955385, 0.1, 3, 5, 5242880, "5fe240fb6a85b5539a87158b9e2030b59a0bfc82637964693109f77276abfb1f"},
		{"models/a/b", "model.safetensors", 41955385, 0.1, 4, 3, 3145728, "7dabdbfc0c7aac32ac6cda6233bd3b985cf483ffc033cf2f542e650f13a18a75"},
		{"models/a/b", "model.safetensors", 41955385, 0.1, 5, 0, 0, "7dabdbfc0c7aac32ac6cda6233bd3b985cf483ffc033cf2f542e650f13a18a75"},
		{"models/org3/model-3", "model-00002-of-00004.safetensors", 9437191, 0.3, 0, 10, 9437191, "ffc0dd6513cf4e9d58b8d4e96a43d947bbcd4e3d31557721869df2a0eeffe263"},
		{"models/org3/model-3", "model-00002-of-00004.safetensors", 9437191, 0.3, 1, 4, 4194304, "e336a4d2bf7bada34cccf71c29391f03c770c728ad079d7895bb1685679f1ca7"},
		{"models/org3/model-3", "model-00002-of-00004.safetensors", 9437191, 0.3, 2, 5, 5242880, "35ecf2d20a6b22a9cbe0df22d4d1de9d1d4a52b6df44e2c7aa567e4d0124f9b4"},
		{"models/org3/model-3", "model-00002-of-00004.safetensors", 9437191, 0.3, 3, 5, 4194311, "13ddad2930077751d9385767bac0193aa34b4384b49d5f0761ed58328f3bcf30"},
		{"models/org3/model-3", "model-00002-of-00004.safetensors", 9437191, 0.3, 4, 0, 0, "13ddad2930077751d9385767bac0193aa34b4384b49d5f0761ed58328f3bcf30"},
		{"models/org3/model-3", "model-00002-of-00004.safetensors", 9437191, 0.3, 5, 3, 2097159, "51ef7ecd9e4f487d408cfd87df1c93a8eb5e1ed0c73cab1cd59ddbbc8bcbfe59"},
		{"datasets/x/y", "d/e.bin", 17825792, 0.5, 0, 17, 17825792, "5b69cd4ce3a96099fcac8337a57d7ebc3374a10959eba1b67706af427c0937d5"},
		{"datasets/x/y", "d/e.bin", 17825792, 0.5, 1, 10, 10485760, "5a593251ab45dfcc59b113e8f27a64bad145845c7db96a99794f090f81d9789a"},
		{"datasets/x/y", "d/e.bin", 17825792, 0.5, 2, 7, 7340032, "48ccbac77e01ff2193e3636cd09598ab07c0e77cafee7ff858f594dff8382f87"},
		{"datasets/x/y", "d/e.bin", 17825792, 0.5, 3, 10, 10485760, "5f058c5f93543a70c6e8bfeb18a1c4da7ab3e10e246ca1575f711f2c89ecee02"},
		{"datasets/x/y", "d/e.bin", 17825792, 0.5, 4, 6, 6291456, "e0e7413924591c5003c8930992ce500319488283ae5b04c3d0fec6837e02a562"},
		{"datasets/x/y", "d/e.bin", 17825792, 0.5, 5, 11, 11534336, "048dd10f13c836211aec372816b74a9cbe2357727140c3ba3e0381306c73ecbe"},
		{"spaces/p/q", "w", 3145727, 1, 0, 3, 3145727, "9f61e569ffa6688f6032d6b63ffd5975695974e502411a6e4b202025536aa0fd"},
		{"spaces/p/q", "w", 3145727, 1, 1, 3, 3145727, "612a04102e8f17c759fc991495f9eb65eba34348985d29a378998a062d5bdd66"},
		{"spaces/p/q", "w", 3145727, 1, 2, 3, 3145727, "2c5f5a7cb5e9aa9becf71448f53eb2323118a390993cc27197a959c0a5b9564c"},
		{"spaces/p/q", "w", 3145727, 1, 3, 3, 3145727, "66c461c5fe71d36f64f305ec7f7ba341ed1e6e9b1a71af2cc34dae0220213106"},
		{"spaces/p/q", "w", 3145727, 1, 4, 3, 3145727, "1454d5686ee185d3db0a8fab0d210d28a574c032f1c6069080a4709b67174b06"},
		{"spaces/p/q", "w", 3145727, 1, 5, 3, 3145727, "66fb11181ecba68b52e231edcd5a6ce1a95dad3d8f8b8c14af855fbc162e07cb"},
		{"models/z/z", "tiny", 1000, 0.05, 0, 1, 1000, "1b6b05ec8536091bb2250500e64828f31227fb9c533533282b276a3c972979dc"},
		{"models/z/z", "tiny", 1000, 0.05, 1, 0, 0, "1b6b05ec8536091bb2250500e64828f31227fb9c533533282b276a3c972979dc"},
		{"models/z/z", "tiny", 1000, 0.05, 2, 0, 0, "1b6b05ec8536091bb2250500e64828f31227fb9c533533282b276a3c972979dc"},
		{"models/z/z", "tiny", 1000, 0.05, 3, 0, 0, "1b6b05ec8536091bb2250500e64828f31227fb9c533533282b276a3c972979dc"},
		{"models/z/z", "tiny", 1000, 0.05, 4, 0, 0, "1b6b05ec8536091bb2250500e64828f31227fb9c533533282b276a3c972979dc"},
		{"models/z/z", "tiny", 1000, 0.05, 5, 0, 0, "1b6b05ec8536091bb2250500e64828f31227fb9c533533282b276a3c972979dc"},
	} {
		for _, span := range []int64{0, BlockSize} {
			c := Content{Repo: g.repo, File: g.file, Version: g.version, Size: g.size, Change: g.change, ChangeSpan: span}
			b := make([]byte, c.Size)
			if n, err := c.ReadAt(b, 0); int64(n) != c.Size || err != nil {
				t.Fatalf("%s: ReadAt = %d, %v", c, n, err)
			}
			if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != g.sha256 {
				t.Errorf("%s span %d: sha256 %s, want %s", c, span, got, g.sha256)
			}
			if blocks, nbytes := c.ChangedBlocks(); blocks != g.blocks || nbytes != g.nbytes {
				t.Errorf("%s span %d: ChangedBlocks = %d, %d; want %d, %d", c, span, blocks, nbytes, g.blocks, g.nbytes)
			}
		}
	}
}

// oldChanged is the per-block decision as it was before spans: block b is new in version v.
func oldChanged(seed uint64, change float64, v int, b int64) bool {
	if change <= 0 {
		return false
	}
	if change >= 1 {
		return true
	}
	r := rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(v)<<40|uint64(b)))
	return r.Float64() < change
}

// TestContentSpanOneBlockDecisions: over more files and versions than the digests cover, spans
// of 0 and 1 MiB take each block's source and count its changes as the per-block scheme did.
func TestContentSpanOneBlockDecisions(t *testing.T) {
	for i := range 8 {
		for _, span := range []int64{0, BlockSize} {
			c := Content{Repo: fmt.Sprintf("models/o%d/m", i), File: "w.safetensors", Size: 300*BlockSize + int64(i)*777,
				Change: []float64{0.01, 0.05, 0.1, 0.3, 0.5, 0.9, 0, 1}[i], ChangeSpan: span}
			seed := c.seed()
			for v := 1; v <= 12; v++ {
				c.Version = v
				var want int64
				for b := int64(0); b*BlockSize < c.Size; b++ {
					src := 0
					for u := v; u > 0; u-- {
						if oldChanged(seed, c.Change, u, b) {
							src = u
							break
						}
					}
					if got := c.source(seed, b); got != src {
						t.Fatalf("%s span %d block %d: source %d, want %d", c, span, b, got, src)
					}
					if oldChanged(seed, c.Change, v, b) {
						want++
					}
				}
				if blocks, _ := c.ChangedBlocks(); blocks != want {
					t.Errorf("%s span %d: %d changed blocks, want %d", c, span, blocks, want)
				}
			}
		}
	}
}

// blockHeads returns the first 16 bytes of every block of c.
func blockHeads(t *testing.T, c Content) [][]byte {
	t.Helper()
	var out [][]byte
	p := make([]byte, BlockSize)
	for off := int64(0); off < c.Size; off += BlockSize {
		n, err := c.ReadAt(p, off)
		if n < int(min(BlockSize, c.Size-off)) || (err != nil && err != io.EOF) {
			t.Fatalf("%s: ReadAt(%d) = %d, %v", c, off, n, err)
		}
		out = append(out, bytes.Clone(p[:16]))
	}
	return out
}

// TestContentSpanRuns: with a 32 MiB span the blocks that differ from the previous version come
// in aligned runs of 32 (the last span of the file shorter), ChangedBlocks counts exactly them,
// and over a large file the changed share is still about Change.
func TestContentSpanRuns(t *testing.T) {
	const span = 32 * BlockSize
	c := Content{Repo: "models/a/b", File: "model.safetensors", Size: 5*span + 7*BlockSize + 12345, Change: 0.4, ChangeSpan: span}
	prev := blockHeads(t, c)
	var sawChanged, sawKept bool
	for ver := 1; ver <= 4; ver++ {
		c.Version = ver
		cur := blockHeads(t, c)
		diff := make([]bool, len(cur))
		var n int64
		for b := range cur {
			diff[b] = !bytes.Equal(cur[b], prev[b])
			if diff[b] {
				n++
			}
		}
		for b := range diff {
			if diff[b] != diff[b/32*32] {
				t.Fatalf("version %d: block %d differs %v, the first block of its span %v", ver, b, diff[b], diff[b/32*32])
			}
		}
		for s := 0; s*32 < len(diff); s++ {
			if diff[s*32] {
				sawChanged = true
			} else {
				sawKept = true
			}
		}
		blocks, nbytes := c.ChangedBlocks()
		if blocks != n {
			t.Errorf("version %d: %d blocks differ, ChangedBlocks says %d", ver, n, blocks)
		}
		wantBytes := n * BlockSize
		if diff[len(diff)-1] {
			wantBytes -= BlockSize - c.Size%BlockSize
		}
		if nbytes != wantBytes {
			t.Errorf("version %d: ChangedBlocks says %d bytes, want %d", ver, nbytes, wantBytes)
		}
		prev = cur
	}
	if !sawChanged || !sawKept {
		t.Errorf("over 4 versions of 6 spans at change 0.4: changed %v, kept %v; want both", sawChanged, sawKept)
	}

	big := Content{Repo: "models/a/b", File: "big", Version: 1, Size: 20000 * span, Change: 0.05, ChangeSpan: span}
	blocks, nbytes := big.ChangedBlocks()
	if r := float64(blocks) / (20000 * 32); math.Abs(r-0.05) > 0.01 || blocks%32 != 0 || nbytes != blocks*BlockSize {
		t.Fatalf("%d of %d blocks changed (%.3f), %d bytes", blocks, 20000*32, r, nbytes)
	}
	if spanBlocks(3*BlockSize+5) != 3 || spanBlocks(-1) != 1 {
		t.Errorf("spans are not rounded down to whole blocks")
	}
}

// TestContentSpanReadAtVerifier: ReadAt at offsets around span boundaries, the stream and the
// Verifier agree on a version whose spans changed, and a span changes the bytes.
func TestContentSpanReadAtVerifier(t *testing.T) {
	const span = 4 * BlockSize
	c := Content{Repo: "models/a/b", File: "model.safetensors", Version: 3, Size: 3*span + BlockSize + BlockSize/2 + 3, Change: 0.5, ChangeSpan: span}
	all := make([]byte, c.Size)
	if n, err := c.ReadAt(all, 0); n != len(all) || err != nil {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	if streamed, err := io.ReadAll(c.Reader()); err != nil || !bytes.Equal(streamed, all) {
		t.Fatalf("Reader differs from ReadAt (%v)", err)
	}
	one := c
	one.ChangeSpan = 0
	other := make([]byte, c.Size)
	one.ReadAt(other, 0)
	if bytes.Equal(other, all) {
		t.Fatal("a 4 MiB span gave the bytes of 1 MiB blocks")
	}
	for _, off := range []int64{span - 5, span, 2*span - 1, 2*span + BlockSize - 2, 3*span - 7, c.Size - 9} {
		for _, size := range []int{1, 10, BlockSize + 3, span + 11} {
			p := make([]byte, size)
			n, err := c.ReadAt(p, off)
			want := min(int64(size), c.Size-off)
			if int64(n) != want || (want < int64(size) && err != io.EOF) || !bytes.Equal(p[:n], all[off:off+want]) {
				t.Fatalf("ReadAt(%d bytes at %d) = %d, %v", size, off, n, err)
			}
		}
	}
	checkVerifier(t, c, all, []int64{0, span - 3, 2*span + 1}, []int64{span - 1, span, 2*span + 5, c.Size - 1})
}

// checkVerifier: a Verifier of c from each of froms accepts all (c's bytes) written in pieces
// of 999,983 bytes, and one from 0 reports a byte flipped at each of flips at its offset.
func checkVerifier(t *testing.T, c Content, all []byte, froms, flips []int64) {
	t.Helper()
	for _, from := range froms {
		v := NewVerifier(c, from)
		for p := all[from:]; len(p) > 0; p = p[min(len(p), 999_983):] {
			v.Write(p[:min(len(p), 999_983)])
		}
		if v.Mismatch != -1 || v.Offset() != c.Size {
			t.Fatalf("verifier from %d: mismatch %d offset %d", from, v.Mismatch, v.Offset())
		}
	}
	for _, at := range flips {
		bad := bytes.Clone(all)
		bad[at] ^= 0x80
		v := NewVerifier(c, 0)
		v.Write(bad)
		if v.Mismatch != at {
			t.Errorf("verifier found mismatch at %d, want %d", v.Mismatch, at)
		}
	}
}

// TestContentHead: a head puts new bytes of the version's own before the blocks; two versions
// with different heads hold their unchanged blocks at different offsets, byte for byte; ReadAt,
// the stream and the Verifier agree around the head's end; ChangedBlocks counts the head.
func TestContentHead(t *testing.T) {
	read := func(c Content) []byte {
		t.Helper()
		all := make([]byte, c.Size)
		if n, err := c.ReadAt(all, 0); n != len(all) || (err != nil && err != io.EOF) {
			t.Fatalf("%s: ReadAt = %d, %v", c, n, err)
		}
		return all
	}
	const body = 3*BlockSize + 777
	v0 := Content{Repo: "models/a/b", File: "model.safetensors", Size: body + 5000, Head: 5000}
	v1 := Content{Repo: "models/a/b", File: "model.safetensors", Version: 1, Size: body + 1_234_567, Head: 1_234_567}
	b0, b1 := read(v0), read(v1)
	if !bytes.Equal(b0[v0.Head:], b1[v1.Head:]) {
		t.Fatal("versions without changed blocks differ after their heads")
	}
	if bytes.Equal(b0[:4096], b1[:4096]) {
		t.Fatal("two versions have the same head bytes")
	}
	plain := Content{Repo: "models/a/b", File: "model.safetensors", Size: body}
	if !bytes.Equal(read(plain), b0[v0.Head:]) {
		t.Fatal("the blocks after a head are not the blocks of the content without one")
	}
	if blocks, n := v1.ChangedBlocks(); blocks != 2 || n != v1.Head {
		t.Errorf("ChangedBlocks of a version with a 1,234,567-byte head and no changed block: %d blocks, %d bytes", blocks, n)
	}
	if streamed, err := io.ReadAll(v1.Reader()); err != nil || !bytes.Equal(streamed, b1) {
		t.Fatalf("Reader differs from ReadAt (%v)", err)
	}
	for _, off := range []int64{0, BlockSize - 1, v1.Head - 3, v1.Head, v1.Head + BlockSize - 1, v1.Size - 5} {
		for _, size := range []int{1, 10, BlockSize + 3} {
			p := make([]byte, size)
			n, err := v1.ReadAt(p, off)
			want := min(int64(size), v1.Size-off)
			if int64(n) != want || (want < int64(size) && err != io.EOF) || !bytes.Equal(p[:n], b1[off:off+want]) {
				t.Fatalf("ReadAt(%d bytes at %d) = %d, %v", size, off, n, err)
			}
		}
	}
	checkVerifier(t, v1, b1, []int64{0, v1.Head - 1, v1.Head + 2}, []int64{3, BlockSize + 1, v1.Head - 1, v1.Head, v1.Size - 1})
	// A head as long as the file leaves no blocks.
	all := Content{Repo: "models/a/b", File: "x", Size: 100, Head: 100}
	if blocks, n := all.ChangedBlocks(); blocks != 1 || n != 100 || len(read(all)) != 100 {
		t.Errorf("head = size: %d blocks, %d bytes", blocks, n)
	}
}
