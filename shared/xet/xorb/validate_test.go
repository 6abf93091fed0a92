package xorb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestFramesReadByStandardDecoder checks that the frames we write are standard LZ4 frames.
func TestFramesReadByStandardDecoder(t *testing.T) {
	raw := textLike(MaxChunkRaw, 11)
	enc, s := AppendCompressed(nil, raw, LZ4)
	if s != LZ4 {
		t.Fatalf("scheme %s", s)
	}
	got, err := io.ReadAll(lz4.NewReader(bytes.NewReader(enc[HeaderSize:])))
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("pierrec reader: %v, equal %v", err, bytes.Equal(got, raw))
	}
}

func mixedChunks() [][]byte {
	return [][]byte{textLike(70_000, 1), floatLike(65_536, 2), randomBytes(9_000, 3), []byte("x"),
		textLike(MaxChunkRaw, 4), make([]byte, 100_000)}
}

func TestValidateRoundTrip(t *testing.T) {
	for _, s := range []Scheme{None, LZ4, BG4, Auto} {
		t.Run(s.String(), func(t *testing.T) {
			chunks := mixedChunks()
			body, want := buildBody(t, s, chunks...)
			if err := want.Verify(); err != nil {
				t.Fatal(err)
			}
			for _, workers := range []int{0, 1, 2, 3, 16, -1} {
				got, area, err := Validate(body, ValidateOptions{Expect: &want.Hash, Workers: workers})
				if err != nil {
					t.Fatalf("workers %d: %v", workers, err)
				}
				if area != len(body) {
					t.Fatalf("area %d of %d", area, len(body))
				}
				assertLayoutEqual(t, got, want)
			}
			var leaves []hash.Leaf
			for _, c := range chunks {
				leaves = append(leaves, hash.Leaf{Hash: hash.Chunk(c), Size: uint64(len(c))})
			}
			if want.Hash != hash.Merkle(leaves) {
				t.Fatal("builder hash differs from merkle of the chunks")
			}
		})
	}
}

func TestValidateLegacyFooter(t *testing.T) {
	body, l := buildBody(t, LZ4, mixedChunks()...)
	for name, withFooter := range map[string][]byte{
		"v1": AppendFooter(bytes.Clone(body), l, 42),
		"v0": appendFooterV0(bytes.Clone(body), l),
	} {
		for _, workers := range []int{1, 4} {
			got, area, err := Validate(withFooter, ValidateOptions{Expect: &l.Hash, Workers: workers})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if area != len(body) {
				t.Fatalf("%s: area %d, want %d", name, area, len(body))
			}
			assertLayoutEqual(t, got, l)
		}
	}
}

// chunkNone serializes raw uncompressed.
func chunkNone(raw []byte) []byte {
	return append(ChunkHeader{CompressedLen: uint32(len(raw)), RawLen: uint32(len(raw))}.Append(nil), raw...)
}

