package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/xfertest"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// The JSON shapes of docs/protocol.md §2.3, decoded the way a client does.
type rangeJSON struct{ Start, End uint64 }

type reconV2 struct {
	Offset uint64 `json:"offset_into_first_range"`
	Terms  []struct {
		Hash           hash.Hash `json:"hash"`
		UnpackedLength uint64    `json:"unpacked_length"`
		Range          rangeJSON `json:"range"`
	} `json:"terms"`
	Xorbs map[string][]struct {
		URL    string `json:"url"`
		Ranges []struct {
			Chunks rangeJSON `json:"chunks"`
			Bytes  rangeJSON `json:"bytes"`
		} `json:"ranges"`
	} `json:"xorbs"`
}

type shardTerm = shard.Term

type reconV1 struct {
	Offset uint64 `json:"offset_into_first_range"`
	Terms  []struct {
		Hash           hash.Hash `json:"hash"`
		UnpackedLength uint64    `json:"unpacked_length"`
		Range          rangeJSON `json:"range"`
	} `json:"terms"`
	FetchInfo map[string][]struct {
		Range    rangeJSON `json:"range"`
		URL      string    `json:"url"`
		URLRange rangeJSON `json:"url_range"`
	} `json:"fetch_info"`
}

// fetch GETs a transfer URL with a Range header, without Authorization, like the client.
func (e *env) fetch(u string, rng string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// decodeChunks decompresses a run of serialized chunks.
func decodeChunks(t testing.TB, b []byte) []byte {
	t.Helper()
	var out []byte
	cr := xorb.NewChunkReader(bytes.NewReader(b))
	for {
		raw, _, err := cr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, raw...)
	}
}

// reconstructV2 downloads bytes [S,E] (rng "" = whole file) the way hf_xet does: one
// reconstruction call, then one single-range GET per fetch range.
func (e *env) reconstructV2(file hash.Hash, tok, rng string) []byte {
	e.t.Helper()
	var hdr []string
	if rng != "" {
		hdr = []string{"Range", rng}
	}
	var a reconV2
	body := expect(e.t, e.do("GET", "/v2/reconstructions/"+file.String(), tok, nil, hdr...), 200)
	if _, err := wire.DecodeV2(body); err != nil { // the stock client's shape rules
		e.t.Fatalf("answer breaks the client's rules: %v", err)
	}
	if err := json.Unmarshal(body, &a); err != nil {
		e.t.Fatal(err)
	}
	var out []byte
	for i, term := range a.Terms {
		var data []byte
		for _, entry := range a.Xorbs[term.Hash.String()] {
			for _, r := range entry.Ranges {
				if r.Chunks.Start <= term.Range.Start && term.Range.End <= r.Chunks.End {
					resp := e.fetch(entry.URL, fmt.Sprintf("bytes=%d-%d", r.Bytes.Start, r.Bytes.End))
					body := expect(e.t, resp, 206)
					chunks := decodeChunks(e.t, body)
					// Cut the term's chunks out of the fetched range.
					lo, hi := chunkOffsets(e, term.Hash, r.Chunks.Start, term.Range.Start, term.Range.End)
					data = chunks[lo:hi]
				}
			}
		}
		if uint64(len(data)) != term.UnpackedLength {
			e.t.Fatalf("term %d: %d bytes, unpacked_length %d", i, len(data), term.UnpackedLength)
		}
		if i == 0 {
			data = data[a.Offset:]
		}
		out = append(out, data...)
	}
	if rng != "" { // the client cuts the last term at the requested end
		var s, end uint64
		fmt.Sscanf(rng, "bytes=%d-%d", &s, &end)
		if want := end - s + 1; uint64(len(out)) > want {
			out = out[:want]
		}
	}
	return out
}

// chunkOffsets returns where chunks [a,b) start and end in the raw output of chunks from base.
func chunkOffsets(e *env, x hash.Hash, base, a, b uint64) (int, int) {
	m, err := e.idx.Layouts(e.t.Context(), []hash.Hash{x})
	if err != nil {
		e.t.Fatal(err)
	}
	l := m[x]
	at := func(i uint64) int {
		if i == 0 {
			return 0
		}
		return int(l.RawEnds[i-1])
	}
	return at(a) - at(base), at(b) - at(base)
}

