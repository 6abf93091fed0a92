package xorb

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelloWorldBytes checks the byte-level example of docs/protocol.md §12.3.
func TestHelloWorldBytes(t *testing.T) {
	const wantBody = "000b0000000b000068656c6c6f20776f726c64"
	wantFooter := "584554424c4f4201" +
		"119f359d8b37394e0213441f7a559081d97ba0cf5f4ea519b151e66f460bf56c" +
		"58424c4248534800" + "01000000" +
		"119f359d8b37394e0213441f7a559081d97ba0cf5f4ea519b151e66f460bf56c" +
		"58424c42424e4401" + "01000000" + "13000000" + "0b000000" + "01000000" +
		"5c000000" + "30000000" + strings.Repeat("00", 16) + "84000000"

	body, l := buildBody(t, Auto, []byte("hello world"))
	if !bytes.Equal(body, unhex(t, wantBody)) {
		t.Fatalf("upload body %x, want %s", body, wantBody)
	}
	got, area, err := Validate(body, ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if area != 19 || got.Hash.String() != "4e39378b9d359f118190557a1f44130219a54e5fcfa07bd96cf50b466fe651b1" {
		t.Fatalf("area %d hash %s", area, got.Hash)
	}
	if got.Hash != l.Hash {
		t.Fatalf("builder hash %s, validated %s", l.Hash, got.Hash)
	}
	obj := AppendFooter(bytes.Clone(body), got, 0)
	want := unhex(t, wantBody+wantFooter)
	if !bytes.Equal(obj, want) {
		t.Fatalf("stored object\n got %x\nwant %x", obj, want)
	}
	if len(obj) != 155 || len(obj)-19 != FooterLen(1)+4 {
		t.Fatalf("object of %d bytes, FooterLen(1) = %d", len(obj), FooterLen(1))
	}
	parsed, err := ParseObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	assertLayoutEqual(t, parsed, got)
}

// TestUpstreamFooterExample mirrors xet-core test_uncompressed_xorb_object and
// test_default_xorb_object: 3 × 100-byte chunks with scheme None, and the empty footer length.
func TestUpstreamFooterExample(t *testing.T) {
	if FooterLen(0) != 92 {
		t.Fatalf("FooterLen(0) = %d", FooterLen(0))
	}
	body, l := buildBody(t, None, randomBytes(100, 1), randomBytes(100, 2), randomBytes(100, 3))
	want := []uint32{108, 216, 324}
	for i, e := range want {
		if l.StoredEnds[i] != e {
			t.Fatalf("stored ends %v, want %v", l.StoredEnds, want)
		}
	}
	if s, e := l.ByteRange(0, 1); s != 0 || e != 108 {
		t.Fatalf("ByteRange(0,1) = %d,%d", s, e)
	}
	if s, e := l.ByteRange(1, 3); s != 108 || e != 324 {
		t.Fatalf("ByteRange(1,3) = %d,%d", s, e)
	}
	v, _, err := Validate(body, ValidateOptions{Expect: &l.Hash})
	if err != nil {
		t.Fatal(err)
	}
	assertLayoutEqual(t, v, l)
	obj := AppendFooter(body, l, 0xdeadbeef)
	if len(obj) != 324+FooterLen(3)+4 {
		t.Fatalf("object length %d", len(obj))
	}
	p, err := ParseObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	assertLayoutEqual(t, p, l)
}

func assertLayoutEqual(t testing.TB, got, want *Layout) {
	t.Helper()
	if got.Hash != want.Hash || got.NumChunks() != want.NumChunks() {
		t.Fatalf("layout %s/%d chunks, want %s/%d", got.Hash, got.NumChunks(), want.Hash, want.NumChunks())
	}
	for i := range want.ChunkHashes {
		if got.ChunkHashes[i] != want.ChunkHashes[i] || got.StoredEnds[i] != want.StoredEnds[i] ||
			got.RawEnds[i] != want.RawEnds[i] {
			t.Fatalf("chunk %d: got %s %d %d, want %s %d %d", i, got.ChunkHashes[i], got.StoredEnds[i],
				got.RawEnds[i], want.ChunkHashes[i], want.StoredEnds[i], want.RawEnds[i])
		}
	}
}
