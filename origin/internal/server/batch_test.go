package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// batchTerm and batchFetch are the v1 term and fetch_info shapes, decoded like a client does.
type batchTerm struct {
	Hash           hash.Hash `json:"hash"`
	UnpackedLength uint64    `json:"unpacked_length"`
	Range          rangeJSON `json:"range"`
}

type batchFetch struct {
	Range    rangeJSON `json:"range"`
	URL      string    `json:"url"`
	URLRange rangeJSON `json:"url_range"`
}

type batchAnswer struct {
	Files     map[string][]batchTerm  `json:"files"`
	FetchInfo map[string][]batchFetch `json:"fetch_info"`
}

// chunkPart is chunks [a, b) of xorb x of an uploaded fixture whose chunks are all chunkSize.
type chunkPart struct {
	f     *fixture
	x     int
	a, b  uint32
	chunk int
}

// composeFile uploads (with a write token for scope) a shard with one file made of parts,
// whose xorbs are already stored, and returns the file's id and bytes.
func (e *env) composeFile(scope string, parts ...chunkPart) (hash.Hash, []byte) {
	e.t.Helper()
	var sf shard.File
	var leaves []hash.Leaf
	var data []byte
	for _, p := range parts {
		l := p.f.layouts[p.x]
		sf.Terms = append(sf.Terms, termOf(l, p.a, p.b))
		sf.Verification = append(sf.Verification, hash.Verification(l.ChunkHashes[p.a:p.b]))
		base := p.x * l.NumChunks()
		for c := p.a; c < p.b; c++ {
			leaves = append(leaves, hash.Leaf{Hash: l.ChunkHashes[c], Size: uint64(l.RawRange(c, c+1))})
			off := (base + int(c)) * p.chunk
			data = append(data, p.f.data[off:off+p.chunk]...)
		}
	}
	sf.Hash = hash.File(leaves)
	sh := &shard.Shard{Files: []shard.File{sf}}
	expect(e.t, e.do("POST", "/v1/shards", e.token(scope, auth.Write), sh.AppendUpload(nil)), 200)
	return sf.Hash, data
}

// single is GET /v1/reconstructions/{id} decoded.
func (e *env) single(id hash.Hash, tok string) reconV1 {
	e.t.Helper()
	var a reconV1
	if err := json.Unmarshal(expect(e.t, e.do("GET", "/v1/reconstructions/"+id.String(), tok, nil), 200), &a); err != nil {
		e.t.Fatal(err)
	}
	return a
}

func batchQuery(ids ...hash.Hash) string {
	q := url.Values{}
	for _, h := range ids {
		q.Add("file_id", h.String())
	}
	return "/v1/reconstructions?" + q.Encode()
}

func batchBody(ids ...hash.Hash) []byte {
	type key struct {
		Prefix string `json:"prefix"`
		Hash   string `json:"hash"`
	}
	keys := []key{}
	for _, h := range ids {
		keys = append(keys, key{"default", h.String()})
	}
	b, _ := json.Marshal(keys)
	return b
}

func TestBatchReconstruction(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testBatchReconstruction(t, b) })
	}
}

