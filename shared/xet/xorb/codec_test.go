package xorb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"
)

func TestParseChunkHeader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want ChunkHeader
		err  error
	}{
		{"none", "000b0000000b0000", ChunkHeader{CompressedLen: 11, RawLen: 11, Scheme: None}, nil},
		{"lz4", "0010000001002000", ChunkHeader{CompressedLen: 16, RawLen: 0x2000, Scheme: LZ4}, nil},
		{"bg4 max", "0000000402000002", ChunkHeader{CompressedLen: MaxChunkBytes, RawLen: MaxChunkRaw, Scheme: BG4}, nil},
		{"version 1", "010b0000000b0000", ChunkHeader{}, ErrCorrupt},
		{"scheme 3", "000b0000030b0000", ChunkHeader{}, ErrCorrupt},
		{"scheme auto", "000b0000630b0000", ChunkHeader{}, ErrCorrupt},
		{"raw too large", "0010000001010002", ChunkHeader{}, ErrCorrupt},
		{"compressed too large", "0001000401000002", ChunkHeader{}, ErrCorrupt},
		{"none lengths differ", "000b0000000c0000", ChunkHeader{}, ErrCorrupt},
		{"truncated", "000b0000000b00", ChunkHeader{}, ErrCorrupt},
		{"empty", "", ChunkHeader{}, ErrCorrupt},
		{"footer", "584554424c4f4201", ChunkHeader{}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := unhex(t, tt.in)
			got, err := ParseChunkHeader(in)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
			if back := got.Append(nil); !bytes.Equal(back, in) {
				t.Fatalf("Append = %x, want %x", back, in)
			}
		})
	}
}

func TestXXH32(t *testing.T) {
	// Reference values of XXH32 with seed 0.
	tests := map[string]uint32{
		"":    0x02CC5D05,
		"a":   0x550D7456,
		"abc": 0x32D153FF,
		"Nobody inspects the spammish repetition": 0xE2293B2F,
	}
	for in, want := range tests {
		if got := xxh32([]byte(in)); got != want {
			t.Errorf("xxh32(%q) = %#08x, want %#08x", in, got, want)
		}
	}
}

func TestBG4Transpose(t *testing.T) {
	sizes := []int{}
	for n := 0; n < 80; n++ {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 1000, 4097, 65535, MaxChunkRaw)
	for _, n := range sizes {
		src := randomBytes(n, uint64(n))
		g := make([]byte, n)
		bg4Split(g, src)
		// Reference: group k is every 4th byte from k.
		var want []byte
		for k := 0; k < 4; k++ {
			for i := k; i < n; i += 4 {
				want = append(want, src[i])
			}
		}
		if !bytes.Equal(g, want) {
			t.Fatalf("n=%d: split %x, want %x", n, g, want)
		}
		back := make([]byte, n)
		bg4Join(back, g)
		if !bytes.Equal(back, src) {
			t.Fatalf("n=%d: join does not invert split", n)
		}
	}
}

func TestCompressRoundTrip(t *testing.T) {
	inputs := map[string][]byte{
		"empty":       {},
		"one byte":    {7},
		"five bytes":  []byte("hello"),
		"text 64K":    textLike(64<<10, 1),
		"text 64K+3":  textLike(64<<10+3, 2),
		"text 128K":   textLike(MaxChunkRaw, 3),
		"random 128K": randomBytes(MaxChunkRaw, 4),
		"floats 100K": floatLike(100_001, 5),
		"zeros 128K":  make([]byte, MaxChunkRaw),
	}
	for name, raw := range inputs {
		for _, s := range []Scheme{None, LZ4, BG4, Auto} {
			t.Run(name+"/"+s.String(), func(t *testing.T) {
				enc, used := AppendCompressed([]byte("prefix"), raw, s)
				if !bytes.HasPrefix(enc, []byte("prefix")) {
					t.Fatal("dst prefix lost")
				}
				enc = enc[6:]
				h, err := ParseChunkHeader(enc)
				if err != nil {
					t.Fatal(err)
				}
				if h.Scheme != used || int(h.RawLen) != len(raw) || h.Size() != len(enc) {
					t.Fatalf("header %+v, used %s, encoded %d bytes", h, used, len(enc))
				}
				if used != None && int(h.CompressedLen) >= len(raw) {
					t.Fatalf("kept %s although %d >= %d", used, h.CompressedLen, len(raw))
				}
				if s != Auto && used != s && used != None {
					t.Fatalf("asked %s, got %s", s, used)
				}
				out, err := DecodeChunk([]byte("x"), h, enc[HeaderSize:])
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out[1:], raw) || out[0] != 'x' {
					t.Fatal("round trip differs")
				}
			})
		}
	}
	// Incompressible data falls back to None; compressible data does not.
	if _, s := AppendCompressed(nil, randomBytes(1000, 9), LZ4); s != None {
		t.Errorf("random data kept %s", s)
	}
	if _, s := AppendCompressed(nil, textLike(1000, 9), LZ4); s != LZ4 {
		t.Errorf("text fell back to %s", s)
	}
}

