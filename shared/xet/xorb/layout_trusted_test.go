package xorb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// fullLayout builds a valid layout of n chunks of 100 raw bytes (stored 108 bytes each) whose
// hash is the merkle hash of its chunks.
func fullLayout(n int) *Layout {
	l := &Layout{ChunkHashes: make([]hash.Hash, n), StoredEnds: make([]uint32, n), RawEnds: make([]uint32, n)}
	leaves := make([]hash.Leaf, n)
	for i := range n {
		binary.LittleEndian.PutUint64(l.ChunkHashes[i][:], uint64(i)*0x9e3779b97f4a7c15+1)
		l.StoredEnds[i] = uint32(i+1) * (HeaderSize + 100)
		l.RawEnds[i] = uint32(i+1) * 100
		leaves[i] = hash.Leaf{Hash: l.ChunkHashes[i], Size: 100}
	}
	l.Hash = hash.Merkle(leaves)
	return l
}

func TestUnmarshalLayoutTrusted(t *testing.T) {
	_, l := buildBody(t, Auto, mixedChunks()...)
	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalLayoutTrusted(b)
	if err != nil {
		t.Fatal(err)
	}
	assertLayoutEqual(t, got, l)

	put := func(at int, v uint32) []byte { c := bytes.Clone(b); binary.LittleEndian.PutUint32(c[at:], v); return c }
	flip := func(at int) []byte { c := bytes.Clone(b); c[at] ^= 1; return c }
	n := l.NumChunks()
	tests := []struct {
		name string
		in   []byte
		// trusted: the trusted decode accepts it (only the merkle hash is wrong); the verifying
		// decode must reject every case.
		trusted bool
	}{
		{"empty", nil, false},
		{"bad version", append([]byte{2}, b[1:]...), false},
		{"count too small", put(1, uint32(n-1)), false},
		{"count too large", put(1, uint32(n+1)), false},
		{"count huge", put(1, 1<<31), false},
		{"count zero", put(1, 0), false},
		{"truncated", b[:len(b)-1], false},
		{"extra byte", append(bytes.Clone(b), 0), false},
		{"stored ends shrink", put(37+32*n+4, 1), false},
		{"stored end inside header", put(37+32*n, HeaderSize-1), false},
		{"raw end too big", put(37+36*n, MaxChunkRaw+1), false},
		{"raw ends shrink", put(37+36*n+4, 0), false},
		{"wrong xorb hash", flip(5), true},
		{"wrong chunk hash", flip(37), true},
		{"raw size changed", put(37+36*n, binary.LittleEndian.Uint32(b[37+36*n:])-1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if l, err := UnmarshalLayout(tt.in); !errors.Is(err, ErrCorrupt) || l != nil {
				t.Fatalf("UnmarshalLayout: err = %v, want ErrCorrupt", err)
			}
			l, err := UnmarshalLayoutTrusted(tt.in)
			if !tt.trusted {
				if !errors.Is(err, ErrCorrupt) || l != nil {
					t.Fatalf("UnmarshalLayoutTrusted: err = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("UnmarshalLayoutTrusted: %v, want the layout (merkle not rechecked)", err)
			}
			if again, _ := l.MarshalBinary(); !bytes.Equal(again, tt.in) {
				t.Fatalf("trusted decode does not round trip")
			}
			if err := l.Verify(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify of the trusted decode = %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzUnmarshalLayoutTrusted checks that the trusted decode accepts exactly what the verifying
// one accepts plus encodings whose only fault is the merkle hash, with the same result.
func FuzzUnmarshalLayoutTrusted(f *testing.F) {
	_, l := buildBody(f, Auto, textLike(300, 1), floatLike(200, 2), []byte("tail"))
	b, _ := l.MarshalBinary()
	f.Add(b)
	bad := bytes.Clone(b)
	bad[40] ^= 0x80
	f.Add(bad)
	f.Add(b[:37])
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		tl, terr := UnmarshalLayoutTrusted(b)
		vl, verr := UnmarshalLayout(b)
		if terr != nil {
			if !errors.Is(terr, ErrCorrupt) || tl != nil {
				t.Fatalf("untyped error %v", terr)
			}
			if verr == nil {
				t.Fatalf("verifying decode accepts what the trusted one rejects: %v", terr)
			}
			return
		}
		again, err := tl.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatal("accepted encoding does not round trip")
		}
		if (verr == nil) != (tl.Verify() == nil) {
			t.Fatalf("verifying decode: %v, Verify of the trusted decode: %v", verr, tl.Verify())
		}
		if verr == nil {
			assertLayoutEqual(t, tl, vl)
		}
	})
}

func BenchmarkUnmarshalLayoutFull(b *testing.B) {
	enc, err := fullLayout(MaxChunks).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		fn   func([]byte) (*Layout, error)
	}{{"verified", UnmarshalLayout}, {"trusted", UnmarshalLayoutTrusted}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			done := startCPU(b, time.Microsecond, "cpu-us/op")
			for b.Loop() {
				if _, err := bc.fn(enc); err != nil {
					b.Fatal(err)
				}
			}
			done()
		})
	}
}
