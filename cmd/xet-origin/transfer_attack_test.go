package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// signedFetch is one transfer URL of a reconstruction answer with the byte range it was
// signed for (the entry's first).
type signedFetch struct {
	url        string
	start, end uint64
}

func (f signedFetch) rangeHeader() string { return fmt.Sprintf("bytes=%d-%d", f.start, f.end) }

// fetches returns every transfer URL of file's v2 and v1 answers for tok.
func fetches(t *testing.T, o *proc, tok string, file hash.Hash) []signedFetch {
	t.Helper()
	st, body := call(t, "GET", o.base()+"/v2/reconstructions/"+file.String(), tok, nil)
	if st != http.StatusOK {
		t.Fatalf("v2 reconstruction of %s: %d %s", file, st, body)
	}
	var v2 wire.QueryReconstructionResponseV2
	if err := json.Unmarshal(body, &v2); err != nil {
		t.Fatal(err)
	}
	var out []signedFetch
	for _, es := range v2.Xorbs {
		for _, e := range es {
			out = append(out, signedFetch{e.URL, e.Ranges[0].Bytes.Start, e.Ranges[0].Bytes.End})
		}
	}
	st, body = call(t, "GET", o.base()+"/v1/reconstructions/"+file.String(), tok, nil)
	if st != http.StatusOK {
		t.Fatalf("v1 reconstruction of %s: %d %s", file, st, body)
	}
	var v1 wire.QueryReconstructionResponse
	if err := json.Unmarshal(body, &v1); err != nil {
		t.Fatal(err)
	}
	for _, es := range v1.FetchInfo {
		for _, e := range es {
			out = append(out, signedFetch{e.URL, e.URLRange.Start, e.URLRange.End})
		}
	}
	if len(out) == 0 {
		t.Fatalf("file %s: no transfer URL", file)
	}
	return out
}

// uploadFile stores f's xorbs and registers it with a write token.
func uploadFile(t *testing.T, o *proc, w string, f fileUp) {
	t.Helper()
	for _, x := range f.xorbs {
		if st, b := call(t, "POST", o.base()+x.path(), w, x.body); st != http.StatusOK {
			t.Fatalf("xorb upload: %d %s", st, b)
		}
	}
	if st, b := call(t, "POST", o.base()+"/v1/shards", w, f.shard); st != http.StatusOK {
		t.Fatalf("shard upload: %d %s", st, b)
	}
}

// hide posts a hide of files in scope to the origin's admin listener.
func hide(t *testing.T, o *proc, admin, scope string, files ...hash.Hash) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"scope": scope, "files": files})
	if st, b := call(t, "POST", admin+"/admin/v1/hide", o.token(t, "", "admin"), body); st != http.StatusOK {
		t.Fatalf("hide: %d %s", st, b)
	}
}