func testBatchReconstruction(t *testing.T, b backend) {
	e := newEnv(t, b)
	const scope = "models/acme/batch"
	fa := makeFixture(t, 31, 2, 5, 1000) // 2 xorbs of 5 chunks
	fb := makeFixture(t, 32, 1, 6, 1000)
	e.upload(fa, scope)
	e.upload(fb, scope)
	// c repeats a's and b's whole terms (identical fetch entries); d takes parts of the same
	// xorbs (different, overlapping entries) and one xorb twice.
	c, cData := e.composeFile(scope, chunkPart{fa, 0, 0, 5, 1000}, chunkPart{fb, 0, 0, 6, 1000}, chunkPart{fa, 1, 0, 5, 1000})
	d, dData := e.composeFile(scope, chunkPart{fa, 0, 1, 3, 1000}, chunkPart{fb, 0, 2, 5, 1000}, chunkPart{fa, 0, 3, 5, 1000})
	want := map[hash.Hash][]byte{fa.file: fa.data, fb.file: fb.data, c: cData, d: dData, hash.Zero: nil}
	ids := []hash.Hash{fa.file, fb.file, c, d, hash.Zero}
	tok := e.token(scope, auth.Read)

	get := expect(t, e.do("GET", batchQuery(append(ids, fa.file, d)...), tok, nil), 200)
	post := expect(t, e.do("POST", "/v1/reconstructions", tok, batchBody(append(ids, c)...)), 200)
	obj := `{"file_ids":` + string(batchBody(ids...)) + `}`
	postObj := expect(t, e.do("POST", "/v1/reconstructions", tok, []byte(obj)), 200)
	// The test clock stands still, so the URLs are identical too.
	if !bytes.Equal(get, post) || !bytes.Equal(get, postObj) {
		t.Fatalf("GET and POST answers differ:\n%s\n%s\n%s", get, post, postObj)
	}
	var a batchAnswer
	if err := json.Unmarshal(get, &a); err != nil {
		t.Fatal(err)
	}
	if len(a.Files) != len(ids) {
		t.Fatalf("%d files answered, want %d (repeats answered once)", len(a.Files), len(ids))
	}
	wantFetch := map[string][]batchFetch{}
	for _, id := range ids {
		one := e.single(id, tok)
		terms := a.Files[id.String()]
		if fmt.Sprint(terms) != fmt.Sprint(one.Terms) {
			t.Fatalf("file %s: batch terms %v, single v1 terms %v", id, terms, one.Terms)
		}
		for x, fis := range one.FetchInfo {
			for _, fi := range fis {
				wantFetch[x] = append(wantFetch[x], batchFetch{Range: fi.Range, URLRange: fi.URLRange})
			}
		}
		if got := e.downloadBatch(a, id); !bytes.Equal(got, want[id]) {
			t.Fatalf("file %s: reconstructed %d bytes that differ from the %d uploaded", id, len(got), len(want[id]))
		}
	}
	// fetch_info is the union of the single answers' entries, each once.
	if len(a.FetchInfo) != len(wantFetch) {
		t.Fatalf("fetch_info has %d xorbs, want %d", len(a.FetchInfo), len(wantFetch))
	}
	for x, fis := range a.FetchInfo {
		var got []batchFetch
		for _, fi := range fis {
			if fi.URL == "" {
				t.Fatalf("xorb %s: entry without URL", x)
			}
			got = append(got, batchFetch{Range: fi.Range, URLRange: fi.URLRange})
		}
		w := wantFetch[x]
		slices.SortFunc(w, func(p, q batchFetch) int { return strings.Compare(fmt.Sprint(p), fmt.Sprint(q)) })
		w = slices.Compact(w)
		slices.SortFunc(got, func(p, q batchFetch) int { return strings.Compare(fmt.Sprint(p), fmt.Sprint(q)) })
		if !reflect.DeepEqual(got, w) {
			t.Fatalf("xorb %s: entries %v, want the deduplicated union %v", x, got, w)
		}
	}
	// a's first xorb is used by a, c and d: its entries are a's (and c's) [0,5) and d's [1,5)
	// (d's two terms [1,3) and [3,5) touch, so its own answer merges them).
	if n := len(a.FetchInfo[fa.layouts[0].Hash.String()]); n != 2 {
		t.Fatalf("shared xorb has %d entries, want 2", n)
	}
}

// downloadBatch rebuilds file id from a batch answer like a v1 client: for each term, the
// fetch entry that covers it, fetched from its URL with its url_range, chunks cut to the term.
func (e *env) downloadBatch(a batchAnswer, id hash.Hash) []byte {
	e.t.Helper()
	var out []byte
	terms, ok := a.Files[id.String()]
	if !ok {
		e.t.Fatalf("file %s missing from the answer", id)
	}
	for _, t := range terms {
		var fi *batchFetch
		for i, cand := range a.FetchInfo[t.Hash.String()] {
			if cand.Range.Start <= t.Range.Start && t.Range.End <= cand.Range.End {
				fi = &a.FetchInfo[t.Hash.String()][i]
				break
			}
		}
		if fi == nil {
			e.t.Fatalf("file %s: term %+v covered by no fetch entry", id, t)
		}
		body := expect(e.t, e.fetch(fi.URL, fmt.Sprintf("bytes=%d-%d", fi.URLRange.Start, fi.URLRange.End)), 206)
		cr := xorb.NewChunkReader(bytes.NewReader(body))
		var raw []byte
		for c := fi.Range.Start; c < fi.Range.End; c++ {
			chunk, _, err := cr.Next()
			if err != nil {
				e.t.Fatalf("file %s: chunk %d of %s: %v", id, c, t.Hash, err)
			}
			if c >= t.Range.Start && c < t.Range.End {
				raw = append(raw, chunk...)
			}
		}
		if _, _, err := cr.Next(); err != io.EOF {
			e.t.Fatalf("file %s: url_range holds more than the entry's chunks (%v)", id, err)
		}
		if uint64(len(raw)) != t.UnpackedLength {
			e.t.Fatalf("file %s: term %+v decoded to %d bytes", id, t, len(raw))
		}
		out = append(out, raw...)
	}
	return out
}

