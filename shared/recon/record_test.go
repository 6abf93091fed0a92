package recon

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func TestFileRecordRoundTrip(t *testing.T) {
	rec, _, _ := fixture(t)
	sha := hash.FromSHA256([32]byte{1, 2, 3})
	withSHA := *rec
	withSHA.SHA256 = &sha
	r := rand.New(rand.NewPCG(3, 4))
	big, _ := randomFile(r)
	tests := []struct {
		name string
		rec  *FileRecord
	}{
		{"empty", &FileRecord{}},
		{"fixture", rec},
		{"fixture with sha256", &withSHA},
		{"random", big},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.rec.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			got, err := UnmarshalFileRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			want := *tc.rec
			if len(want.Terms) == 0 {
				want.Terms = []Term{}
			}
			if !reflect.DeepEqual(exported(got), exported(&want)) {
				t.Fatalf("round trip:\n got  %+v\n want %+v", got, &want)
			}
			// Compactness: the xorb table keeps terms far below their 52-byte in-memory size.
			if n := len(tc.rec.Terms); n > 0 && len(b) > 2+64+10+32*n+16*n {
				t.Errorf("%d terms encode to %d bytes", n, len(b))
			}
		})
	}
}

// exported is f without its derived term index, for comparing records by content.
func exported(f *FileRecord) FileRecord {
	return FileRecord{Hash: f.Hash, Size: f.Size, SHA256: f.SHA256, Terms: f.Terms}
}

func TestUnmarshalFileRecordRejects(t *testing.T) {
	rec, _, _ := fixture(t)
	good, err := rec.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// Offsets in good: version 0, flags 1, hash 2..34, size varint 34..36 (1560), xorb count 36.
	hdr := func(size uint64, nx, nt uint64) []byte {
		b := []byte{recordVersion, 0}
		b = append(b, make([]byte, 32)...)
		b = binary.AppendUvarint(b, size)
		b = binary.AppendUvarint(b, nx)
		b = append(b, make([]byte, 32*min(nx, 2))...)
		return binary.AppendUvarint(b, nt)
	}
	term := func(b []byte, v ...uint64) []byte {
		for _, x := range v {
			b = binary.AppendUvarint(b, x)
		}
		return b
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"nil", nil},
		{"short", good[:10]},
		{"bad version", append([]byte{9}, good[1:]...)},
		{"bad flags", append([]byte{recordVersion, 0x80}, good[2:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"huge xorb count", hdr(0, 1<<40, 0)},
		{"huge term count", hdr(10, 1, 1<<40)},
		{"terms without xorbs", term(hdr(10, 0, 1), 0, 0, 1, 10, 0, 8)},
		{"unused xorbs", hdr(0, 2, 0)},
		{"xorb index out of range", term(hdr(10, 1, 1), 1, 0, 1, 10, 0, 8)},
		{"empty chunk range", term(hdr(10, 1, 1), 0, 0, 0, 10, 0, 8)},
		{"too many chunks", term(hdr(10, 1, 1), 0, 8190, 5, 10, 0, 40)},
		{"zero raw bytes", term(hdr(0, 1, 1), 0, 0, 1, 0, 0, 8)},
		{"byte range shorter than headers", term(hdr(10, 1, 1), 0, 0, 2, 10, 0, 15)},
		{"size mismatch", term(hdr(11, 1, 1), 0, 0, 1, 10, 0, 8)},
		{"u32 overflow", term(hdr(10, 1, 1), 0, 1<<32, 1, 10, 0, 8)},
		{"end overflow", term(hdr(10, 1, 1), 0, 1<<32-1, 1, 10, 0, 8)},
		{"byte end overflow", term(hdr(10, 1, 1), 0, 0, 1, 10, 1<<32-1, 8)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := UnmarshalFileRecord(tc.data); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
	// The builders above do produce an acceptable record when the values are right.
	if _, err := UnmarshalFileRecord(term(hdr(10, 1, 1), 0, 0, 1, 10, 0, 8)); err != nil {
		t.Fatalf("valid hand-built record rejected: %v", err)
	}
}

func TestMarshalBinaryRejectsInvalid(t *testing.T) {
	rec, _, _ := fixture(t)
	bad := *rec
	bad.Size++
	if _, err := bad.MarshalBinary(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func FuzzUnmarshalFileRecord(f *testing.F) {
	rec, _, _ := fixture(f)
	good, _ := rec.MarshalBinary()
	empty, _ := (&FileRecord{}).MarshalBinary()
	f.Add(good)
	f.Add(empty)
	f.Add(good[:len(good)/2])
	f.Add(marshalScrambled(f, rec, rand.New(rand.NewPCG(1, 1))))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := UnmarshalFileRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// Anything accepted re-encodes and decodes to the same record, and plans without
		// panicking (no layouts: only untrimmed answers succeed).
		b, err := rec.MarshalBinary()
		if err != nil {
			t.Fatalf("accepted record does not re-encode: %v", err)
		}
		again, err := UnmarshalFileRecord(b)
		if err != nil || !reflect.DeepEqual(exported(again), exported(rec)) {
			t.Fatalf("re-encoding changed the record: %v", err)
		}
		a, err := Plan(rec, nil, nil)
		if err != nil {
			t.Fatalf("whole-file plan of a valid record: %v", err)
		}
		// The decoded term index (whatever the xorb table's order or repeats) plans like an
		// index built from the terms alone.
		literal := exported(rec)
		if want, err := Plan(&literal, nil, nil); err != nil || !sameAnswer(a, want) {
			t.Fatalf("decoded index plans differently from the terms: %v", err)
		}
	})
}
