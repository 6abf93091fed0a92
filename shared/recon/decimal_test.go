package recon

import (
	"bytes"
	"math"
	"strconv"
	"testing"
)

func TestAppendUint(t *testing.T) {
	vals := []uint64{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1023, 65535, 1 << 26, math.MaxUint32, math.MaxUint64}
	for p := uint64(1); p <= 1e19; p *= 10 {
		vals = append(vals, p-1, p, p+1)
		if p > math.MaxUint64/10 {
			break
		}
	}
	for _, v := range vals {
		for _, prefix := range [][]byte{nil, []byte("x"), make([]byte, 3, 4)} {
			want := strconv.AppendUint(append([]byte(nil), prefix...), v, 10)
			got := appendUint(append([]byte(nil), prefix...), v)
			if !bytes.Equal(got, want) {
				t.Errorf("appendUint(%q, %d) = %q, want %q", prefix, v, got, want)
			}
		}
		if got, want := decimalLen(v), len(strconv.FormatUint(v, 10)); got != want {
			t.Errorf("decimalLen(%d) = %d, want %d", v, got, want)
		}
	}
}

func FuzzAppendUint(f *testing.F) {
	for _, v := range []uint64{0, 7, 42, 12345, 1 << 40, math.MaxUint64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint64) {
		if got, want := appendUint([]byte("a"), v), strconv.AppendUint([]byte("a"), v, 10); !bytes.Equal(got, want) {
			t.Fatalf("appendUint(%d) = %q, want %q", v, got, want)
		}
	})
}

// slowNeedsEscape is needsEscape's definition, one byte at a time.
func slowNeedsEscape(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return true
		}
	}
	return false
}

func TestNeedsEscape(t *testing.T) {
	base := []byte("https://edge.example.org/v1/x/0123456789abcdef?r=0-1,2-3&sig=AbC_-~%2F")
	if needsEscape(base) {
		t.Fatalf("plain URL reported as needing escapes")
	}
	// Every byte value at every position of a 17-byte window (two words and a tail).
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 17; pos++ {
			s := append([]byte(nil), base[:17]...)
			s[pos] = byte(c)
			if got, want := needsEscape(s), slowNeedsEscape(s); got != want {
				t.Fatalf("byte %#x at %d: needsEscape = %v, want %v", c, pos, got, want)
			}
		}
	}
}

func FuzzNeedsEscape(f *testing.F) {
	f.Add([]byte("https://t/abc?r=1-2"))
	f.Add([]byte("a\"b"))
	f.Add([]byte("0123456789\x1f"))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, s []byte) {
		if got, want := needsEscape(s), slowNeedsEscape(s); got != want {
			t.Fatalf("needsEscape(%q) = %v, want %v", s, got, want)
		}
	})
}