func TestBatchReconstructionErrors(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	const scope = "models/acme/batch"
	fa := makeFixture(t, 41, 2, 3, 500) // 2 terms
	fb := makeFixture(t, 42, 1, 3, 500) // 1 term
	fo := makeFixture(t, 43, 1, 2, 500)
	e.upload(fa, scope)
	e.upload(fb, scope)
	e.upload(fo, "models/acme/other")
	tok := e.token(scope, auth.Read)
	expired, _, err := e.keys.Signing.Mint(scope, auth.Read, e.clock.Now().Add(-2*3600e9), 3600e9)
	if err != nil {
		t.Fatal(err)
	}
	unknown := hash.Chunk([]byte("no such file"))
	a, bb := fa.file.String(), fb.file.String()
	many := make([]hash.Hash, e.cfg.Limits.BatchFiles+1)
	for i := range many {
		many[i] = fa.file // repeats count toward the limit
	}
	tests := []struct {
		name, method, path string
		body               string
		token              string
		status             int
		code               string
	}{
		{"get ok", "GET", "/v1/reconstructions?file_id=" + a + "&file_id=" + bb, "", tok, 200, ""},
		{"get other params ignored", "GET", "/v1/reconstructions?x=1&file_id=" + a, "", tok, 200, ""},
		{"get no file", "GET", "/v1/reconstructions", "", tok, 400, "bad_request"},
		{"get empty file_id", "GET", "/v1/reconstructions?file_id=", "", tok, 400, "bad_hash"},
		{"get bad hash", "GET", "/v1/reconstructions?file_id=" + a + "&file_id=1234", "", tok, 400, "bad_hash"},
		{"get non-hex", "GET", "/v1/reconstructions?file_id=" + strings.Repeat("g", 64), "", tok, 400, "bad_hash"},
		{"get bad escape", "GET", "/v1/reconstructions?file_id=%zz", "", tok, 400, "bad_request"},
		{"get too many", "GET", batchQuery(many...), "", tok, 413, "too_large"},
		{"get unknown file", "GET", "/v1/reconstructions?file_id=" + a + "&file_id=" + unknown.String(), "", tok, 404, "not_found"},
		{"get other scope's file", "GET", "/v1/reconstructions?file_id=" + a + "&file_id=" + fo.file.String(), "", tok, 404, "not_found"},
		{"get no token", "GET", "/v1/reconstructions?file_id=" + a, "", "", 401, "unauthorized"},
		{"get expired token", "GET", "/v1/reconstructions?file_id=" + a, "", expired, 401, "token_expired"},
		{"get write token reads", "GET", "/v1/reconstructions?file_id=" + a, "", e.token(scope, auth.Write), 200, ""},
		{"post ok", "POST", "/v1/reconstructions", string(batchBody(fa.file, fb.file)), tok, 200, ""},
		{"post empty list", "POST", "/v1/reconstructions", "[]", tok, 400, "bad_request"},
		{"post empty object", "POST", "/v1/reconstructions", "{}", tok, 400, "bad_request"},
		{"post empty body", "POST", "/v1/reconstructions", "", tok, 400, "bad_request"},
		{"post null", "POST", "/v1/reconstructions", "null", tok, 400, "bad_request"},
		{"post bare strings", "POST", "/v1/reconstructions", `["` + a + `"]`, tok, 400, "bad_request"},
		{"post truncated", "POST", "/v1/reconstructions", `[{"prefix":"default","hash":"` + a, tok, 400, "bad_request"},
		{"post trailing data", "POST", "/v1/reconstructions", string(batchBody(fa.file)) + "x", tok, 400, "bad_request"},
		{"post no prefix", "POST", "/v1/reconstructions", `[{"hash":"` + a + `"}]`, tok, 400, "bad_request"},
		{"post no hash", "POST", "/v1/reconstructions", `[{"prefix":"default"}]`, tok, 400, "bad_request"},
		{"post unknown prefix", "POST", "/v1/reconstructions", `[{"prefix":"default-merkledb","hash":"` + a + `"}]`, tok, 400, "bad_prefix"},
		{"post bad hash", "POST", "/v1/reconstructions", `[{"prefix":"default","hash":"xyz"}]`, tok, 400, "bad_hash"},
		{"post hash not a string", "POST", "/v1/reconstructions", `[{"prefix":"default","hash":12}]`, tok, 400, "bad_request"},
		{"post too many", "POST", "/v1/reconstructions", string(batchBody(many...)), tok, 413, "too_large"},
		{"post body too large", "POST", "/v1/reconstructions", "[" + strings.Repeat(" ", int(e.cfg.Limits.BatchBody)) + "]", tok, 413, "too_large"},
		{"post unknown file", "POST", "/v1/reconstructions", string(batchBody(fa.file, unknown)), tok, 404, "not_found"},
		{"post other scope's file", "POST", "/v1/reconstructions", string(batchBody(fo.file)), tok, 404, "not_found"},
		{"post no token", "POST", "/v1/reconstructions", string(batchBody(fa.file)), "", 401, "unauthorized"},
		{"post expired token", "POST", "/v1/reconstructions", string(batchBody(fa.file)), expired, 401, "token_expired"},
		{"put not routed", "PUT", "/v1/reconstructions", string(batchBody(fa.file)), tok, 404, "not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.method != "GET" {
				body = []byte(tc.body)
			}
			resp := e.do(tc.method, tc.path, tc.token, body)
			b := expect(t, resp, tc.status)
			if tc.status == 200 {
				var a batchAnswer
				if err := json.Unmarshal(b, &a); err != nil || len(a.Files) == 0 {
					t.Fatalf("answer %s: %v", b, err)
				}
				return
			}
			var eb struct{ Code string }
			json.Unmarshal(b, &eb)
			if eb.Code != tc.code {
				t.Fatalf("code %q, want %q (%s)", eb.Code, tc.code, b)
			}
		})
	}

	// Small limits: the term cap counts the distinct files' terms; the file cap counts ids.
	fc := makeFixture(t, 44, 2, 2, 500) // 2 terms
	e.upload(fc, scope)
	o := e.srv.batchOptions()
	o.Files, o.Terms, o.Body = 3, 3, 4096
	h := e.srv.wrap("batch", auth.Read, e.srv.read.Batch(o))
	ts := httptest.NewServer(h)
	defer ts.Close()
	for _, tc := range []struct {
		name   string
		ids    []hash.Hash
		status int
	}{
		{"at the term cap", []hash.Hash{fa.file, fb.file}, 200},
		{"repeats count once toward terms", []hash.Hash{fa.file, fb.file, fa.file}, 200},
		{"over the term cap", []hash.Hash{fa.file, fc.file}, 413},
		{"other scope's file within the caps", []hash.Hash{fb.file, fo.file}, 404},
		{"over the file cap", []hash.Hash{fa.file, fb.file, fa.file, fb.file}, 413},
		{"empty file adds no terms", []hash.Hash{fa.file, fb.file, hash.Zero}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, post := range []bool{false, true} {
				var req *http.Request
				if post {
					req, _ = http.NewRequest("POST", ts.URL+"/v1/reconstructions", bytes.NewReader(batchBody(tc.ids...)))
				} else {
					req, _ = http.NewRequest("GET", ts.URL+batchQuery(tc.ids...), nil)
				}
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := ts.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b := expect(t, resp, tc.status)
				if tc.status == 413 && !strings.Contains(string(b), "limit") && !strings.Contains(string(b), "terms") {
					t.Fatalf("413 answer without its limit: %s", b)
				}
			}
		})
	}
}