func TestChooseScheme(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want Scheme
	}{
		{"text", textLike(64<<10, 1), LZ4},
		{"floats", floatLike(64<<10, 2), BG4},
		{"random", randomBytes(64<<10, 3), LZ4},
		{"empty", nil, LZ4},
		{"three bytes", []byte{0, 0xff, 0x0f}, LZ4},
		// Lane 0 is all 0x00 and the others all 0xff: maximal divergence, but every lane has
		// empty popcount bins, so upstream's NaN handling ignores all of them.
		{"degenerate lanes", bytes.Repeat([]byte{0, 0xff, 0xff, 0xff}, 1024), LZ4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ChooseScheme(tt.raw); got != tt.want {
				t.Fatalf("ChooseScheme = %s, want %s", got, tt.want)
			}
		})
	}
}

// lz4Frame compresses raw with pierrec's streaming writer and the given options.
func lz4Frame(t testing.TB, raw []byte, opts ...lz4.Option) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// linkedFrame hand-builds a frame of two dependent blocks: the second copies 12 bytes from the
// first block's output, then ends with literals. Decoded: "abcdefghijklmnop" + "efghijklmnop" + "vwxyz".
func linkedFrame(flg byte) []byte {
	desc := []byte{flg, 0x40}
	f := binary.LittleEndian.AppendUint32(nil, lz4Magic)
	f = append(f, desc...)
	f = append(f, byte(xxh32(desc)>>8))
	b1 := append([]byte{0xF0, 16 - 15}, "abcdefghijklmnop"...) // 16 literals, no match
	b2 := []byte{0x08, 12, 0, 0x50, 'v', 'w', 'x', 'y', 'z'}   // match len 12 at offset 12; then 5 literals
	for _, b := range [][]byte{b1, b2} {
		f = binary.LittleEndian.AppendUint32(f, uint32(len(b)))
		f = append(f, b...)
	}
	return binary.LittleEndian.AppendUint32(f, 0)
}

func TestDecodeLZ4Frames(t *testing.T) {
	text := textLike(MaxChunkRaw, 7)
	tests := []struct {
		name    string
		payload []byte
		raw     []byte
	}{
		{"pierrec default", lz4Frame(t, text), text},
		{"block checksums", lz4Frame(t, text, lz4.BlockChecksumOption(true)), text},
		{"content checksum off", lz4Frame(t, text, lz4.ChecksumOption(false)), text},
		{"content size", lz4Frame(t, text, lz4.SizeOption(uint64(len(text)))), text},
		{"256K blocks", lz4Frame(t, text, lz4.BlockSizeOption(lz4.Block256Kb)), text},
		{"4M blocks", lz4Frame(t, text, lz4.BlockSizeOption(lz4.Block4Mb)), text},
		{"incompressible", lz4Frame(t, randomBytes(5000, 1)), randomBytes(5000, 1)},
		{"linked blocks", linkedFrame(0x40), []byte("abcdefghijklmnopefghijklmnopvwxyz")},
		{"skippable then frame", append([]byte{0x5a, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 9, 9}, lz4Frame(t, text)...), text},
		{"two frames", append(lz4Frame(t, text[:1000]), lz4Frame(t, text[1000:])...), text},
		{"empty frame", lz4Frame(t, nil), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := ChunkHeader{CompressedLen: uint32(len(tt.payload)), RawLen: uint32(len(tt.raw)), Scheme: LZ4}
			out, err := DecodeChunk(nil, h, tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, tt.raw) {
				t.Fatal("decoded bytes differ")
			}
		})
	}
}

