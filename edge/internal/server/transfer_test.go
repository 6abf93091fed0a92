package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/xetcdn/xetcdn/edge/internal/datacache"
	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/internal/xfertest"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// testXorb builds a real xorb of n chunks of size raw bytes each (random, so stored ≈ raw).
func testXorb(t testing.TB, seed uint64, n, size int) ([]byte, *xorb.Layout) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	b := xorb.NewBuilder(xorb.Auto)
	for i := 0; i < n; i++ {
		raw := make([]byte, size)
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		if !b.Add(raw, hash.Chunk(raw)) {
			t.Fatalf("builder refused chunk %d", i)
		}
	}
	body, l := b.Finish()
	if err := l.Verify(); err != nil {
		t.Fatal(err)
	}
	return body, l
}

// memFetcher serves chunk areas from memory and counts the bytes it sent.
type memFetcher struct {
	mu    sync.Mutex
	body  map[hash.Hash][]byte
	bytes int64
}

func (f *memFetcher) FetchXorbRange(_ context.Context, h hash.Hash, start, end int64) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.body[h]
	if !ok || start < 0 || end > int64(len(b)) || start > end {
		return nil, fmt.Errorf("memFetcher: no bytes [%d,%d) of %s", start, end, h)
	}
	f.bytes += end - start
	return io.NopCloser(bytes.NewReader(b[start:end])), nil
}

// fakeMeta serves fixed layouts and records; every file is visible in every scope.
type fakeMeta struct {
	layouts map[hash.Hash]*xorb.Layout
	files   map[hash.Hash]*recon.FileRecord
	hidden  map[hash.Hash]bool // files Visible answers not visible, in every scope
}

func (m fakeMeta) Visible(_ context.Context, h hash.Hash, scope string) error {
	if m.hidden[h] {
		return fmt.Errorf("fakeMeta: file %s hidden in %q: %w", h, scope, originapi.ErrNotFound)
	}
	return nil
}

func (m fakeMeta) File(_ context.Context, h hash.Hash, _ string) (*recon.FileRecord, error) {
	if f, ok := m.files[h]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("fakeMeta: no file %s", h)
}