// FuzzBatchRequest: neither parser panics; what they accept is a non-empty list of distinct ids
// within the limit that parses back the same from the other form.
func FuzzBatchRequest(f *testing.F) {
	a := hash.Chunk([]byte("a")).String()
	b := hash.Chunk([]byte("b")).String()
	f.Add("file_id="+a+"&file_id="+b, []byte(`[{"prefix":"default","hash":"`+a+`"},{"prefix":"default","hash":"`+b+`"}]`))
	f.Add("file_id="+a+"&file_id="+a, []byte(`{"file_ids":[{"prefix":"default","hash":"`+a+`"}]}`))
	f.Add("file_id=", []byte(`[]`))
	f.Add("file_id=%zz;x", []byte(`[{"prefix":"other","hash":"`+a+`"}]`))
	f.Add("", []byte(`[{"prefix":"default","hash":"`+strings.ToUpper(a)+`"}] `))
	f.Add("file_id="+a[:63]+"g", []byte(`null`))
	f.Add("x=1&file_id="+b, []byte(` {"file_ids":null}`))
	const maxFiles = 8
	opts := readpath.BatchOptions{Files: maxFiles, Prefix: ingest.Prefix, ErrBadPrefix: ingest.ErrBadPrefix}
	f.Fuzz(func(t *testing.T, query string, body []byte) {
		check := func(form string, ids []hash.Hash, err error) {
			if err != nil {
				return
			}
			if len(ids) == 0 || len(ids) > maxFiles {
				t.Fatalf("%s: %d ids accepted", form, len(ids))
			}
			if len(readpath.Distinct(slices.Clone(ids))) != len(ids) {
				t.Fatalf("%s: repeated ids %v", form, ids)
			}
			q := url.Values{}
			for _, h := range ids {
				q.Add("file_id", h.String())
			}
			back, err := opts.ParseQuery(q.Encode())
			if err != nil || !slices.Equal(back, ids) {
				t.Fatalf("%s: %v re-parsed as query: %v %v", form, ids, back, err)
			}
			back, err = opts.ParseBody(batchBody(ids...))
			if err != nil || !slices.Equal(back, ids) {
				t.Fatalf("%s: %v re-parsed as body: %v %v", form, ids, back, err)
			}
		}
		ids, err := opts.ParseQuery(query)
		check("query", ids, err)
		ids, err = opts.ParseBody(body)
		check("body", ids, err)
	})
}

