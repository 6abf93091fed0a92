package datacache

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func FuzzParseName(f *testing.F) {
	h := hash.Chunk([]byte("seed"))
	f.Add(key{h: h, start: 0, len: 4 << 20}.String())
	f.Add(key{h: h, start: 123456, len: 1}.String())
	f.Add(h.String() + ".00.5")
	f.Add(h.String() + ".-1.5")
	f.Add(h.String() + ".1.0")
	f.Add("ABC.0.10")
	f.Add("fill-123")
	f.Fuzz(func(t *testing.T, name string) {
		k, err := parseName(name)
		if err != nil {
			if !errors.Is(err, errName) {
				t.Fatalf("error %v does not wrap errName", err)
			}
			return
		}
		if k.String() != name || k.len <= 0 || k.start < 0 {
			t.Fatalf("parseName(%q) = %+v, which does not round-trip", name, k)
		}
	})
}

// FuzzReadBytesRange asks for arbitrary ranges of a real xorb: chunk-aligned ones return the
// exact bytes, all others ErrBadRange, and nothing panics.
func FuzzReadBytesRange(f *testing.F) {
	o := buildXorb(f, 20, 40, 1<<10, 3<<10)
	c, _ := testCache(f, f.TempDir(), newFakeFetcher(o), 1<<20, 16<<10)
	boundary := map[int64]bool{0: true}
	for _, e := range o.l.StoredEnds {
		boundary[int64(e)] = true
	}
	area := int64(o.l.ChunkAreaLen())
	s, e := chunkRange(o.l, 3, 9)
	f.Add(int64(0), area)
	f.Add(s, e)
	f.Add(s+1, e)
	f.Add(int64(-5), int64(10))
	f.Add(area, area+100)
	f.Fuzz(func(t *testing.T, start, end int64) {
		got, err := c.ReadBytes(context.Background(), o.l, start, end)
		valid := start >= 0 && end > start && end <= area && boundary[start] && boundary[end]
		if !valid {
			if !errors.Is(err, ErrBadRange) {
				t.Fatalf("[%d,%d): got %v, want ErrBadRange", start, end, err)
			}
			return
		}
		if err != nil || !bytes.Equal(got, o.body[start:end]) {
			t.Fatalf("[%d,%d): %d bytes, %v", start, end, len(got), err)
		}
	})
}