func TestValidateErrors(t *testing.T) {
	body, l := buildBody(t, LZ4, textLike(5000, 1), textLike(6000, 2), textLike(7000, 3))
	good := AppendFooter(bytes.Clone(body), l, 0)
	footer := good[len(body):]
	mutate := func(b []byte, at int, f func([]byte)) []byte { c := bytes.Clone(b); f(c[at:]); return c }
	otherLayout := func() []byte {
		_, ol := buildBody(t, LZ4, textLike(5000, 1), textLike(6000, 2), textLike(7001, 3))
		return AppendFooter(bytes.Clone(body), ol, 0)
	}()

	// 8193 one-byte chunks, and 513 chunks of 128 KiB of zeros (compressed).
	var many []byte
	for i := 0; i <= MaxChunks; i++ {
		many = append(many, chunkNone([]byte{byte(i)})...)
	}
	var huge []byte
	zeros, _ := AppendCompressed(nil, make([]byte, MaxChunkRaw), LZ4)
	for i := 0; i <= MaxRawBytes/MaxChunkRaw; i++ {
		huge = append(huge, zeros...)
	}
	wrongHash := hash.Chunk([]byte("nope"))

	tests := []struct {
		name   string
		body   []byte
		expect *hash.Hash
		err    error
	}{
		{"empty", nil, nil, ErrEmpty},
		{"footer only", footer, nil, ErrEmpty},
		{"truncated header", body[:5], nil, ErrCorrupt},
		{"truncated payload", body[:len(body)-1], nil, ErrCorrupt},
		{"trailing garbage", append(bytes.Clone(body), "garbage!"...), nil, ErrCorrupt},
		{"trailing short garbage", append(bytes.Clone(body), 0, 1, 2), nil, ErrCorrupt},
		{"bad version", mutate(body, 0, func(b []byte) { b[0] = 1 }), nil, ErrCorrupt},
		{"bad scheme", mutate(body, 0, func(b []byte) { b[4] = 99 }), nil, ErrCorrupt},
		{"raw length too big", mutate(body, 0, func(b []byte) { b[7] = 3 }), nil, ErrCorrupt},
		{"raw length off by one", mutate(body, 0, func(b []byte) { b[5]++ }), nil, ErrCorrupt},
		{"compressed length past end", mutate(body, 0, func(b []byte) { b[3] = 2 }), nil, ErrCorrupt},
		{"bad lz4", mutate(body, 12, func(b []byte) { b[0] ^= 0xff }), nil, ErrCorrupt},
		{"too many chunks", many, nil, ErrTooLarge},
		{"too many raw bytes", huge, nil, ErrTooLarge},
		{"hash mismatch", body, &wrongHash, ErrHashMismatch},
		{"footer truncated", good[:len(good)-1], nil, ErrCorrupt},
		{"footer plus garbage", append(bytes.Clone(good), 0), nil, ErrCorrupt},
		{"footer version 2", mutate(good, len(body)+7, func(b []byte) { b[0] = 2 }), nil, ErrCorrupt},
		{"footer bad hash ident", mutate(good, len(body)+40, func(b []byte) { b[0] = 'Y' }), nil, ErrCorrupt},
		{"footer bad count", mutate(good, len(body)+48, func(b []byte) { b[0] = 4 }), nil, ErrCorrupt},
		{"footer wrong hash", mutate(good, len(body)+8, func(b []byte) { b[0] ^= 1 }), nil, ErrCorrupt},
		{"footer wrong boundary", mutate(good, len(body)+52+96+12, func(b []byte) { b[0]++ }), nil, ErrCorrupt},
		{"footer of other layout", otherLayout, nil, ErrCorrupt},
		{"footer bad info length", mutate(good, len(good)-4, func(b []byte) { b[0]++ }), nil, ErrCorrupt},
		{"footer huge count", mutate(good, len(body)+48, func(b []byte) { binary.LittleEndian.PutUint32(b, 1<<31) }), nil, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, workers := range []int{1, 2} {
				l, area, err := Validate(tt.body, ValidateOptions{Expect: tt.expect, Workers: workers})
				if !errors.Is(err, tt.err) {
					t.Fatalf("workers %d: err = %v, want %v", workers, err, tt.err)
				}
				if l != nil || area != 0 {
					t.Fatal("result returned with an error")
				}
			}
		})
	}
}

