package xorb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func TestParseObject(t *testing.T) {
	body, l := buildBody(t, Auto, mixedChunks()...)
	v1 := AppendFooter(bytes.Clone(body), l, 0x01020304)
	if got := binary.LittleEndian.Uint32(v1[len(v1)-4-16:]); got != 0x01020304 {
		t.Fatalf("nonce %#x", got)
	}
	v0 := appendFooterV0(bytes.Clone(body), l)
	for name, obj := range map[string][]byte{"v1": v1, "legacy v0": v0} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseObject(obj)
			if err != nil {
				t.Fatal(err)
			}
			assertLayoutEqual(t, got, l)
			n, err := TrailerLen(obj[len(obj)-4:])
			if err != nil || n != len(obj)-len(body) {
				t.Fatalf("TrailerLen = %d, %v; want %d", n, err, len(obj)-len(body))
			}
			fl, used, err := ParseFooter(obj[len(obj)-n-5:])
			if err != nil || used != n || fl.Hash != l.Hash {
				t.Fatalf("ParseFooter: %v used %d", err, used)
			}
		})
	}
	// The footer round trips: parse, re-serialize, same bytes.
	got, _ := ParseObject(v1)
	if again := AppendFooter(bytes.Clone(body), got, 0x01020304); !bytes.Equal(again, v1) {
		t.Fatal("footer does not round trip")
	}
}

