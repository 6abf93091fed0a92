package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

const scope = "models/acme/edge"

// download fetches f (or [a, b] of it) through endpoint with the Go client.
func download(t *testing.T, endpoint, tok string, p xetclient.Protocol, h hash.Hash, rng *[2]int64) ([]byte, error) {
	t.Helper()
	c, err := xetclient.New(xetclient.Options{Endpoint: endpoint, Token: tok, Protocol: p, InsecureSkipVerify: true,
		Retry: xetclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.Download(ctx, h, &buf, xetclient.DownloadOptions{Range: rng})
	return buf.Bytes(), err
}

// TestEdge runs one origin with a few files and one edge in front of it.
func TestEdge(t *testing.T) {
	o := startOrigin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	f := upload(t, o, w, 1, 3, 24)
	e := startEdge(t, o, t.TempDir())

	t.Run("reconstructions equal the origin's", func(t *testing.T) {
		size := int64(len(f.data))
		ranges := []string{"", "bytes=0-0", "bytes=0-99999999999", "bytes=100-5000",
			fmt.Sprintf("bytes=%d-%d", size/3, 2*size/3), fmt.Sprintf("bytes=%d-%d", size-1, size-1),
			"bytes=5000-", "bytes=-100", fmt.Sprintf("bytes=%d-%d", size, size+10), "bytes=x-1", "bytes=9-3"}
		for _, v := range []string{"v1", "v2"} {
			for _, rg := range ranges {
				path := "/" + v + "/reconstructions/" + f.hash.String()
				hdr := []string{}
				if rg != "" {
					hdr = []string{"Range", rg}
				}
				ost, obody := call(t, "GET", o.url+path, r, nil, hdr...)
				est, ebody := call(t, "GET", e.tlsURL+path, r, nil, hdr...)
				if ost != est {
					t.Fatalf("%s %q: origin %d, edge %d %s", v, rg, ost, est, ebody)
				}
				if est != 200 {
					if est != 416 {
						t.Errorf("%s %q: status %d, want 200 or 416", v, rg, est)
					}
					continue
				}
				if got, want := normalize(t, v, ebody), normalize(t, v, obody); got != want {
					t.Errorf("%s %q:\nedge   %s\norigin %s", v, rg, got, want)
				}
				if !strings.Contains(string(ebody), e.tlsURL+urlsign.PathPrefix) {
					t.Errorf("%s %q: edge answer does not point at its own transfer route: %.300s", v, rg, ebody)
				}
			}
		}
	})

	t.Run("downloads over h1, h2 and h3 are byte-exact", func(t *testing.T) {
		for _, p := range []xetclient.Protocol{xetclient.HTTP1, xetclient.HTTP2, xetclient.HTTP3} {
			label := map[xetclient.Protocol]string{xetclient.HTTP1: "h1", xetclient.HTTP2: "h2", xetclient.HTTP3: "h3"}[p]
			before := e.metric(t, "xet_edge_http_served_bytes_total", "proto", label)
			got, err := download(t, e.tlsURL, r, p, f.hash, nil)
			if err != nil || !bytes.Equal(got, f.data) {
				t.Fatalf("%s: whole file: err %v, %d bytes, equal %v", p, err, len(got), bytes.Equal(got, f.data))
			}
			a, b := int64(len(f.data)/5), int64(len(f.data)/2)
			got, err = download(t, e.tlsURL, r, p, f.hash, &[2]int64{a, b})
			if err != nil || !bytes.Equal(got, f.data[a:b+1]) {
				t.Fatalf("%s: range: err %v, %d bytes", p, err, len(got))
			}
			if after := e.metric(t, "xet_edge_http_served_bytes_total", "proto", label); after-before < float64(len(f.data)) {
				t.Errorf("%s: served bytes grew by %v, want at least %d", p, after-before, len(f.data))
			}
		}
		got, err := download(t, e.httpURL, r, xetclient.HTTP1, f.hash, nil)
		if err != nil || !bytes.Equal(got, f.data) {
			t.Fatalf("plain HTTP endpoint: err %v", err)
		}
	})

	t.Run("Alt-Svc on TCP answers", func(t *testing.T) {
		_, _, h := callH(t, insecureClient(), "GET", e.tlsURL+"/healthz", "", nil)
		_, port, _ := strings.Cut(e.TLSAddr(), ":")
		if got := h.Get("Alt-Svc"); !strings.HasPrefix(got, `h3=":`+port+`"`) {
			t.Errorf("Alt-Svc %q", got)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		other := startOrigin(t, t.TempDir()) // its keys are not the origin's
		recon := e.tlsURL + "/v2/reconstructions/" + f.hash.String()
		cases := []struct {
			name, url, tok string
			hdr            []string
			want           int
		}{
			{"no token", recon, "", nil, 401},
			{"garbage token", recon, "not.a.jwt", nil, 401},
			{"token of another origin", recon, other.token(t, scope, "read"), nil, 401},
			{"other scope", recon, o.token(t, "models/acme/other", "read"), nil, 404},
			{"unknown file", e.tlsURL + "/v2/reconstructions/" + hash.Chunk([]byte("nope")).String(), r, nil, 404},
			{"malformed hash", e.tlsURL + "/v2/reconstructions/xyz", r, nil, 400},
			{"range past EOF", recon, r, []string{"Range", fmt.Sprintf("bytes=%d-", len(f.data))}, 416},
			{"bad range", recon, r, []string{"Range", "bytes=a-b"}, 416},
			{"head other scope", e.tlsURL + "/v1/files/" + f.hash.String(), o.token(t, "x/y", "read"), nil, 404},
			{"internal API not exposed", e.tlsURL + "/internal/v1/jwks", o.token(t, "edge", "edge"), nil, 404},
		}
		for _, c := range cases {
			method := "GET"
			if strings.HasPrefix(c.name, "head") {
				method = "HEAD"
			}
			if st, body := call(t, method, c.url, c.tok, nil, c.hdr...); st != c.want {
				t.Errorf("%s: status %d, want %d (%s)", c.name, st, c.want, body)
			}
		}
		st, _, h := callH(t, insecureClient(), "HEAD", e.tlsURL+"/v1/files/"+f.hash.String(), r, nil)
		if st != 200 || h.Get("Content-Length") != fmt.Sprint(len(f.data)) {
			t.Errorf("HEAD file: %d, Content-Length %q, want %d", st, h.Get("Content-Length"), len(f.data))
		}
	})

	t.Run("transfer URLs", func(t *testing.T) {
		_, body := call(t, "GET", e.tlsURL+"/v2/reconstructions/"+f.hash.String(), r, nil)
		ans, err := wire.DecodeV2(body)
		if err != nil {
			t.Fatal(err)
		}
		l := f.layouts[0]
		entry := ans.Xorbs[l.Hash][0]
		whole := entry.Ranges[0].Bytes
		mid := l.StoredEnds[len(l.StoredEnds)/2]
		key, err := os.ReadFile(filepath.Join(e.dir, "keys", transferKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		signer, err := urlsign.New(urlsign.Options{BaseURL: e.tlsURL, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		expired := string(signer.Bind(scope, f.hash, time.Now().Add(-time.Minute)).AppendURL(nil, l.Hash,
			[]httprange.ByteRange{{Start: whole.Start, End: whole.End}}))
		u, _ := url.Parse(entry.URL)
		q := u.Query()
		q.Set("r", fmt.Sprintf("0-%d", whole.End+100))
		u.RawQuery = q.Encode()
		widened := u.String()
		tampered := entry.URL[:len(entry.URL)-2] + "AA"
		if strings.HasSuffix(entry.URL, "AA") {
			tampered = entry.URL[:len(entry.URL)-2] + "BB"
		}
		rg := func(a, b uint64) []string { return []string{"Range", fmt.Sprintf("bytes=%d-%d", a, b)} }
		for _, c := range []struct {
			name, url string
			hdr       []string
			want      int
		}{
			{"tampered signature", tampered, rg(whole.Start, whole.End), 403},
			{"widened ranges", widened, rg(whole.Start, whole.End), 403},
			{"expired", expired, rg(whole.Start, whole.End), 403},
			{"outside the signed set", entry.URL, rg(whole.Start, whole.End+1), 403},
			{"malformed Range", entry.URL, []string{"Range", "bytes=oops"}, 416},
			{"signed range", entry.URL, rg(whole.Start, whole.End), 206},
			{"sub-range off chunk boundaries", entry.URL, rg(whole.Start+3, uint64(mid)+5), 206},
		} {
			st, got := call(t, "GET", c.url, "", nil, c.hdr...)
			if st != c.want {
				t.Errorf("%s: status %d, want %d (%.200s)", c.name, st, c.want, got)
				continue
			}
			if st == 206 {
				br, _ := httprange.ParseOne(c.hdr[1])
				want := objectBytes(t, o, l.Hash)[br.Start : br.End+1]
				if !bytes.Equal(got, want) {
					t.Errorf("%s: %d bytes differ from the stored object's", c.name, len(got))
				}
			}
		}
		// Two ranges in one request (a byte apart, so not coalesced): multipart/byteranges,
		// parts in request order.
		st, got, h := callH(t, insecureClient(), "GET", entry.URL, "", nil, "Range",
			fmt.Sprintf("bytes=%d-%d,%d-%d", mid+1, whole.End, whole.Start, mid-1))
		_, params, _ := mime.ParseMediaType(h.Get("Content-Type"))
		if st != 206 || params["boundary"] == "" {
			t.Fatalf("multirange: %d %q", st, h.Get("Content-Type"))
		}
		obj := objectBytes(t, o, l.Hash)
		mr := multipart.NewReader(bytes.NewReader(got), params["boundary"])
		for i, want := range [][]byte{obj[mid+1 : whole.End+1], obj[whole.Start:mid]} {
			p, err := mr.NextPart()
			if err != nil {
				t.Fatalf("part %d: %v", i, err)
			}
			var b bytes.Buffer
			_, _ = b.ReadFrom(p)
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("part %d: %d bytes differ", i, b.Len())
			}
		}
	})

	t.Run("concurrent cold downloads pull each byte once", func(t *testing.T) {
		g := upload(t, o, w, 2, 2, 40)
		fillBefore := e.metric(t, "xet_edge_datacache_fill_bytes_total")
		originBefore := e.metric(t, "xet_edge_origin_xorb_bytes_total")
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := download(t, e.tlsURL, r, xetclient.HTTP1, g.hash, nil)
				if err == nil && !bytes.Equal(got, g.data) {
					err = fmt.Errorf("bytes differ")
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("download %d: %v", i, err)
			}
		}
		fill := e.metric(t, "xet_edge_datacache_fill_bytes_total") - fillBefore
		pulled := e.metric(t, "xet_edge_origin_xorb_bytes_total") - originBefore
		if want := float64(g.chunkBytes()); fill != want || pulled != want {
			t.Errorf("%d downloads: filled %v bytes, pulled %v from the origin; want each byte once: %v", n, fill, pulled, want)
		}
	})

	t.Run("corrupt xorb in the origin store is never served", func(t *testing.T) {
		g := upload(t, o, w, 3, 1, 16)
		l := g.layouts[0]
		p := objectPath(o, l.Hash)
		obj, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("the origin's object file: %v", err)
		}
		obj[l.StoredEnds[7]-10] ^= 0x55 // inside chunk 7's payload
		if err := os.WriteFile(p, obj, 0o644); err != nil {
			t.Fatal(err)
		}
		before := e.metric(t, "xet_edge_transfer_verify_failures_total")
		_, body := call(t, "GET", e.tlsURL+"/v2/reconstructions/"+g.hash.String(), r, nil)
		ans, err := wire.DecodeV2(body)
		if err != nil {
			t.Fatal(err)
		}
		entry := ans.Xorbs[l.Hash][0]
		rb := entry.Ranges[0].Bytes
		st, got := call(t, "GET", entry.URL, "", nil, "Range", fmt.Sprintf("bytes=%d-%d", rb.Start, rb.End))
		if st != 502 {
			t.Errorf("transfer of corrupt bytes: status %d (%d bytes), want 502", st, len(got))
		}
		if _, err := download(t, e.tlsURL, r, xetclient.HTTP1, g.hash, nil); err == nil {
			t.Error("download of a corrupt xorb succeeded")
		}
		if d := e.metric(t, "xet_edge_transfer_verify_failures_total") - before; d < 1 {
			t.Errorf("verify failures grew by %v", d)
		}
		if d := e.metric(t, "xet_edge_datacache_verify_failures_total"); d < 1 {
			t.Errorf("datacache verify failures %v", d)
		}
	})

	t.Run("write routes are proxied", func(t *testing.T) {
		g := upload(t, &origin{url: e.tlsURL}, w, 4, 1, 4)
		got, err := download(t, o.url, r, xetclient.HTTP1, g.hash, nil)
		if err != nil || !bytes.Equal(got, g.data) {
			t.Fatalf("file uploaded through the edge, downloaded from the origin: %v", err)
		}
	})
}

// normalize renders a reconstruction answer without its URLs (which differ by design).
func normalize(t *testing.T, version string, body []byte) string {
	t.Helper()
	type rng struct {
		Chunks wire.ChunkRange
		Bytes  wire.ByteRange
	}
	out := struct {
		Offset uint64
		Terms  []wire.Term
		Ranges map[string][]rng
	}{Ranges: map[string][]rng{}}
	if version == "v2" {
		a, err := wire.DecodeV2(body)
		if err != nil {
			t.Fatalf("v2 answer: %v", err)
		}
		out.Offset, out.Terms = a.OffsetIntoFirstRange, a.Terms
		for h, es := range a.Xorbs {
			for _, e := range es {
				for _, r := range e.Ranges {
					out.Ranges[h.String()] = append(out.Ranges[h.String()], rng{r.Chunks, r.Bytes})
				}
			}
		}
	} else {
		var a wire.QueryReconstructionResponse
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("v1 answer: %v", err)
		}
		out.Offset, out.Terms = a.OffsetIntoFirstRange, a.Terms
		for h, fs := range a.FetchInfo {
			for _, fi := range fs {
				out.Ranges[h.String()] = append(out.Ranges[h.String()], rng{fi.Range, fi.URLRange})
			}
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// objectPath is where the origin's local object store keeps xorb h (a fan-out directory of
// the name's first two characters).
func objectPath(o *origin, h hash.Hash) string {
	s := h.String()
	return filepath.Join(o.dir, "objects", "xorbs", "default", "_"+s[:2], s)
}

// objectBytes reads the stored object of xorb h from the origin's data dir.
func objectBytes(t *testing.T, o *origin, h hash.Hash) []byte {
	t.Helper()
	b, err := os.ReadFile(objectPath(o, h))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNoPermits: with zero permits every reconstruction is proxied to the origin; downloads
// still succeed and the fallback counter says why.
func TestNoPermits(t *testing.T) {
	o := startOrigin(t, t.TempDir())
	f := upload(t, o, o.token(t, scope, "write"), 5, 2, 8)
	e := startEdge(t, o, t.TempDir(), "--permits", "0")
	r := o.token(t, scope, "read")
	// The origin's transfer URLs are plain HTTP here, which the client fetches over HTTP/1.1
	// only (its h2 mode means h2c, its h3 mode https): downloads use h1; h2 and h3 are checked
	// on the proxied reconstruction itself.
	got, err := download(t, e.tlsURL, r, xetclient.HTTP1, f.hash, nil)
	if err != nil || !bytes.Equal(got, f.data) {
		t.Fatalf("download: %v", err)
	}
	for name, c := range map[string]*http.Client{"h2": h2Client(), "h3": h3Client(t)} {
		st, body, _ := callH(t, c, "GET", e.tlsURL+"/v2/reconstructions/"+f.hash.String(), r, nil)
		if st != 200 || !strings.Contains(string(body), o.url+urlsign.PathPrefix) {
			t.Errorf("%s reconstruction with no permits: %d %.200s", name, st, body)
		}
	}
	if n := e.metric(t, "xet_edge_fallbacks_total", "reason", "no_permit"); n < 3 {
		t.Errorf("no_permit fallbacks %v, want >= 3", n)
	}
	if n := e.metric(t, "xet_edge_http_requests_total", "code", "429") + e.metric(t, "xet_edge_http_requests_total", "code", "503"); n != 0 {
		t.Errorf("%v answers were 429/503", n)
	}
}

// TestOriginDown: cached files keep downloading with the origin stopped; misses fail with
// 502/504 within the configured wait.
func TestOriginDown(t *testing.T) {
	o := startOrigin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	warm := upload(t, o, w, 6, 2, 12)
	cold := upload(t, o, w, 7, 1, 4)
	cfg := filepath.Join(t.TempDir(), "edge.json")
	if err := os.WriteFile(cfg, []byte(`{"limits":{"origin_timeout":"2s"},"cache":{"visibility_ttl":"5m"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, o, t.TempDir(), "--config", cfg)
	if got, err := download(t, e.tlsURL, r, xetclient.HTTP1, warm.hash, nil); err != nil || !bytes.Equal(got, warm.data) {
		t.Fatalf("warm-up download: %v", err)
	}
	o.stop()
	for _, p := range []xetclient.Protocol{xetclient.HTTP1, xetclient.HTTP2, xetclient.HTTP3} {
		if got, err := download(t, e.tlsURL, r, p, warm.hash, nil); err != nil || !bytes.Equal(got, warm.data) {
			t.Fatalf("%s: cached file with the origin down: %v", p, err)
		}
	}
	start := time.Now()
	st, body := call(t, "GET", e.tlsURL+"/v2/reconstructions/"+cold.hash.String(), r, nil)
	if st != http.StatusBadGateway && st != http.StatusGatewayTimeout {
		t.Errorf("uncached file with the origin down: %d %s, want 502 or 504", st, body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("miss took %v with a 2 s origin timeout", d)
	}
	if st, _ := call(t, "GET", e.tlsURL+"/readyz", "", nil); st != 200 {
		t.Errorf("readyz with warm caches and the origin down: %d", st)
	}
}
