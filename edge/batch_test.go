package edge

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// batchAnswer is the batch reconstruction shape (docs/protocol.md §2.9).
type batchAnswer struct {
	Files     map[hash.Hash][]wire.Term      `json:"files"`
	FetchInfo map[hash.Hash][]wire.FetchInfo `json:"fetch_info"`
}

// decodeBatch decodes a batch answer with its URLs blanked (they carry an expiry).
func decodeBatch(t *testing.T, body []byte) batchAnswer {
	t.Helper()
	var a batchAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("batch answer: %v: %.300s", err, body)
	}
	for _, fis := range a.FetchInfo {
		for i := range fis {
			if fis[i].URL == "" {
				t.Fatalf("fetch entry without URL: %.300s", body)
			}
			fis[i].URL = ""
		}
	}
	return a
}

// TestBatchThroughEdge: batch reconstructions sent to the edge are answered by the edge itself
// (the shared batch handler over its metadata cache), in both request forms: the same terms and
// fetch ranges as the origin's answer, URLs of the edge's own transfer route that serve exactly
// their ranges, and the same 404 for a missing file. An edge without permits forwards the batch
// to the origin, whose URLs its answer then carries.
func TestBatchThroughEdge(t *testing.T) {
	o := startOrigin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	f1 := upload(t, o, w, 61, 2, 6)
	f2 := upload(t, o, w, 62, 1, 5)
	e := startEdge(t, o, t.TempDir())
	key := func(h hash.Hash) string { return fmt.Sprintf(`{"prefix":"default","hash":"%s"}`, h) }
	missing := hash.Chunk([]byte("not uploaded"))

	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"get", "GET", "/v1/reconstructions?file_id=" + f1.hash.String() + "&file_id=" + f2.hash.String(), "", 200},
		{"post", "POST", "/v1/reconstructions", "[" + key(f1.hash) + "," + key(f2.hash) + "]", 200},
		{"post missing file", "POST", "/v1/reconstructions", "[" + key(f1.hash) + "," + key(missing) + "]", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.method == "POST" {
				body = []byte(tc.body)
			}
			ost, obody := call(t, tc.method, o.url+tc.path, r, body)
			est, ebody := call(t, tc.method, e.tlsURL+tc.path, r, body)
			if ost != tc.status || est != tc.status {
				t.Fatalf("origin %d, edge %d, want %d: %.300s", ost, est, tc.status, ebody)
			}
			if tc.status != 200 {
				return
			}
			checkBatchURLs(t, ebody, "https://"+e.TLSAddr()+"/")
			got, want := decodeBatch(t, ebody), decodeBatch(t, obody)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("edge answer differs from the origin's:\nedge   %+v\norigin %+v", got, want)
			}
			if len(got.Files) != 2 {
				t.Fatalf("%d files answered, want 2", len(got.Files))
			}
			// Each file's terms are those of its own v1 answer through the edge.
			for _, f := range []*fixture{f1, f2} {
				st, b := call(t, "GET", e.tlsURL+"/v1/reconstructions/"+f.hash.String(), r, nil)
				var one wire.QueryReconstructionResponse
				if err := json.Unmarshal(b, &one); st != 200 || err != nil {
					t.Fatalf("single v1 answer %d %v", st, err)
				}
				if !reflect.DeepEqual(got.Files[f.hash], one.Terms) {
					t.Fatalf("file %s: batch terms %v, v1 terms %v", f.hash, got.Files[f.hash], one.Terms)
				}
			}
		})
	}

	// No permits: the edge forwards the batch, and the answer is the origin's own.
	proxy := startEdge(t, o, t.TempDir(), "--permits", "0")
	st, body := call(t, "GET", proxy.tlsURL+"/v1/reconstructions?file_id="+f1.hash.String(), r, nil)
	if st != 200 {
		t.Fatalf("batch through an edge without permits: %d %.300s", st, body)
	}
	checkBatchURLs(t, body, o.url+"/")
}

// checkBatchURLs checks that every fetch entry of a batch answer has a URL under base, and that
// the URL serves exactly its url_range (206 with that many bytes).
func checkBatchURLs(t *testing.T, body []byte, base string) {
	t.Helper()
	var a batchAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("batch answer: %v", err)
	}
	n := 0
	for x, fis := range a.FetchInfo {
		for _, fi := range fis {
			if !strings.HasPrefix(fi.URL, base) {
				t.Fatalf("xorb %s: URL %s, want one under %s", x, fi.URL, base)
			}
			st, b := call(t, "GET", fi.URL, "", nil, "Range", fmt.Sprintf("bytes=%d-%d", fi.URLRange.Start, fi.URLRange.End))
			if want := int(fi.URLRange.End - fi.URLRange.Start + 1); st != 206 || len(b) != want {
				t.Fatalf("xorb %s: GET %s: %d with %d bytes, want 206 with %d", x, fi.URL, st, len(b), want)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("batch answer without fetch entries")
	}
}