// TestTransferURLAttacks runs the attacks of issue 9 items 4 and 6 against the binary, on both
// backends: (a) hiding a file revokes the transfer URLs already issued for it (403 at once),
// while URLs of the same file issued to another scope and of the scope's other files keep
// working; (b) one signed URL asked for 200 overlapping copies of its full span answers the
// span once, and asking for more parts than it signed ranges and than urlsign.MinParts is 416.
func TestTransferURLAttacks(t *testing.T) {
	bin := buildBinary(t)
	for _, bc := range backendCases() {
		t.Run(bc.name, func(t *testing.T) {
			o := newOrigin(t, bin)
			bc.configure(t, o)
			admin := testenv.FreeAddr(t)
			o.args = append(o.args, "--admin-listen", admin)
			o.start(t)
			const scope, other = "models/acme/attack", "models/acme/attack-other"
			rng := mrand.New(mrand.NewPCG(91, 91))
			big := makeFile(makeXorb(rng, 400)) // one xorb of ~2.4 MB stored
			keep := makeFile(makeXorb(rng, 3))
			w := o.token(t, scope, "write")
			uploadFile(t, o, w, big)
			uploadFile(t, o, w, keep)
			uploadFile(t, o, o.token(t, other, "write"), big)
			r, rOther := o.token(t, scope, "read"), o.token(t, other, "read")

			t.Run("overlapping ranges", func(t *testing.T) {
				f := fetches(t, o, r, big.hash)[0]
				span := f.end - f.start + 1
				spec := strings.TrimPrefix(f.rangeHeader(), "bytes=")
				hdr := "bytes=" + strings.Repeat(spec+",", 199) + spec
				a := boundedGet(t, f.url, hdr, 2*span)
				cl, _ := strconv.ParseUint(a.header.Get("Content-Length"), 10, 64)
				t.Logf("200 copies of a %d-byte signed span: %d %d bytes (Content-Length %d)", span, a.status, len(a.body), cl)
				if a.status != http.StatusPartialContent || uint64(len(a.body)) != span || cl != span {
					t.Fatalf("200 overlapping ranges of the %d-byte span: status %d, %d bytes (Content-Length %d), want 206 with the span once",
						span, a.status, len(a.body), cl)
				}
				if cr, want := a.header.Get("Content-Range"), fmt.Sprintf("bytes %d-%d/", f.start, f.end); !strings.HasPrefix(cr, want) {
					t.Fatalf("Content-Range %q, want %q…", cr, want)
				}
				// More parts than the URL has signed ranges (here one) and than urlsign.MinParts
				// (16): 416.
				a, err := do("GET", f.url, "", nil, "Range", manyParts(17, f.start))
				if err != nil || a.status != http.StatusRequestedRangeNotSatisfiable {
					t.Fatalf("17 disjoint parts of a one-range URL: %d %v, want 416", a.status, err)
				}
			})

			t.Run("hide revokes issued URLs", func(t *testing.T) {
				bigURLs, keepURLs, otherURLs := fetches(t, o, r, big.hash), fetches(t, o, r, keep.hash), fetches(t, o, rOther, big.hash)
				for _, fs := range [][]signedFetch{bigURLs, keepURLs, otherURLs} {
					for _, f := range fs {
						expectFetch(t, f, http.StatusPartialContent)
					}
				}
				hide(t, o, "http://"+admin, scope, big.hash)
				// At once: no wait between the hide's answer and these requests.
				for _, f := range bigURLs {
					expectFetch(t, f, http.StatusForbidden)
				}
				for _, fs := range [][]signedFetch{keepURLs, otherURLs} {
					for _, f := range fs {
						expectFetch(t, f, http.StatusPartialContent)
					}
				}
				// Asking again gets the clean answer: the file is gone from the scope.
				if st, _ := call(t, "GET", o.base()+"/v2/reconstructions/"+big.hash.String(), r, nil); st != http.StatusNotFound {
					t.Errorf("reconstruction after the hide: %d, want 404", st)
				}
			})
		})
	}
}

// boundedGet GETs u with a Range header and reads at most limit bytes of the answer (an
// unbounded answer is cut, not read: its Content-Length tells its size).
func boundedGet(t *testing.T, u, rangeHdr string, limit uint64) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Range", rangeHdr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)))
	if err != nil {
		t.Fatalf("GET %s: read body: %v", u, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// manyParts is a Range header of n one-byte ranges two bytes apart from start (never coalesced).
func manyParts(n int, start uint64) string {
	specs := make([]string, n)
	for i := range specs {
		b := start + 2*uint64(i)
		specs[i] = fmt.Sprintf("%d-%d", b, b)
	}
	return "bytes=" + strings.Join(specs, ",")
}

// expectFetch GETs f's signed range and checks the status (and, for 206, the length).
func expectFetch(t *testing.T, f signedFetch, want int) {
	t.Helper()
	a, err := do("GET", f.url, "", nil, "Range", f.rangeHeader())
	if err != nil {
		t.Fatalf("GET %s: %v", f.url, err)
	}
	if a.status != want {
		t.Fatalf("GET %s: status %d (%d bytes), want %d", f.url, a.status, len(a.body), want)
	}
	if want == http.StatusPartialContent && uint64(len(a.body)) != f.end-f.start+1 {
		t.Fatalf("GET %s: %d bytes, want %d", f.url, len(a.body), f.end-f.start+1)
	}
}