func TestParseObjectErrors(t *testing.T) {
	body, l := buildBody(t, LZ4, textLike(5000, 1), textLike(6000, 2), textLike(7000, 3))
	obj := AppendFooter(bytes.Clone(body), l, 0)
	f := len(body) // footer start
	n := 3
	b := f + 52 + 32*n // boundary section
	set := func(at int, v ...byte) []byte { c := bytes.Clone(obj); copy(c[at:], v); return c }
	put := func(at int, v uint32) []byte {
		c := bytes.Clone(obj)
		binary.LittleEndian.PutUint32(c[at:], v)
		return c
	}
	v0 := appendFooterV0(bytes.Clone(body), l)
	tests := []struct {
		name string
		obj  []byte
		err  error
	}{
		{"empty", nil, ErrCorrupt},
		{"only length", []byte{92, 0, 0, 0}, ErrCorrupt},
		{"chunks without footer", body, ErrCorrupt},
		{"info length too big", put(len(obj)-4, uint32(len(obj))), ErrCorrupt},
		{"info length huge", put(len(obj)-4, 1<<31), ErrCorrupt},
		{"info length short", put(len(obj)-4, uint32(FooterLen(n)-40)), ErrCorrupt},
		{"bad ident", set(f, 'Y'), ErrCorrupt},
		{"bad version", set(f+7, 2), ErrCorrupt},
		{"bad hash section ident", set(f+40, 'Y'), ErrCorrupt},
		{"bad hash section version", set(f+47, 1), ErrCorrupt},
		{"count 2 wrong", put(f+48, 2), ErrCorrupt},
		{"count 2 huge", put(f+48, 1<<30), ErrCorrupt},
		{"bad boundary ident", set(b, 'Y'), ErrCorrupt},
		{"bad boundary version", set(b+7, 0), ErrCorrupt},
		{"count 3 wrong", put(b+8, 2), ErrCorrupt},
		{"count 4 wrong", put(b+12+8*n, 4), ErrCorrupt},
		{"hashes offset wrong", put(b+16+8*n, 52+40*3+1), ErrCorrupt},
		{"boundary offset wrong", put(b+20+8*n, 40+8*3-1), ErrCorrupt},
		{"boundary not increasing", put(b+12+4, 3), ErrCorrupt},
		{"boundary disagrees with header", put(b+12, binary.LittleEndian.Uint32(obj[b+12:])+1), ErrCorrupt},
		{"last boundary not footer start", put(b+12+8, uint32(len(body)-1)), ErrCorrupt},
		{"raw end disagrees with header", put(b+12+4*n, 5001), ErrCorrupt},
		{"wrong xorb hash", set(f+8, obj[f+8]^1), ErrCorrupt},
		{"wrong chunk hash", set(f+52, obj[f+52]^1), ErrCorrupt},
		{"v0 wrong count", func() []byte { c := bytes.Clone(v0); binary.LittleEndian.PutUint32(c[f+40:], 2); return c }(), ErrCorrupt},
		{"v0 wrong hash", func() []byte { c := bytes.Clone(v0); c[f+8] ^= 1; return c }(), ErrCorrupt},
		{"corrupt chunk header", set(0, 1), ErrCorrupt},
		{"zero chunks", AppendFooter(nil, &Layout{}, 0), ErrEmpty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := ParseObject(tt.obj)
			if !errors.Is(err, tt.err) || l != nil {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestLayoutBinary(t *testing.T) {
	_, l := buildBody(t, Auto, mixedChunks()...)
	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 37+40*l.NumChunks() {
		t.Fatalf("encoding of %d bytes", len(b))
	}
	got, err := UnmarshalLayout(b)
	if err != nil {
		t.Fatal(err)
	}
	assertLayoutEqual(t, got, l)

	put := func(at int, v uint32) []byte { c := bytes.Clone(b); binary.LittleEndian.PutUint32(c[at:], v); return c }
	n := l.NumChunks()
	tests := map[string][]byte{
		"empty":              nil,
		"bad version":        append([]byte{2}, b[1:]...),
		"count too small":    put(1, uint32(n-1)),
		"count too large":    put(1, uint32(n+1)),
		"count huge":         put(1, 1<<31),
		"count zero":         put(1, 0),
		"truncated":          b[:len(b)-1],
		"extra byte":         append(bytes.Clone(b), 0),
		"wrong xorb hash":    func() []byte { c := bytes.Clone(b); c[5] ^= 1; return c }(),
		"wrong chunk hash":   func() []byte { c := bytes.Clone(b); c[37] ^= 1; return c }(),
		"stored ends shrink": put(37+32*n+4, 1),
		"raw end too big":    put(37+36*n, MaxChunkRaw+1),
		"raw size changed":   put(37+36*n, binary.LittleEndian.Uint32(b[37+36*n:])-1),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if l, err := UnmarshalLayout(in); !errors.Is(err, ErrCorrupt) || l != nil {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
	if _, err := (&Layout{ChunkHashes: make([]hash.Hash, 2)}).MarshalBinary(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("inconsistent layout marshalled: %v", err)
	}
}

func TestChunkReader(t *testing.T) {
	chunks := mixedChunks()
	body, l := buildBody(t, Auto, chunks...)
	obj := AppendFooter(bytes.Clone(body), l, 0)
	for name, r := range map[string]io.Reader{
		"body":        bytes.NewReader(body),
		"object":      bytes.NewReader(obj),
		"one byte":    iotest.OneByteReader(bytes.NewReader(obj)),
		"data errors": iotest.DataErrReader(bytes.NewReader(body)),
	} {
		t.Run(name, func(t *testing.T) {
			cr := NewChunkReader(r)
			for i, want := range chunks {
				raw, h, err := cr.Next()
				if err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
				if !bytes.Equal(raw, want) || int(h.RawLen) != len(want) {
					t.Fatalf("chunk %d differs", i)
				}
				if cr.Offset() != int64(l.StoredEnds[i]) {
					t.Fatalf("offset %d after chunk %d, want %d", cr.Offset(), i, l.StoredEnds[i])
				}
			}
			for range 2 {
				if _, _, err := cr.Next(); err != io.EOF {
					t.Fatalf("after last chunk: %v, want io.EOF", err)
				}
			}
		})
	}
	for name, in := range map[string][]byte{
		"truncated header":  body[:3],
		"truncated payload": body[:l.StoredEnds[0]-1],
		"bad header":        append(bytes.Clone(body[:l.StoredEnds[0]]), 1, 2, 3, 4, 5, 6, 7, 8),
	} {
		t.Run(name, func(t *testing.T) {
			cr := NewChunkReader(bytes.NewReader(in))
			var err error
			for err == nil {
				_, _, err = cr.Next()
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
	readErr := errors.New("disk on fire")
	_, _, err := NewChunkReader(iotest.ErrReader(readErr)).Next()
	if !errors.Is(err, readErr) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("read error not passed through: %v", err)
	}
}

func TestVerifyRange(t *testing.T) {
	body, l := buildBody(t, Auto, mixedChunks()...)
	n := uint32(l.NumChunks())
	for a := uint32(0); a < n; a++ {
		for b := a + 1; b <= n; b++ {
			s, e := l.ByteRange(a, b)
			if err := VerifyRange(body[s:e], l, a, b); err != nil {
				t.Fatalf("[%d,%d): %v", a, b, err)
			}
		}
	}
	s, e := l.ByteRange(1, 3)
	part := body[s:e]
	flip := func(at int) []byte { c := bytes.Clone(part); c[at] ^= 1; return c }
	// Two chunks with the same sizes but different contents: a decodable wrong range.
	swapped, sl := buildBody(t, None, randomBytes(100, 1), randomBytes(100, 2))
	other, _ := buildBody(t, None, randomBytes(100, 1), randomBytes(100, 3))
	tests := []struct {
		name string
		data []byte
		l    *Layout
		a, b uint32
		err  error
	}{
		{"one byte short", part[:len(part)-1], l, 1, 3, ErrCorrupt},
		{"one byte long", append(bytes.Clone(part), 0), l, 1, 3, ErrCorrupt},
		{"wrong range", part, l, 0, 2, ErrCorrupt},
		{"empty range", nil, l, 2, 2, ErrCorrupt},
		{"past end", part, l, 1, n + 1, ErrCorrupt},
		{"corrupt header", flip(5), l, 1, 3, ErrCorrupt},
		{"corrupt frame", func() []byte { c := bytes.Clone(body[:l.StoredEnds[0]]); c[HeaderSize] ^= 1; return c }(), l, 0, 1, ErrCorrupt},
		{"corrupt uncompressed chunk", flip(HeaderSize), l, 1, 3, ErrHashMismatch},
		{"other content", other, sl, 0, 2, ErrHashMismatch},
		{"itself", swapped, sl, 0, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyRange(tt.data, tt.l, tt.a, tt.b)
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestBuilderLimits(t *testing.T) {
	b := NewBuilder(LZ4)
	if b.Add(nil, hash.Chunk(nil)) || b.Add(make([]byte, MaxChunkRaw+1), hash.Zero) {
		t.Fatal("accepted an empty or oversized chunk")
	}
	big := make([]byte, MaxChunkRaw)
	h := hash.Chunk(big)
	for i := 0; i < MaxRawBytes/MaxChunkRaw; i++ {
		if !b.Add(big, h) {
			t.Fatalf("refused chunk %d", i)
		}
	}
	if b.Add([]byte{1}, hash.Chunk([]byte{1})) || b.RawLen() != MaxRawBytes {
		t.Fatal("accepted a byte past MaxRawBytes")
	}
	body, l := b.Finish()
	if _, _, err := Validate(body, ValidateOptions{Expect: &l.Hash, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	if b.NumChunks() != 0 || b.RawLen() != 0 {
		t.Fatal("Finish did not reset")
	}
	one := []byte{1}
	for i := 0; i < MaxChunks; i++ {
		if !b.Add(one, hash.Chunk(one)) {
			t.Fatalf("refused chunk %d", i)
		}
	}
	if b.Add(one, hash.Chunk(one)) {
		t.Fatal("accepted chunk past MaxChunks")
	}
	body2, l2 := b.Finish()
	if _, _, err := Validate(body2, ValidateOptions{Expect: &l2.Hash}); err != nil {
		t.Fatal(err)
	}
	if len(body) == 0 || &body[0] == &body2[0] {
		t.Fatal("Finish results alias each other")
	}
}

// TestBuilderRetest checks the per-run scheme choice: the first chunk of each run of
// RetestInterval chunks decides, and StartFile starts a new run.
func TestBuilderRetest(t *testing.T) {
	text, floats := textLike(20_000, 1), floatLike(20_000, 2)
	schemes := func(body []byte) (out []Scheme) {
		for pos := 0; pos < len(body); {
			h, err := ParseChunkHeader(body[pos:])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, h.Scheme)
			pos += h.Size()
		}
		return out
	}
	b := NewBuilder(Auto)
	b.Add(text, hash.Chunk(text))
	for i := 1; i < RetestInterval+1; i++ {
		b.Add(floats, hash.Chunk(floats))
	}
	b.StartFile()
	b.Add(text, hash.Chunk(text))
	body, _ := b.Finish()
	got := schemes(body)
	// Run 1 was decided by text: LZ4 (None where LZ4 does not help the floats). Run 2 starts
	// with floats: BG4. StartFile starts run 3 with text: LZ4.
	if len(got) != RetestInterval+2 || got[0] != LZ4 || got[RetestInterval] != BG4 || got[RetestInterval+1] != LZ4 {
		t.Fatalf("schemes %v", got)
	}
	for i, s := range got[1:RetestInterval] {
		if s != LZ4 && s != None {
			t.Fatalf("chunk %d: %s in an LZ4 run", i+1, s)
		}
	}
}

func FuzzParseObject(f *testing.F) {
	body, l := buildBody(f, Auto, textLike(300, 1), floatLike(200, 2), []byte("tail"))
	f.Add(AppendFooter(bytes.Clone(body), l, 7))
	f.Add(appendFooterV0(bytes.Clone(body), l))
	f.Add(unhex(f, "000b0000000b000068656c6c6f20776f726c64"))
	f.Add([]byte{92, 0, 0, 0})
	f.Fuzz(func(t *testing.T, obj []byte) {
		l, err := ParseObject(obj)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrEmpty) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if err := l.Verify(); err != nil {
			t.Fatalf("accepted object has an inconsistent layout: %v", err)
		}
		if len(obj) != int(l.ChunkAreaLen())+FooterLen(l.NumChunks())+4 &&
			len(obj) != int(l.ChunkAreaLen())+60+36*l.NumChunks()+4 {
			t.Fatal("accepted object of the wrong length")
		}
	})
}

func FuzzUnmarshalLayout(f *testing.F) {
	_, l := buildBody(f, Auto, textLike(300, 1), floatLike(200, 2), []byte("tail"))
	b, _ := l.MarshalBinary()
	f.Add(b)
	f.Add(b[:37])
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := UnmarshalLayout(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := l.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatal("accepted encoding does not round trip")
		}
	})
}

// TestVerifierReuse: one Verifier, its hasher and decode buffer kept between calls, gives the
// same answers as VerifyRange across ranges, layouts and failures in any order: a failed call
// (wrong content, a corrupt frame) leaves nothing behind that changes the next answer.
func TestVerifierReuse(t *testing.T) {
	body, l := buildBody(t, Auto, mixedChunks()...)
	other, ol := buildBody(t, None, randomBytes(100, 1), randomBytes(100, 3))
	s, e := l.ByteRange(1, 3)
	bad := bytes.Clone(body[s:e])
	bad[HeaderSize] ^= 1
	frame := bytes.Clone(body[:l.StoredEnds[0]])
	frame[HeaderSize] ^= 1
	var v Verifier
	n := uint32(l.NumChunks())
	for a := uint32(0); a < n; a++ {
		for b := a + 1; b <= n; b++ {
			if err := v.VerifyRange(bad, l, 1, 3); !errors.Is(err, ErrHashMismatch) {
				t.Fatalf("corrupt chunk: err = %v, want ErrHashMismatch", err)
			}
			if err := v.VerifyRange(frame, l, 0, 1); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("corrupt frame: err = %v, want ErrCorrupt", err)
			}
			if err := v.VerifyRange(other, ol, 0, 2); err != nil {
				t.Fatalf("other layout: %v", err)
			}
			s, e := l.ByteRange(a, b)
			if err := v.VerifyRange(body[s:e], l, a, b); err != nil {
				t.Fatalf("[%d,%d) after other calls: %v", a, b, err)
			}
		}
	}
}