func (m fakeMeta) Layout(_ context.Context, h hash.Hash) (*xorb.Layout, error) {
	if l, ok := m.layouts[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("fakeMeta: no layout %s", h)
}

type noTokens struct{}

func (noTokens) VerifyRequest(*http.Request) (*auth.Claims, error) {
	return nil, auth.ErrInsufficient
}

// transferFixture is a Server over a real data cache holding one xorb.
type transferFixture struct {
	srv    *Server
	signer *urlsign.Signer
	body   []byte
	l      *xorb.Layout
	fetch  *memFetcher
	meta   fakeMeta
}

func newTransferFixture(t testing.TB, chunks, chunkSize int, opts ...func(*Options)) *transferFixture {
	t.Helper()
	body, l := testXorb(t, 1, chunks, chunkSize)
	f := &memFetcher{body: map[hash.Hash][]byte{l.Hash: body}}
	dc, err := datacache.Open(context.Background(), datacache.Options{Dir: t.TempDir(), MaxBytes: 1 << 30,
		Fetcher: f, SegmentBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	signer, err := urlsign.New(urlsign.Options{BaseURL: "https://edge.invalid", Key: bytes.Repeat([]byte{7}, urlsign.MinKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	origin, _ := url.Parse("http://127.0.0.1:1")
	meta := fakeMeta{layouts: map[hash.Hash]*xorb.Layout{l.Hash: l}, hidden: map[hash.Hash]bool{}}
	o := Options{Meta: meta, Bytes: dc, Tokens: noTokens{},
		Signer: signer, Origin: origin, Permits: 4,
		CorruptErrs: []error{datacache.ErrCorrupt}, BadRangeErrs: []error{datacache.ErrBadRange}}
	for _, fn := range opts {
		fn(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &transferFixture{srv: srv, signer: signer, body: body, l: l, fetch: f, meta: meta}
}

// transferFile is the file the fixture's URLs are issued for, in scope "s".
var transferFile = hash.Chunk([]byte("transfer fixture file"))

// pathFor is the path and query of a transfer URL signed for ranges (closed byte ranges).
func (fx *transferFixture) pathFor(ranges ...httprange.ByteRange) string {
	u := string(fx.signer.Bind("s", transferFile, fx.signer.Expiry(0)).AppendURL(nil, fx.l.Hash, ranges))
	return strings.TrimPrefix(u, "https://edge.invalid")
}

// chunkBytes is the closed byte range of chunks [a, b).
func (fx *transferFixture) chunkBytes(a, b uint32) httprange.ByteRange {
	s, e := fx.l.ByteRange(a, b)
	return httprange.ByteRange{Start: uint64(s), End: uint64(e) - 1}
}

// TestTransfer checks bodies, statuses and framing of the transfer route over plain HTTP
// (sendfile), HTTP/1.1+TLS with and without batching connections (the edge's TLS listener
// batches) and HTTP/2 (pooled copy buffer).
func TestTransfer(t *testing.T) {
	fx := newTransferFixture(t, 48, 20000)
	h := fx.srv.Handler()
	plain := httptest.NewServer(h)
	defer plain.Close()
	h1 := httptest.NewTLSServer(h)
	defer h1.Close()
	h2 := httptest.NewUnstartedServer(h)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()
	h1Client := h1.Client()
	h1Client.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	batched := newBatchedTLSServer(t, h, nil)
	servers := []struct {
		name, url string
		c         *http.Client
		proto     int
	}{
		{"plain", plain.URL, plain.Client(), 1},
		{"h1+tls", h1.URL, h1Client, 1},
		{"h1+tls batched", batched.URL, batched.Client(), 1},
		{"h2", h2.URL, h2.Client(), 2},
	}

	whole := fx.chunkBytes(0, 48)
	mid := fx.chunkBytes(5, 31) // spans several 256 KiB segments
	inner := httprange.ByteRange{Start: mid.Start + 17, End: mid.End - 1000}
	tail := httprange.ByteRange{Start: whole.End - 999, End: whole.End - 10} // in the last chunk
	tests := []struct {
		name   string
		signed []httprange.ByteRange
		rng    string
		status int
		want   []httprange.ByteRange // parts; nil for an error status
	}{
		{"no Range: the signed range", []httprange.ByteRange{mid}, "", 200, []httprange.ByteRange{mid}},
		{"aligned single range", []httprange.ByteRange{whole}, fmt.Sprintf("bytes=%d-%d", mid.Start, mid.End), 206, []httprange.ByteRange{mid}},
		{"unaligned single range", []httprange.ByteRange{mid}, fmt.Sprintf("bytes=%d-%d", inner.Start, inner.End), 206, []httprange.ByteRange{inner}},
		{"one byte", []httprange.ByteRange{mid}, fmt.Sprintf("bytes=%d-%d", mid.Start+3, mid.Start+3), 206,
			[]httprange.ByteRange{{Start: mid.Start + 3, End: mid.Start + 3}}},
		{"multipart in request order", []httprange.ByteRange{{Start: 0, End: 99}, mid, tail},
			fmt.Sprintf("bytes=%d-%d,%d-%d,%d-%d", mid.Start, mid.End, 0, 99, tail.Start, tail.End), 206,
			[]httprange.ByteRange{mid, {Start: 0, End: 99}, tail}},
		{"overlapping ranges coalesced into one part", []httprange.ByteRange{whole},
			fmt.Sprintf("bytes=%d-%d,%d-%d,%d-%d", mid.Start, mid.End, inner.Start, inner.End, mid.Start, mid.End), 206,
			[]httprange.ByteRange{mid}},
		{"adjacent ranges coalesced, the rest in request order", []httprange.ByteRange{{Start: 0, End: 99}, mid, tail},
			fmt.Sprintf("bytes=%d-%d,%d-%d,%d-%d,%d-%d", tail.Start, tail.End, 0, 49, 50, 99, tail.Start+1, tail.End), 206,
			[]httprange.ByteRange{tail, {Start: 0, End: 99}}},
		{"two pieces of one signed range", []httprange.ByteRange{whole},
			fmt.Sprintf("bytes=%d-%d,%d-%d", mid.Start, mid.End, 0, 99), 206, []httprange.ByteRange{mid, {Start: 0, End: 99}}},
		{"more parts than signed ranges and than urlsign.MinParts", []httprange.ByteRange{whole},
			xfertest.ManyParts(urlsign.MinParts+1, mid.Start), 416, nil},
		{"outside the signed set", []httprange.ByteRange{mid}, fmt.Sprintf("bytes=%d-%d", whole.Start, whole.End), 403, nil},
		{"past the chunk area", []httprange.ByteRange{{Start: whole.End + 1, End: whole.End + 10}}, fmt.Sprintf("bytes=%d-%d", whole.End+1, whole.End+10), 416, nil},
	}
	for _, sv := range servers {
		for _, tc := range tests {
			t.Run(sv.name+"/"+tc.name, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodGet, sv.url+fx.pathFor(tc.signed...), nil)
				if tc.rng != "" {
					req.Header.Set("Range", tc.rng)
				}
				resp, err := sv.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				got, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if resp.ProtoMajor != sv.proto {
					t.Fatalf("proto %s, want major %d", resp.Proto, sv.proto)
				}
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %.200s", resp.StatusCode, tc.status, got)
				}
				if tc.want == nil {
					return
				}
				if len(tc.want) == 1 {
					w := fx.body[tc.want[0].Start : tc.want[0].End+1]
					if !bytes.Equal(got, w) {
						t.Fatalf("body: %d bytes, want %d (equal prefix: %v)", len(got), len(w), bytes.HasPrefix(w, got))
					}
					return
				}
				mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
				if err != nil || mt != "multipart/byteranges" {
					t.Fatalf("Content-Type %q: %v", resp.Header.Get("Content-Type"), err)
				}
				mr := multipart.NewReader(bytes.NewReader(got), params["boundary"])
				for i, b := range tc.want {
					p, err := mr.NextPart()
					if err != nil {
						t.Fatalf("part %d: %v", i, err)
					}
					if cr, want := p.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-%d/%d", b.Start, b.End, objectSize(fx.l)); cr != want {
						t.Fatalf("part %d Content-Range %q, want %q", i, cr, want)
					}
					pb, err := io.ReadAll(p)
					if err != nil || !bytes.Equal(pb, fx.body[b.Start:b.End+1]) {
						t.Fatalf("part %d: %d bytes (err %v), want %d", i, len(pb), err, b.Len())
					}
				}
				if _, err := mr.NextPart(); err != io.EOF {
					t.Fatalf("after the last part: %v, want EOF", err)
				}
			})
		}
	}
	if served := testutilCounter(t, fx.srv); served == 0 {
		t.Fatal("xet_edge_transfer_served_bytes_total did not move")
	}
}

// TestTransferRevoked: a URL stops working (403) as soon as the metadata says its file is no
// longer visible in its scope, and works again if it becomes visible again (within expiry).
func TestTransferRevoked(t *testing.T) {
	fx := newTransferFixture(t, 8, 1000)
	h := fx.srv.Handler()
	whole := fx.chunkBytes(0, 8)
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, fx.pathFor(whole), nil))
		return w
	}
	if w := get(); w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), fx.body[:whole.End+1]) {
		t.Fatalf("visible file: %d, %d bytes", w.Code, w.Body.Len())
	}
	fx.meta.hidden[transferFile] = true
	if w := get(); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "transfer_denied") {
		t.Fatalf("hidden file: %d %s, want 403 transfer_denied", w.Code, w.Body.String())
	}
	delete(fx.meta.hidden, transferFile)
	if w := get(); w.Code != http.StatusOK {
		t.Fatalf("visible again: %d", w.Code)
	}
}