func TestReconstruction(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testReconstruction(t, b) })
	}
}

func testReconstruction(t *testing.T, b backend) {
	e := newEnv(t, b)
	f := makeFixture(t, 20, 3, 7, 1000) // 21,000 bytes over 3 xorbs
	scope := "models/acme/recon"
	e.upload(f, scope)
	r := e.token(scope, auth.Read)
	if got := e.reconstructV2(f.file, r, ""); !bytes.Equal(got, f.data) {
		t.Fatalf("whole file: %d bytes differ from the %d uploaded", len(got), len(f.data))
	}
	n := len(f.data)
	for _, rg := range [][2]int{{0, 0}, {1, 999}, {999, 1000}, {500, 7500}, {6999, 7000}, {n - 1, n - 1}, {0, n - 1}, {12345, n + 5000}} {
		want := f.data[rg[0]:min(rg[1]+1, n)]
		got := e.reconstructV2(f.file, r, fmt.Sprintf("bytes=%d-%d", rg[0], rg[1]))
		if !bytes.Equal(got, want) {
			t.Fatalf("range %v: got %d bytes, want %d", rg, len(got), len(want))
		}
	}
	// Deterministic terms for the same range.
	a1 := expect(t, e.do("GET", "/v2/reconstructions/"+f.file.String(), r, nil, "Range", "bytes=100-9000"), 200)
	a2 := expect(t, e.do("GET", "/v2/reconstructions/"+f.file.String(), r, nil, "Range", "bytes=100-9000"), 200)
	var x1, x2 reconV2
	json.Unmarshal(a1, &x1)
	json.Unmarshal(a2, &x2)
	if fmt.Sprint(x1.Terms, x1.Offset) != fmt.Sprint(x2.Terms, x2.Offset) {
		t.Fatal("answers for the same range differ")
	}
	// v1: same terms, one fetch_info entry per merged range, each URL serving its url_range.
	var v1 reconV1
	if err := json.Unmarshal(expect(t, e.do("GET", "/v1/reconstructions/"+f.file.String(), r, nil), 200), &v1); err != nil {
		t.Fatal(err)
	}
	if len(v1.Terms) != 3 || len(v1.FetchInfo) != 3 {
		t.Fatalf("v1 answer %+v", v1)
	}
	for _, fis := range v1.FetchInfo {
		for _, fi := range fis {
			body := expect(t, e.fetch(fi.URL, fmt.Sprintf("bytes=%d-%d", fi.URLRange.Start, fi.URLRange.End)), 206)
			if uint64(len(body)) != fi.URLRange.End-fi.URLRange.Start+1 {
				t.Fatalf("v1 url_range served %d bytes", len(body))
			}
		}
	}

	file := "/v2/reconstructions/" + f.file.String()
	tests := []struct {
		name   string
		path   string
		token  string
		hdr    []string
		status int
	}{
		{"no token", file, "", nil, 401},
		{"other scope", file, e.token("models/acme/other", auth.Read), nil, 404},
		{"other scope v1", "/v1/reconstructions/" + f.file.String(), e.token("models/acme/other", auth.Read), nil, 404},
		{"unknown file", "/v2/reconstructions/" + hash.Chunk([]byte("nope")).String(), r, nil, 404},
		{"malformed id", "/v2/reconstructions/1234", r, nil, 400},
		{"past EOF", file, r, []string{"Range", fmt.Sprintf("bytes=%d-%d", n, n+10)}, 416},
		{"bad range", file, r, []string{"Range", "bytes=abc"}, 416},
		{"inverted range", file, r, []string{"Range", "bytes=10-5"}, 416},
		{"edge token reads its own scope only", file, e.token("models/acme/other", auth.Edge), nil, 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, e.do("GET", tc.path, tc.token, nil, tc.hdr...), tc.status)
		})
	}
	// The empty file exists everywhere and has no terms.
	var empty reconV2
	if err := json.Unmarshal(expect(t, e.do("GET", "/v2/reconstructions/"+hash.Zero.String(), r, nil, "Range", "bytes=0-0"), 200), &empty); err != nil || len(empty.Terms) != 0 {
		t.Fatalf("empty file: %+v %v", empty, err)
	}
}

