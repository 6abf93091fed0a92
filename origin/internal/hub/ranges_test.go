package hub

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWindowWriter feeds a stream in pieces of every size to windows at every offset: the bytes
// passed on are exactly the window, and the writer stops right after it.
func TestWindowWriter(t *testing.T) {
	data := make([]byte, 97)
	for i := range data {
		data[i] = byte(i)
	}
	for piece := 1; piece <= 13; piece += 3 {
		for start := 0; start < len(data); start += 7 {
			for _, n := range []int{1, 5, 31, len(data) - start} {
				if start+n > len(data) {
					continue
				}
				var out bytes.Buffer
				ww := &windowWriter{w: &out, skip: int64(start), left: int64(n)}
				var err error
				for off := 0; off < len(data) && err == nil; off += piece {
					_, err = ww.Write(data[off:min(off+piece, len(data))])
				}
				if !errors.Is(err, errWindowFull) || !bytes.Equal(out.Bytes(), data[start:start+n]) {
					t.Fatalf("piece %d window %d+%d: err %v, got %v", piece, start, n, err, out.Bytes())
				}
			}
		}
	}
}

func TestRangeOf(t *testing.T) {
	const etag = `"abc"`
	for _, c := range []struct {
		rng, ifRange string
		want         window
		cr           string
		err          bool
	}{
		{"", "", window{n: 100}, "", false},
		{"bytes=10-19", "", window{start: 10, n: 10, partial: true}, "bytes 10-19/100", false},
		{"bytes=90-", "", window{start: 90, n: 10, partial: true}, "bytes 90-99/100", false},
		{"bytes=-5", "", window{start: 95, n: 5, partial: true}, "bytes 95-99/100", false},
		{"bytes=95-1000", "", window{start: 95, n: 5, partial: true}, "bytes 95-99/100", false},
		{"bytes=100-", "", window{}, "bytes */100", true},
		{"bytes=0-1,5-6", "", window{n: 100}, "", false}, // several ranges: ignored
		{"items=0-1", "", window{n: 100}, "", false},     // another unit: ignored
		{"bytes=5-1", "", window{n: 100}, "", false},     // malformed: ignored
		{"bytes=10-19", etag, window{start: 10, n: 10, partial: true}, "bytes 10-19/100", false},
		{"bytes=10-19", `"other"`, window{n: 100}, "", false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		if c.rng != "" {
			r.Header.Set("Range", c.rng)
		}
		if c.ifRange != "" {
			r.Header.Set("If-Range", c.ifRange)
		}
		w := httptest.NewRecorder()
		got, err := rangeOf(w, r, etag, 100)
		if (err != nil) != c.err || (err != nil && !errors.Is(err, errRangeNotSatisfiable)) || got != c.want ||
			w.Header().Get("Content-Range") != c.cr {
			t.Errorf("Range %q If-Range %q: %+v, %v, Content-Range %q; want %+v, error %v, %q", c.rng, c.ifRange, got, err,
				w.Header().Get("Content-Range"), c.want, c.err, c.cr)
		}
	}
}
