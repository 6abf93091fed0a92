package hash

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestStringEndianness(t *testing.T) {
	raw := Hash{22, 175, 58, 132, 4, 75, 131, 214, 190, 153, 138, 66, 226, 3, 153, 242, 204, 86, 80, 234, 249, 153, 80, 99, 159, 80, 65, 138, 236, 231, 149, 78}
	const want = "d6834b04843aaf16f29903e2428a99be635099f9ea5056cc4e95e7ec8a41509f"
	if got := raw.String(); got != want {
		t.Fatalf("String() = %s, want %s", got, want)
	}
	back, err := Parse(want)
	if err != nil || back != raw {
		t.Fatalf("Parse(%s) = %v, %v", want, back, err)
	}
	upper, err := Parse("D6834B04843AAF16F29903E2428A99BE635099F9EA5056CC4E95E7EC8A41509F")
	if err != nil || upper != raw {
		t.Fatalf("Parse upper = %v, %v", upper, err)
	}
	// The original design notes printed this value with "10" missing (62 digits); this is the full
	// form, as docs/protocol.md §1 gives it.
	var seq Hash
	for i := range seq {
		seq[i] = byte(i)
	}
	if got := seq.String(); got != "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918" {
		t.Fatalf("sequence String() = %s", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"", "00", "g6834b04843aaf16f29903e2428a99be635099f9ea5056cc4e95e7ec8a41509f",
		"d6834b04843aaf16f29903e2428a99be635099f9ea5056cc4e95e7ec8a41509f0", "d6834b04843aaf16f29903e2428a99be635099f9ea5056cc4e95e7ec8a41509"} {
		if _, err := Parse(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) err = %v, want ErrSyntax", s, err)
		}
	}
}

func TestHelloWorld(t *testing.T) {
	data := []byte("hello world")
	c := Chunk(data)
	if got := c.String(); got != "4e39378b9d359f118190557a1f44130219a54e5fcfa07bd96cf50b466fe651b1" {
		t.Fatalf("chunk hash %s", got)
	}
	if got := c.RawHex(); got != "119f359d8b37394e0213441f7a559081d97ba0cf5f4ea519b151e66f460bf56c" {
		t.Fatalf("chunk raw %s", got)
	}
	if NewChunker().Sum(data) != c {
		t.Fatal("Chunker.Sum differs from Chunk")
	}
	leaves := []Leaf{{c, 11}}
	if Merkle(leaves) != c {
		t.Fatal("single-leaf merkle must be the leaf")
	}
	if got := File(leaves).String(); got != "f15edd43b7e85cfd25e2758ffe13b99fdd09dfa817e8d9f6548722a7a126db7f" {
		t.Fatalf("file hash %s", got)
	}
	if got := Verification([]Hash{c}).String(); got != "22ef2fdcff5cea306e42ad7e15ed8a0c5e789e7d2ec34658c10d2758946847da" {
		t.Fatalf("verification hash %s", got)
	}
	if got := FromSHA256(sha256.Sum256(data)).String(); got != "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9" {
		t.Fatalf("sha256 form %s", got)
	}
	if got := FromSHA256(sha256.Sum256([]byte("some data"))).String(); got != "1307990e6ba5ca145eb35e99182a9bec46531bc54ddf656a602c780fa0240dee" {
		t.Fatalf("sha256 form %s", got)
	}
	if File(nil) != Zero || Merkle(nil) != Zero {
		t.Fatal("empty file must hash to zero")
	}
	if got := Chunk(nil).String(); got != "e0f2cf784e7e5f10c34f84af150e9a5ff9664216debad915364d741049870f67" {
		t.Fatalf("empty chunk hash %s", got)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("d6834b04843aaf16f29903e2428a99be635099f9ea5056cc4e95e7ec8a41509f")
	f.Add("")
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		back, err := Parse(h.String())
		if err != nil || back != h {
			t.Fatalf("round trip of %q failed", s)
		}
	})
}

// TestAppendString: AppendString appends the string form after what dst holds, whatever its
// capacity, and leaves dst's bytes alone.
func TestAppendString(t *testing.T) {
	h, err := Parse("0123456789abcdeffedcba98765432100011223344556677889900aabbccddee")
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range [][]byte{nil, []byte("x: "), make([]byte, 3, 200)} {
		prefix := string(dst)
		got := string(h.AppendString(dst))
		if got != prefix+h.String() || h.String() != "0123456789abcdeffedcba98765432100011223344556677889900aabbccddee" {
			t.Errorf("AppendString(%q) = %q", prefix, got)
		}
	}
}

// TestStringDigits: the string form against a digit-by-digit reference (each word's bytes from
// the last to the first, two digits each), for every byte value in every position.
func TestStringDigits(t *testing.T) {
	ref := func(h Hash) string {
		var b strings.Builder
		for w := 0; w < 4; w++ {
			for i := 7; i >= 0; i-- {
				fmt.Fprintf(&b, "%02x", h[8*w+i])
			}
		}
		return b.String()
	}
	for v := 0; v < 256; v++ {
		var h Hash
		for i := range h {
			h[i] = byte(v + 37*i)
		}
		if got, want := h.String(), ref(h); got != want {
			t.Fatalf("%v: String = %s, want %s", h[:], got, want)
		}
	}
}