// signedURL returns the transfer URL and its ranges from a whole-file v2 answer for a file with
// one xorb whose terms are not adjacent (so the entry has several ranges).
func TestTransferRoute(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	f := makeFixture(t, 21, 1, 12, 1000)
	// Two terms over chunks [0,3) and [6,9) of the one xorb: the v2 entry carries two ranges.
	l := f.layouts[0]
	sh := f.shard
	sh.Files[0].Terms = nil
	sh.Files[0].Verification = nil
	var leaves []hash.Leaf
	for _, r := range [][2]uint32{{0, 3}, {6, 9}} {
		sh.Files[0].Terms = append(sh.Files[0].Terms, termOf(l, r[0], r[1]))
		sh.Files[0].Verification = append(sh.Files[0].Verification, hash.Verification(l.ChunkHashes[r[0]:r[1]]))
		for c := r[0]; c < r[1]; c++ {
			leaves = append(leaves, hash.Leaf{Hash: l.ChunkHashes[c], Size: uint64(l.RawRange(c, c+1))})
		}
	}
	sh.Files[0].Hash = hash.File(leaves)
	f.file = sh.Files[0].Hash
	f.body = sh.AppendUpload(nil)
	e.upload(f, "s")
	var a reconV2
	if err := json.Unmarshal(expect(t, e.do("GET", "/v2/reconstructions/"+f.file.String(), e.token("s", auth.Read), nil), 200), &a); err != nil {
		t.Fatal(err)
	}
	entries := a.Xorbs[l.Hash.String()]
	if len(entries) != 1 || len(entries[0].Ranges) != 2 {
		t.Fatalf("fetch entries %+v", entries)
	}
	u := entries[0].URL
	r0, r1 := entries[0].Ranges[0].Bytes, entries[0].Ranges[1].Bytes
	obj := objectBytes(t, e, l.Hash)

	// Single range: exactly those bytes; a sub-range of a signed range is fine too.
	for _, rg := range []rangeJSON{r0, r1, {r0.Start + 1, r0.End - 1}} {
		resp := e.fetch(u, fmt.Sprintf("bytes=%d-%d", rg.Start, rg.End))
		body := expect(t, resp, 206)
		if !bytes.Equal(body, obj[rg.Start:rg.End+1]) {
			t.Fatalf("range %v: wrong bytes", rg)
		}
		if want := fmt.Sprintf("bytes %d-%d/%d", rg.Start, rg.End, len(obj)); resp.Header.Get("Content-Range") != want {
			t.Fatalf("Content-Range %q, want %q", resp.Header.Get("Content-Range"), want)
		}
		if resp.Request.Header.Get("Authorization") != "" {
			t.Fatal("transfer fetched with credentials")
		}
	}
	// Several ranges, in request order (second first): multipart/byteranges, one part each.
	resp := e.fetch(u, fmt.Sprintf("bytes=%d-%d,%d-%d", r1.Start, r1.End, r0.Start, r0.End))
	if resp.StatusCode != 206 {
		t.Fatalf("multi-range status %d", resp.StatusCode)
	}
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	for i, rg := range []rangeJSON{r1, r0} {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if want := fmt.Sprintf("bytes %d-%d/%d", rg.Start, rg.End, len(obj)); p.Header.Get("Content-Range") != want {
			t.Fatalf("part %d Content-Range %q, want %q", i, p.Header.Get("Content-Range"), want)
		}
		b, _ := io.ReadAll(p)
		if !bytes.Equal(b, obj[rg.Start:rg.End+1]) {
			t.Fatalf("part %d: wrong bytes", i)
		}
	}
	if _, err := mr.NextPart(); err != io.EOF {
		t.Fatalf("extra part: %v", err)
	}
	resp.Body.Close()
	// Overlapping and repeated ranges are coalesced: 200 copies of both signed ranges (and
	// sub-ranges of them) are answered as the two ranges, once each, in request order.
	var many []string
	for range 100 {
		many = append(many, fmt.Sprintf("%d-%d,%d-%d", r1.Start, r1.End, r0.Start+1, r0.End), fmt.Sprintf("%d-%d", r0.Start, r0.End-1))
	}
	resp = e.fetch(u, "bytes="+strings.Join(many, ","))
	body := expect(t, resp, 206)
	_, params, _ = mime.ParseMediaType(resp.Header.Get("Content-Type"))
	mr = multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for i, rg := range []rangeJSON{r1, r0} {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatalf("coalesced part %d: %v", i, err)
		}
		if want := fmt.Sprintf("bytes %d-%d/%d", rg.Start, rg.End, len(obj)); p.Header.Get("Content-Range") != want {
			t.Fatalf("coalesced part %d Content-Range %q, want %q", i, p.Header.Get("Content-Range"), want)
		}
	}
	if _, err := mr.NextPart(); err != io.EOF {
		t.Fatalf("coalesced answer: extra part: %v", err)
	}
	if span := r0.End - r0.Start + 1 + r1.End - r1.Start + 1; uint64(len(body)) > span+512 {
		t.Fatalf("coalesced answer of %d bytes for a signed span of %d", len(body), span)
	}

	parsed, _ := url.Parse(u)
	q := parsed.Query()
	tampered := func(k, v string) string {
		q2, _ := url.ParseQuery(parsed.RawQuery)
		q2.Set(k, v)
		p := *parsed
		p.RawQuery = q2.Encode()
		return p.String()
	}
	gap := r0.End + 1 // a byte between the two signed ranges
	tests := []struct {
		name string
		url  string
		rng  string
		want int
	}{
		{"outside the signed set", u, fmt.Sprintf("bytes=%d-%d", gap, gap), 403},
		{"spanning the gap", u, fmt.Sprintf("bytes=%d-%d", r0.Start, r1.End), 403},
		{"whole object unsigned", u, "", 403},
		{"tampered ranges", tampered("r", fmt.Sprintf("0-%d", len(obj)-1)), "bytes=0-10", 403},
		{"tampered expiry", tampered("x", fmt.Sprint(time.Now().Add(48*time.Hour).Unix())), fmt.Sprintf("bytes=%d-%d", r0.Start, r0.End), 403},
		{"tampered signature", tampered("s", strings.Repeat("A", len(q.Get("s")))), fmt.Sprintf("bytes=%d-%d", r0.Start, r0.End), 403},
		{"other xorb", strings.Replace(u, l.Hash.String(), hash.Chunk([]byte("x")).String(), 1), fmt.Sprintf("bytes=%d-%d", r0.Start, r0.End), 403},
		{"bad range", u, "bytes=x-y", 416},
		{"more parts than signed ranges and than urlsign.MinParts", u, xfertest.ManyParts(urlsign.MinParts+1, r0.Start), 416},
		{"past the object", u, fmt.Sprintf("bytes=%d-%d", len(obj)+10, len(obj)+20), 416},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { expect(t, e.fetch(tc.url, tc.rng), tc.want) })
	}
	// Expired: the same URL after its lifetime.
	e.clock.Add(e.cfg.Auth.TransferURLTTL.D() + time.Second)
	expect(t, e.fetch(u, fmt.Sprintf("bytes=%d-%d", r0.Start, r0.End)), 403)
}

func termOf(l *xorb.Layout, a, b uint32) shardTerm {
	return shardTerm{Xorb: l.Hash, RawBytes: l.RawRange(a, b), Start: a, End: b}
}

// objectBytes reads the whole stored object of a xorb through the internal API.
func objectBytes(t *testing.T, e *env, x hash.Hash) []byte {
	return expect(t, e.do("GET", "/internal/v1/xorbs/"+x.String(), e.token("", auth.Edge), nil), 200)
}
