// Package xfertest holds what the origin's and the edge's tests of transfer URLs share: the
// signed URLs of a file's reconstruction answers, Range headers that attack them, and the
// checks that one signed URL answers those attacks as it must.
package xfertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Fetch is one transfer URL of a reconstruction answer with the byte range it was signed for
// (the entry's first).
type Fetch struct {
	URL        string
	Start, End uint64
}

// Range is the Range header value of f's signed range.
func (f Fetch) Range() string { return fmt.Sprintf("bytes=%d-%d", f.Start, f.End) }

// Len is the length in bytes of f's signed range.
func (f Fetch) Len() uint64 { return f.End - f.Start + 1 }

// Fetches returns every transfer URL of file's v2 and v1 reconstruction answers from base;
// get GETs a URL with the reader's token and returns the status and body.
func Fetches(t testing.TB, get func(url string) (int, []byte), base string, file hash.Hash) []Fetch {
	t.Helper()
	st, body := get(base + "/v2/reconstructions/" + file.String())
	if st != http.StatusOK {
		t.Fatalf("v2 reconstruction of %s: %d %s", file, st, body)
	}
	var v2 wire.QueryReconstructionResponseV2
	if err := json.Unmarshal(body, &v2); err != nil {
		t.Fatal(err)
	}
	var out []Fetch
	for _, es := range v2.Xorbs {
		for _, e := range es {
			out = append(out, Fetch{e.URL, e.Ranges[0].Bytes.Start, e.Ranges[0].Bytes.End})
		}
	}
	st, body = get(base + "/v1/reconstructions/" + file.String())
	if st != http.StatusOK {
		t.Fatalf("v1 reconstruction of %s: %d %s", file, st, body)
	}
	var v1 wire.QueryReconstructionResponse
	if err := json.Unmarshal(body, &v1); err != nil {
		t.Fatal(err)
	}
	for _, es := range v1.FetchInfo {
		for _, e := range es {
			out = append(out, Fetch{e.URL, e.URLRange.Start, e.URLRange.End})
		}
	}
	if len(out) == 0 {
		t.Fatalf("file %s: no transfer URL", file)
	}
	return out
}

// ManyParts is a Range header of n one-byte ranges two bytes apart from start (never coalesced).
func ManyParts(n int, start uint64) string {
	specs := make([]string, n)
	for i := range specs {
		b := start + 2*uint64(i)
		specs[i] = fmt.Sprintf("%d-%d", b, b)
	}
	return "bytes=" + strings.Join(specs, ",")
}

// BoundedGet GETs u with c and a Range header and reads at most limit bytes of the answer (an
// unbounded answer is cut, not read: its Content-Length tells its size).
func BoundedGet(t testing.TB, c *http.Client, u, rangeHdr string, limit uint64) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Range", rangeHdr)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)))
	if err != nil {
		t.Fatalf("GET %s: read body: %v", u, err)
	}
	return resp.StatusCode, b, resp.Header
}

// Status GETs f's signed range with c and returns the status, checking the length of a 206.
func Status(t testing.TB, c *http.Client, f Fetch) int {
	t.Helper()
	st, body, _ := BoundedGet(t, c, f.URL, f.Range(), f.Len()+1)
	if st == http.StatusPartialContent && uint64(len(body)) != f.Len() {
		t.Fatalf("GET %s: %d bytes, want %d", f.URL, len(body), f.Len())
	}
	return st
}

// CheckRangeAttacks runs the Range attacks of issue 9 item 6 on f's URL with c: 200 overlapping
// copies of its full signed span answer the span once (206), and more parts than the URL has
// signed ranges (here one) and than urlsign.MinParts (16) are refused with 416. It returns the
// header of the answer to the overlapping copies.
func CheckRangeAttacks(t testing.TB, c *http.Client, f Fetch) http.Header {
	t.Helper()
	span := f.Len()
	spec := strings.TrimPrefix(f.Range(), "bytes=")
	hdr := "bytes=" + strings.Repeat(spec+",", 199) + spec
	st, body, h := BoundedGet(t, c, f.URL, hdr, 2*span)
	cl, _ := strconv.ParseUint(h.Get("Content-Length"), 10, 64)
	t.Logf("200 copies of a %d-byte signed span: %d, %d bytes (Content-Length %d)", span, st, len(body), cl)
	if st != http.StatusPartialContent || uint64(len(body)) != span || cl != span {
		t.Fatalf("200 overlapping ranges of the %d-byte span: status %d, %d bytes (Content-Length %d), want 206 with the span once",
			span, st, len(body), cl)
	}
	if st, b, _ := BoundedGet(t, c, f.URL, ManyParts(17, f.Start), 1<<20); st != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("17 disjoint parts of a one-range URL: %d %.200s, want 416", st, b)
	}
	return h
}