func TestDecodeChunkErrors(t *testing.T) {
	text := textLike(10000, 8)
	good := lz4Frame(t, text, lz4.BlockChecksumOption(true), lz4.ChecksumOption(true))
	mutate := func(b []byte, f func([]byte)) []byte { c := bytes.Clone(b); f(c); return c }
	// A frame that declares one byte more than it holds (with a valid header checksum).
	wrongSize := mutate(lz4Frame(t, text, lz4.SizeOption(uint64(len(text)))), func(b []byte) {
		binary.LittleEndian.PutUint64(b[6:], uint64(len(text)+1))
		b[14] = byte(xxh32(b[4:14]) >> 8)
	})
	hdr := func(raw int, s Scheme, payload []byte) ChunkHeader {
		return ChunkHeader{CompressedLen: uint32(len(payload)), RawLen: uint32(raw), Scheme: s}
	}
	tests := []struct {
		name    string
		h       ChunkHeader
		payload []byte
	}{
		{"raw length too small", hdr(len(text)-1, LZ4, good), good},
		{"raw length too large", hdr(len(text)+1, LZ4, good), good},
		{"bg4 wrong length", hdr(len(text)+1, BG4, good), good},
		{"bad magic", hdr(len(text), LZ4, good), mutate(good, func(b []byte) { b[0] ^= 1 })},
		{"bad header checksum", hdr(len(text), LZ4, good), mutate(good, func(b []byte) { b[6] ^= 1 })},
		{"bad flag version", hdr(len(text), LZ4, good), mutate(good, func(b []byte) { b[4] ^= 0x80 })},
		{"bad block checksum", hdr(len(text), LZ4, good), mutate(good, func(b []byte) { b[20] ^= 1 })},
		{"bad content checksum", hdr(len(text), LZ4, good), mutate(good, func(b []byte) { b[len(b)-1] ^= 1 })},
		{"truncated", hdr(len(text), LZ4, good[:len(good)-9]), good[:len(good)-9]},
		{"no frame", hdr(0, LZ4, nil), nil},
		{"garbage", hdr(100, LZ4, []byte(strings.Repeat("z", 50))), []byte(strings.Repeat("z", 50))},
		{"payload length differs", hdr(len(text), LZ4, good[:10]), good},
		{"linked without history", hdr(33, LZ4, linkedFrame(0x60)), linkedFrame(0x60)},
		{"dictionary id", hdr(1, LZ4, []byte{4, 0x22, 0x4d, 0x18, 0x41, 0x40, 0, 0, 0, 0, 0}),
			[]byte{4, 0x22, 0x4d, 0x18, 0x41, 0x40, 0, 0, 0, 0, 0}},
		{"content size wrong", hdr(len(text), LZ4, wrongSize), wrongSize},
		{"output into zero raw length", hdr(0, LZ4, good), good},
		{"linked output into zero raw length", hdr(0, LZ4, linkedFrame(0x40)), linkedFrame(0x40)},
		{"unknown scheme", hdr(len(text), Scheme(7), good), good},
		{"none size mismatch", ChunkHeader{CompressedLen: 3, RawLen: 4}, []byte("abc")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := DecodeChunk(nil, tt.h, tt.payload)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if cap(out) > int(tt.h.RawLen) {
				t.Fatalf("allocated %d bytes for a %d-byte chunk", cap(out), tt.h.RawLen)
			}
		})
	}
}

func FuzzParseChunkHeader(f *testing.F) {
	f.Add([]byte{0, 11, 0, 0, 0, 11, 0, 0})
	f.Add([]byte("XETBLOB\x01"))
	f.Add([]byte{0, 0, 0, 4, 2, 0, 0, 2})
	f.Add([]byte{0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseChunkHeader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if h.Check() != nil {
			t.Fatalf("accepted header fails Check: %+v", h)
		}
		if !bytes.Equal(h.Append(nil), b[:HeaderSize]) {
			t.Fatalf("Append does not reproduce %x", b[:HeaderSize])
		}
	})
}

func FuzzDecodeChunk(f *testing.F) {
	text := textLike(300, 3)
	f.Add(uint32(len(text)), uint8(LZ4), lz4Frame(f, text))
	f.Add(uint32(len(text)), uint8(LZ4), lz4Frame(f, text, lz4.BlockChecksumOption(true), lz4.SizeOption(300)))
	f.Add(uint32(33), uint8(LZ4), linkedFrame(0x40))
	bg4Raw := bytes.Repeat(floatLike(16, 1), 25)
	enc, s := AppendCompressed(nil, bg4Raw, BG4)
	if s != BG4 {
		f.Fatalf("BG4 seed compressed as %s", s)
	}
	f.Add(uint32(len(bg4Raw)), uint8(BG4), enc[HeaderSize:])
	f.Add(uint32(5), uint8(None), []byte("hello"))
	f.Fuzz(func(t *testing.T, rawLen uint32, scheme uint8, payload []byte) {
		h := ChunkHeader{CompressedLen: uint32(len(payload)), RawLen: rawLen, Scheme: Scheme(scheme)}
		out, err := DecodeChunk(nil, h, payload)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(out) != int(rawLen) {
			t.Fatalf("decoded %d bytes, header says %d", len(out), rawLen)
		}
	})
}