func FuzzValidate(f *testing.F) {
	body, l := buildBody(f, Auto, textLike(300, 1), floatLike(200, 2), []byte("tail"))
	f.Add(body)
	f.Add(AppendFooter(bytes.Clone(body), l, 7))
	f.Add(appendFooterV0(bytes.Clone(body), l))
	f.Add(unhex(f, "000b0000000b000068656c6c6f20776f726c64"))
	f.Add([]byte("XETBLOB\x01"))
	f.Fuzz(func(t *testing.T, body []byte) {
		l1, a1, err1 := Validate(body, ValidateOptions{})
		l2, a2, err2 := Validate(body, ValidateOptions{Workers: 3})
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("serial %v, parallel %v", err1, err2)
		}
		// The streaming validator accepts exactly the same bodies, read in uneven pieces, and
		// writes exactly their chunk area.
		l3, a3, wrote, err3 := streamOf(body, nil, 1+len(body)%97, 4096, 3)
		if (err1 == nil) != (err3 == nil) {
			t.Fatalf("Validate %v, ValidateStream %v", err1, err3)
		}
		if err3 != nil && !errors.Is(err3, ErrCorrupt) && !errors.Is(err3, ErrEmpty) && !errors.Is(err3, ErrTooLarge) {
			t.Fatalf("ValidateStream: untyped error %v", err3)
		}
		// So does the in-place one, in a buffer with room to spare, leaving the chunk area at
		// its start.
		l4, a4, held, err4 := inPlaceOf(body, len(body)+1, nil, 1+len(body)%89, 4096, 5)
		if (err1 == nil) != (err4 == nil) {
			t.Fatalf("Validate %v, ValidateStreamInPlace %v", err1, err4)
		}
		if err1 == nil && (int64(a1) != a4 || l1.Hash != l4.Hash || !bytes.Equal(held[:a4], body[:a1])) {
			t.Fatal("Validate and ValidateStreamInPlace disagree")
		}
		if err1 != nil {
			if !errors.Is(err1, ErrCorrupt) && !errors.Is(err1, ErrEmpty) && !errors.Is(err1, ErrTooLarge) {
				t.Fatalf("untyped error %v", err1)
			}
			return
		}
		if a1 != a2 || l1.Hash != l2.Hash {
			t.Fatal("serial and parallel disagree")
		}
		if int64(a1) != a3 || l1.Hash != l3.Hash || !bytes.Equal(wrote, body[:a1]) {
			t.Fatal("Validate and ValidateStream disagree")
		}
		assertLayoutEqual(t, l3, l1)
		if err := l1.Verify(); err != nil {
			t.Fatalf("validated layout does not verify: %v", err)
		}
		if err := VerifyRange(body[:a1], l1, 0, uint32(l1.NumChunks())); err != nil {
			t.Fatalf("validated body fails VerifyRange: %v", err)
		}
	})
}

// TestValidateInPlaceNoneChunks: validation hashes uncompressed chunks where they lie in the
// body (issue 13); the chunks decoded after them must still go to a buffer of their own. A xorb
// alternating None and LZ4 chunks validates, on one goroutine and on several, to the builder's
// layout and leaves the body byte for byte as it was.
func TestValidateInPlaceNoneChunks(t *testing.T) {
	b := NewBuilder(LZ4) // falls back to None for the random chunks
	for i := range 12 {
		c := textLike(20<<10+i*97, uint64(i))
		if i%2 == 0 {
			c = randomBytes(30<<10+i*89, uint64(i))
		}
		if !b.Add(c, hash.Chunk(c)) {
			t.Fatal("builder refused chunk")
		}
	}
	body, want := b.Finish()
	schemes := map[Scheme]int{}
	for pos := 0; pos < len(body); {
		h, err := ParseChunkHeader(body[pos:])
		if err != nil {
			t.Fatal(err)
		}
		schemes[h.Scheme]++
		pos += h.Size()
	}
	if schemes[None] == 0 || schemes[LZ4] == 0 {
		t.Fatalf("want both None and LZ4 chunks, have %v", schemes)
	}
	orig := bytes.Clone(body)
	for _, workers := range []int{1, 2} {
		got, _, err := Validate(body, ValidateOptions{Expect: &want.Hash, Workers: workers})
		if err != nil {
			t.Fatalf("workers %d: %v", workers, err)
		}
		assertLayoutEqual(t, got, want)
		if !bytes.Equal(body, orig) {
			t.Fatalf("workers %d: validation changed the body", workers)
		}
	}
}