// TestBatchLimitsFromConfig: limits.batch_files and limits.batch_terms are what the routes
// enforce.
func TestBatchLimitsFromConfig(t *testing.T) {
	e := newEnv(t, sqliteLocal(), func(c *config.Config) { c.Limits.BatchFiles = 2; c.Limits.BatchTerms = 3 })
	const scope = "models/acme/limits"
	var ids []hash.Hash
	for i := range 3 {
		f := makeFixture(t, uint64(300+i), 1, 2, 300) // one term each
		e.upload(f, scope)
		ids = append(ids, f.file)
	}
	big := makeFixture(t, 310, 3, 2, 300) // three terms
	e.upload(big, scope)
	tok := e.token(scope, auth.Read)
	for _, c := range []struct {
		name   string
		ids    []hash.Hash
		status int
	}{
		{"two files", ids[:2], 200},
		{"three files", ids, 413},
		{"three terms", []hash.Hash{big.file}, 200},
		{"four terms", []hash.Hash{big.file, ids[0]}, 413},
	} {
		resp := e.do("GET", batchQuery(c.ids...), tok, nil)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %.200s, want %d", c.name, resp.StatusCode, body, c.status)
		}
	}
}

// slowFiles is an index whose file lookups each take delay: slow, but each well within the
// dependency timeout.
type slowFiles struct {
	index.Index
	delay time.Duration
}

func (s slowFiles) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Index.File(ctx, h, scope)
}

// TestBatchReconstructionBounded: every lookup of a batch answers within the dependency timeout,
// but together they take several times it; the request must still end with 503 + Retry-After
// within about one timeout, and a batch that fits answers 200.
func TestBatchReconstructionBounded(t *testing.T) {
	const (
		timeout = 400 * time.Millisecond
		delay   = 60 * time.Millisecond // 20 lookups: 1.2 s, three timeouts
	)
	idx, objs := sqliteLocal().open(t)
	e := newEnvOptions(t, slowFiles{Index: idx, delay: delay}, objs, func(o *Options) { o.DependencyTimeout = timeout })
	const scope = "models/acme/slow"
	ids := make([]hash.Hash, 20)
	for i := range ids {
		f := makeFixture(t, uint64(200+i), 1, 2, 300)
		e.upload(f, scope)
		ids[i] = f.file
	}
	tok := e.token(scope, auth.Read)

	resp := e.do("GET", batchQuery(ids[:2]...), tok, nil) // 120 ms: fits
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("batch of 2: %d %s, want 200", resp.StatusCode, body)
	}

	start := time.Now()
	resp = e.do("POST", "/v1/reconstructions", tok, batchBody(ids...))
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("batch of 20 slow lookups: %d (Retry-After %q) %.200s, want 503 with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if took >= 20*delay {
		t.Fatalf("batch of 20 slow lookups answered after %v: not bounded by the %v timeout", took, timeout)
	}
}
