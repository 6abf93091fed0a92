package edge

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// edgeFetch is one transfer URL of an edge answer with the byte range it was signed for.
type edgeFetch struct {
	url        string
	start, end uint64
}

func (f edgeFetch) rangeHeader() string { return fmt.Sprintf("bytes=%d-%d", f.start, f.end) }

// edgeFetches returns every transfer URL of file's v2 and v1 answers from the edge for tok;
// they must be the edge's own (answered locally, not proxied to the origin).
func edgeFetches(t *testing.T, e *runningEdge, tok string, file hash.Hash) []edgeFetch {
	t.Helper()
	var out []edgeFetch
	st, body := call(t, "GET", e.tlsURL+"/v2/reconstructions/"+file.String(), tok, nil)
	if st != http.StatusOK {
		t.Fatalf("v2 reconstruction of %s: %d %s", file, st, body)
	}
	var v2 wire.QueryReconstructionResponseV2
	if err := json.Unmarshal(body, &v2); err != nil {
		t.Fatal(err)
	}
	for _, es := range v2.Xorbs {
		for _, en := range es {
			out = append(out, edgeFetch{en.URL, en.Ranges[0].Bytes.Start, en.Ranges[0].Bytes.End})
		}
	}
	st, body = call(t, "GET", e.tlsURL+"/v1/reconstructions/"+file.String(), tok, nil)
	if st != http.StatusOK {
		t.Fatalf("v1 reconstruction of %s: %d %s", file, st, body)
	}
	var v1 wire.QueryReconstructionResponse
	if err := json.Unmarshal(body, &v1); err != nil {
		t.Fatal(err)
	}
	for _, es := range v1.FetchInfo {
		for _, en := range es {
			out = append(out, edgeFetch{en.URL, en.URLRange.Start, en.URLRange.End})
		}
	}
	if len(out) == 0 {
		t.Fatalf("file %s: no transfer URL", file)
	}
	for _, f := range out {
		if !strings.HasPrefix(f.url, e.tlsURL+"/") {
			t.Fatalf("URL %s is not the edge's (%s): the answer was proxied", f.url, e.tlsURL)
		}
	}
	return out
}

// fetchStatus GETs f's signed range from the edge and returns the status, checking the length
// of a 206.
func fetchStatus(t *testing.T, f edgeFetch) int {
	t.Helper()
	st, body := call(t, "GET", f.url, "", nil, "Range", f.rangeHeader())
	if st == http.StatusPartialContent && uint64(len(body)) != f.end-f.start+1 {
		t.Fatalf("GET %s: %d bytes, want %d", f.url, len(body), f.end-f.start+1)
	}
	return st
}

// boundedGet GETs u with a Range header and reads at most limit bytes of the answer (an
// unbounded answer is cut, not read: its Content-Length tells its size).
func boundedGet(t *testing.T, u, rangeHdr string, limit uint64) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Range", rangeHdr)
	resp, err := insecureClient().Do(req)
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

// TestEdgeTransferURLAttacks runs the attacks of issue 9 items 4 and 6 against an edge in front
// of the origin binary: (a) one edge URL asked for 200 overlapping copies of its full span
// answers the span once, and more parts than it signed ranges and than urlsign.MinParts is
// 416; (b) after a hide on the origin, the edge URLs already issued for the file turn 403 as
// soon as the edge applies the origin's revocation event (measured; bounded by
// revokeDeadline), while URLs of the same file issued to another scope and of the scope's other
// file keep working.
func TestEdgeTransferURLAttacks(t *testing.T) {
	const scope, other = "models/acme/edge-attack", "models/acme/edge-attack-other"
	o, admin := startOriginAdmin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	big := upload(t, o, w, 31, 1, 300) // one xorb of 300 chunks
	keep := upload(t, o, w, 32, 1, 4)
	upload(t, o, o.token(t, other, "write"), 31, 1, 300) // the same file, in another scope
	rOther := o.token(t, other, "read")
	e := startEdge(t, o, t.TempDir())

	t.Run("overlapping ranges", func(t *testing.T) {
		f := edgeFetches(t, e, r, big.hash)[0]
		span := f.end - f.start + 1
		spec := strings.TrimPrefix(f.rangeHeader(), "bytes=")
		hdr := "bytes=" + strings.Repeat(spec+",", 199) + spec
		st, body, h := boundedGet(t, f.url, hdr, 2*span)
		cl, _ := strconv.ParseUint(h.Get("Content-Length"), 10, 64)
		t.Logf("200 copies of a %d-byte signed span: %d, %d bytes (Content-Length %d)", span, st, len(body), cl)
		if st != http.StatusPartialContent || uint64(len(body)) != span || cl != span {
			t.Fatalf("200 overlapping ranges of the %d-byte span: status %d, %d bytes (Content-Length %d), want 206 with the span once",
				span, st, len(body), cl)
		}
		// More parts than the URL has signed ranges (here one) and than urlsign.MinParts (16).
		specs := make([]string, 17)
		for i := range specs {
			specs[i] = fmt.Sprintf("%d-%d", f.start+2*uint64(i), f.start+2*uint64(i))
		}
		if st, b := call(t, "GET", f.url, "", nil, "Range", "bytes="+strings.Join(specs, ",")); st != http.StatusRequestedRangeNotSatisfiable {
			t.Fatalf("17 disjoint parts of a one-range URL: %d %.200s, want 416", st, b)
		}
	})

	t.Run("hide revokes issued URLs", func(t *testing.T) {
		bigURLs, keepURLs, otherURLs := edgeFetches(t, e, r, big.hash), edgeFetches(t, e, r, keep.hash), edgeFetches(t, e, rOther, big.hash)
		for _, fs := range [][]edgeFetch{bigURLs, keepURLs, otherURLs} {
			for _, f := range fs {
				if st := fetchStatus(t, f); st != http.StatusPartialContent {
					t.Fatalf("before the hide: %s: %d", f.url, st)
				}
			}
		}
		body, _ := json.Marshal(map[string]any{"scope": scope, "files": []string{big.hash.String()}})
		start := time.Now()
		if st, ans := call(t, "POST", admin+"/admin/v1/hide", o.token(t, "", "admin"), body); st != http.StatusOK {
			t.Fatalf("hide: %d %s", st, ans)
		}
		// Every issued edge URL of the hidden file turns 403 within the bound; the time until
		// the last one did is the edge's revocation latency.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		deadline := time.NewTimer(revokeDeadline)
		defer deadline.Stop()
		for _, f := range bigURLs {
			for st := fetchStatus(t, f); st != http.StatusForbidden; st = fetchStatus(t, f) {
				if st != http.StatusPartialContent {
					t.Fatalf("edge URL during revocation: %d", st)
				}
				select {
				case <-deadline.C:
					t.Fatalf("edge URL %s still answers %d %v after the hide", f.url, st, revokeDeadline)
				case <-tick.C:
				}
			}
		}
		t.Logf("edge transfer URLs refused %v after the hide was posted", time.Since(start).Round(time.Millisecond))
		for _, fs := range [][]edgeFetch{keepURLs, otherURLs} {
			for _, f := range fs {
				if st := fetchStatus(t, f); st != http.StatusPartialContent {
					t.Errorf("after the hide: %s (another file or scope): %d, want 206", f.url, st)
				}
			}
		}
	})
}