// newBatchedTLSServer serves h over HTTP/1.1+TLS through batching connections, like the edge's
// TLS listener; wrap (nil: none) wraps the accepted TCP connections under the batchConns. Its
// client speaks HTTP/1.1 only.
func newBatchedTLSServer(t *testing.T, h http.Handler, wrap func(net.Listener) net.Listener) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = newBatchListener(ln)
	srv.Config.ConnContext = batchContext
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := srv.Client().Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = false
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	return srv
}

// failListener's connections fail every write once more than after bytes were written.
type failListener struct {
	net.Listener
	after int64
}

func (l failListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &failConn{Conn: c, left: l.after}, nil
}

type failConn struct {
	net.Conn
	left int64
}

func (c *failConn) Write(p []byte) (int, error) {
	if c.left -= int64(len(p)); c.left < 0 {
		return 0, errWriteFailed
	}
	return c.Conn.Write(p)
}

// TestTransferOverBatchedTLS sends a ~1 MB range over HTTP/1.1+TLS through batching
// connections: the client gets the exact bytes in a few large socket writes rather than one
// per TLS record, and a socket write that fails mid-body reaches the handler (logged as a
// failure after the answer started) while the client sees a broken body.
func TestTransferOverBatchedTLS(t *testing.T) {
	var logs testenv.SyncBuffer
	fx := newTransferFixture(t, 48, 20000, func(o *Options) { o.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	whole := fx.chunkBytes(0, 48)
	get := func(srv *httptest.Server) ([]byte, error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+fx.pathFor(whole), nil)
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", whole.Start, whole.End))
		resp, err := srv.Client().Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusPartialContent || resp.TLS == nil || resp.ProtoMajor != 1 {
			return nil, fmt.Errorf("status %d, proto %s", resp.StatusCode, resp.Proto)
		}
		return io.ReadAll(resp.Body)
	}

	conns := make(chan *writeCounter, 1)
	ok := newBatchedTLSServer(t, fx.srv.Handler(), func(l net.Listener) net.Listener { return countListener{Listener: l, conns: conns} })
	if _, err := get(ok); err != nil { // opens the connection; its writes include the handshake
		t.Fatal(err)
	}
	wc := <-conns
	before := wc.writes.Load()
	body, err := get(ok)
	if err != nil || !bytes.Equal(body, fx.body[whole.Start:whole.End+1]) {
		t.Fatalf("%d bytes (%v), want the range's %d", len(body), err, whole.Len())
	}
	records := int64(len(body)/(16<<10)) + 1
	if got := wc.writes.Load() - before; got > records/4+2 {
		t.Fatalf("%d socket writes for %d TLS records", got, records)
	}

	broken := newBatchedTLSServer(t, fx.srv.Handler(), func(l net.Listener) net.Listener { return failListener{Listener: l, after: 64 << 10} })
	if body, err := get(broken); err == nil && bytes.Equal(body, fx.body[whole.Start:whole.End+1]) {
		t.Fatal("the whole body arrived through a connection whose writes fail")
	}
	broken.Close() // waits for the handler to return and log
	if !strings.Contains(logs.String(), "request failed after the answer started") || !strings.Contains(logs.String(), errWriteFailed.Error()) {
		t.Fatalf("the failed write was not reported by the handler; log:\n%s", logs.String())
	}
}

func testutilCounter(t *testing.T, s *Server) float64 {
	t.Helper()
	var m dto.Metric
	if err := s.m.transferBytes.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// discardWriter is a ResponseWriter that keeps nothing and, like the HTTP/2 and HTTP/3
// writers, has no ReadFrom.
type discardWriter struct {
	h      http.Header
	status int
	n      int64
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// serveDiscard runs one transfer request against the handler and checks its status and length.
func serveDiscard(tb testing.TB, h http.Handler, req *http.Request, want int64) {
	w := &discardWriter{h: http.Header{}}
	h.ServeHTTP(w, req)
	if w.status != http.StatusPartialContent || w.n != want {
		tb.Fatalf("status %d, %d bytes; want 206, %d", w.status, w.n, want)
	}
}

// TestTransferMemoryFlat checks that serving a warm range allocates about the same for 64 KiB
// as for 4 MiB: nothing sized by the range.
func TestTransferMemoryFlat(t *testing.T) {
	fx := newTransferFixture(t, 64, 65536)
	h := fx.srv.Handler()
	perRequest := func(chunks uint32) uint64 {
		b := fx.chunkBytes(0, chunks)
		req := httptest.NewRequest(http.MethodGet, fx.pathFor(b), nil)
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", b.Start, b.End))
		serveDiscard(t, h, req, int64(b.Len())) // fill the cache
		const n = 20
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			serveDiscard(t, h, req, int64(b.Len()))
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	small, large := perRequest(1), perRequest(64)
	t.Logf("allocated per request: 1 chunk %d B, 64 chunks (%d B) %d B", small, fx.chunkBytes(0, 64).Len(), large)
	if large > small+64<<10 {
		t.Fatalf("a 4 MiB range allocates %d B per request, a 64 KiB one %d B: allocation scales with the range", large, small)
	}
}

// BenchmarkTransferWarm is the handler's cost per warm range (discarding writer, no network).
func BenchmarkTransferWarm(b *testing.B) {
	for _, chunks := range []uint32{1, 16, 64} {
		b.Run(fmt.Sprintf("chunks=%d", chunks), func(b *testing.B) {
			fx := newTransferFixture(b, 64, 65536)
			h := fx.srv.Handler()
			r := fx.chunkBytes(0, chunks)
			req := httptest.NewRequest(http.MethodGet, fx.pathFor(r), nil)
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", r.Start, r.End))
			serveDiscard(b, h, req, int64(r.Len()))
			b.SetBytes(int64(r.Len()))
			b.ReportAllocs()
			start := testenv.CPUTime()
			for b.Loop() {
				serveDiscard(b, h, req, int64(r.Len()))
			}
			testenv.ReportCPU(b, start)
		})
	}
}

// stallFetcher answers with the first bytes of a xorb's chunk area, then holds the rest back
// until gate is closed (or the request ends).
type stallFetcher struct {
	body  []byte
	first int64
	gate  chan struct{}
}

func (f *stallFetcher) FetchXorbRange(ctx context.Context, _ hash.Hash, start, end int64) (io.ReadCloser, error) {
	return io.NopCloser(&stallReader{ctx: ctx, f: f, at: start, end: end}), nil
}

type stallReader struct {
	ctx     context.Context
	f       *stallFetcher
	at, end int64
}

func (r *stallReader) Read(p []byte) (int, error) {
	if r.at >= r.end {
		return 0, io.EOF
	}
	if r.at >= r.f.first {
		select {
		case <-r.f.gate:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
	lim := r.end
	if r.at < r.f.first {
		lim = min(lim, r.f.first)
	}
	n := copy(p, r.f.body[r.at:lim])
	r.at += int64(n)
	return n, nil
}

// TestBatchedTLSFlushesBeforeWaiting: over HTTP/1.1+TLS through batching connections, a cold
// range whose fill has verified two chunks (far less than a batch) and waits for the origin
// gives the client those two chunks now, not when a batch is full or the fill ends.
func TestBatchedTLSFlushesBeforeWaiting(t *testing.T) {
	for _, size := range []int{20000, 1000} { // 1000: two chunks fit net/http's own 4 KiB buffer
		t.Run(fmt.Sprint(size), func(t *testing.T) { batchedTLSFlushesBeforeWaiting(t, size) })
	}
}

func batchedTLSFlushesBeforeWaiting(t *testing.T, chunkSize int) {
	sf := &stallFetcher{gate: make(chan struct{})}
	var once sync.Once
	release := func() { once.Do(func() { close(sf.gate) }) }
	t.Cleanup(release)
	dc, err := datacache.Open(context.Background(), datacache.Options{Dir: t.TempDir(), MaxBytes: 1 << 30,
		Fetcher: sf, SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	fx := newTransferFixture(t, 24, chunkSize, func(o *Options) { o.Bytes = dc })
	body := fx.body
	_, twoEnd := fx.l.ByteRange(0, 2)
	sf.body, sf.first = body, int64(twoEnd) // before the first request reaches the fetcher
	srv := newBatchedTLSServer(t, fx.srv.Handler(), nil)
	whole := fx.chunkBytes(0, 24)

	type got struct {
		resp *http.Response
		head []byte
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+fx.pathFor(whole), nil)
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", whole.Start, whole.End))
		resp, err := srv.Client().Do(req)
		if err != nil {
			ch <- got{err: err}
			return
		}
		head := make([]byte, twoEnd)
		_, err = io.ReadFull(resp.Body, head)
		ch <- got{resp: resp, head: head, err: err}
	}()
	var g got
	select {
	case g = <-ch:
	case <-time.After(10 * time.Second):
		release()
		t.Fatalf("the two verified chunks (%d bytes) did not reach the client while the fill waited", twoEnd)
	}
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer g.resp.Body.Close()
	if g.resp.StatusCode != http.StatusPartialContent || g.resp.ProtoMajor != 1 || g.resp.TLS == nil {
		t.Fatalf("status %d, proto %s", g.resp.StatusCode, g.resp.Proto)
	}
	if !bytes.Equal(g.head, body[:twoEnd]) {
		t.Fatal("the first two chunks differ from the xorb's")
	}
	release()
	rest, err := io.ReadAll(g.resp.Body)
	if err != nil || !bytes.Equal(append(g.head, rest...), body[whole.Start:whole.End+1]) {
		t.Fatalf("%d bytes in all (%v), want the range's %d", len(g.head)+len(rest), err, whole.Len())
	}
}
