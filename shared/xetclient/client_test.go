package xetclient_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// randBytes returns n pseudo-random bytes from seed (incompressible).
func randBytes(seed uint64, n int) []byte {
	r := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

// textBytes returns n bytes of compressible, non-repeating text.
func textBytes(seed uint64, n int) []byte {
	r := mrand.New(mrand.NewPCG(seed, 7))
	words := []string{"xet ", "chunk ", "xorb ", "shard ", "merkle ", "hash ", "edge ", "origin ", "range\n"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		fmt.Fprintf(&b, "%d ", r.IntN(100000))
	}
	return b.Bytes()[:n]
}

// startFake serves f on an httptest server.
func startFake(t testing.TB, f *fakeCAS) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	f.base = srv.URL
	return srv
}

func newClient(t testing.TB, endpoint string, mut func(*xetclient.Options)) *xetclient.Client {
	t.Helper()
	o := xetclient.Options{
		Endpoint: endpoint,
		Token:    "secret-token",
		Retry:    xetclient.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
	}
	if mut != nil {
		mut(&o)
	}
	c, err := xetclient.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// memAt is an in-memory io.WriterAt.
type memAt struct {
	mu  sync.Mutex
	buf []byte
}

func (m *memAt) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if end := int(off) + len(p); end > len(m.buf) {
		m.buf = append(m.buf, make([]byte, end-len(m.buf))...)
	}
	copy(m.buf[off:], p)
	return len(p), nil
}

func upload(t testing.TB, c *xetclient.Client, data ...[]byte) []xetclient.UploadResult {
	t.Helper()
	files := make([]xetclient.UploadFile, len(data))
	for i, d := range data {
		files[i] = xetclient.UploadFile{Path: fmt.Sprintf("f%d", i), Reader: bytes.NewReader(d)}
	}
	res, err := c.UploadFiles(context.Background(), files, xetclient.UploadOptions{})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	return res
}

func download(t testing.TB, c *xetclient.Client, h hash.Hash, opts xetclient.DownloadOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := c.Download(context.Background(), h, &buf, opts)
	if err != nil {
		t.Fatalf("download %s: %v", h, err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("download %s: returned %d, wrote %d", h, n, buf.Len())
	}
	return buf.Bytes()
}

func totalSent(res []xetclient.UploadResult) int64 {
	var n int64
	for _, r := range res {
		n += r.BytesSent
	}
	return n
}

func TestRoundTrip(t *testing.T) {
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c := newClient(t, srv.URL, func(o *xetclient.Options) { o.BlockSize = 5<<20 + 12345 })

	big := randBytes(1, 70<<20) // more than one xorb (64 MiB raw)
	files := map[string][]byte{
		"empty":  {},
		"one":    {'x'},
		"small":  randBytes(2, 100<<10),
		"text":   textBytes(3, 3<<20),
		"multi":  big,
		"onfile": randBytes(4, 300<<10),
	}
	names := []string{"empty", "one", "small", "text", "multi", "onfile"}
	var in []xetclient.UploadFile
	for _, n := range names {
		if n == "onfile" {
			p := filepath.Join(t.TempDir(), "onfile.bin")
			if err := os.WriteFile(p, files[n], 0o600); err != nil {
				t.Fatal(err)
			}
			in = append(in, xetclient.UploadFile{Path: p})
			continue
		}
		in = append(in, xetclient.UploadFile{Path: n, Reader: bytes.NewReader(files[n])})
	}
	var last, total int64
	res, err := c.UploadFiles(context.Background(), in, xetclient.UploadOptions{
		Progress: func(done, tot int64) { last, total = done, tot },
	})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, d := range files {
		sum += int64(len(d))
	}
	if last != sum {
		t.Errorf("progress ended at %d of %d (total %d)", last, sum, total)
	}
	if got, want := totalSent(res), f.xorbBytes.Load()+f.shardBytes.Load(); got != want {
		t.Errorf("BytesSent sum %d, server received %d", got, want)
	}
	f.mu.Lock()
	nx := len(f.xorbs)
	f.mu.Unlock()
	if nx < 2 {
		t.Errorf("%d xorbs stored, want at least 2", nx)
	}
	if !f.hasSession() {
		t.Error("no X-Xet-Session-Id in UUID v7 form seen")
	}
	for i, n := range names {
		data := files[n]
		r := res[i]
		_, info, err := chunk.HashAll(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if r.FileHash != info.FileHash || r.Size != int64(len(data)) || r.SHA256 != sha256.Sum256(data) {
			t.Errorf("%s: result %+v, want hash %s size %d", n, r, info.FileHash, len(data))
		}
		if n == "empty" && !r.FileHash.IsZero() {
			t.Errorf("empty file hash %s", r.FileHash)
		}
		t.Run(n, func(t *testing.T) {
			got := download(t, c, r.FileHash, xetclient.DownloadOptions{})
			if !bytes.Equal(got, data) {
				t.Fatalf("Writer download differs (%d vs %d bytes)", len(got), len(data))
			}
			var at memAt
			var done int64
			k, err := c.DownloadAt(context.Background(), r.FileHash, &at, xetclient.DownloadOptions{
				Size:     int64(len(data)),
				Progress: func(d, _ int64) { done = d },
			})
			if err != nil || k != int64(len(data)) || done != k || !bytes.Equal(at.buf, data) {
				t.Fatalf("WriterAt download: n=%d progress=%d err=%v equal=%v", k, done, err, bytes.Equal(at.buf, data))
			}
		})
	}
	if f.transferHdr.Load() {
		t.Error("a transfer request carried an Authorization header")
	}
}

func TestRanges(t *testing.T) {
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c := newClient(t, srv.URL, func(o *xetclient.Options) { o.BlockSize = 1<<20 + 7 })
	data := append(randBytes(5, 5<<20), textBytes(6, 4<<20)...)
	size := int64(len(data))
	h := upload(t, c, data)[0].FileHash

	for _, tc := range []struct {
		a, b  int64
		known bool
	}{
		{0, 0, false}, {0, 99, false}, {12345, 2_000_000, false}, {size - 1, size - 1, false},
		{size - 10, size + 1000, false}, {0, size - 1, false}, {5_000_000, 1 << 62, false},
		{1 << 20, 3<<20 - 1, true}, {size - 70000, size + 5, true}, {65536, 65536 * 3, false},
	} {
		t.Run(fmt.Sprintf("%d-%d", tc.a, tc.b), func(t *testing.T) {
			opts := xetclient.DownloadOptions{Range: &[2]int64{tc.a, tc.b}}
			if tc.known {
				opts.Size = size
			}
			got := download(t, c, h, opts)
			want := data[tc.a:min(tc.b+1, size)]
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d", len(got), len(want))
			}
		})
	}
	for _, tc := range []struct {
		name string
		opts xetclient.DownloadOptions
	}{
		{"past EOF", xetclient.DownloadOptions{Range: &[2]int64{size, size + 10}}},
		{"past EOF, size known", xetclient.DownloadOptions{Range: &[2]int64{size + 1, size + 10}, Size: size}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Download(context.Background(), h, &bytes.Buffer{}, tc.opts)
			if !errors.Is(err, xetclient.ErrRangeNotSatisfiable) {
				t.Fatalf("err = %v, want ErrRangeNotSatisfiable", err)
			}
		})
	}
	// A wrong Size is the caller's mistake, reported as such and not as corruption (issue 14).
	for _, tc := range []struct {
		size int64
		msg  string
	}{
		{size + 1, fmt.Sprintf("has %d bytes, not the %d given as its size", size, size+1)},
		{size - 1, fmt.Sprintf("is longer than the %d bytes given as its size", size-1)},
		{1 << 20, "is longer than the 1048576 bytes given as its size"},
	} {
		t.Run(fmt.Sprintf("size %d of %d", tc.size, size), func(t *testing.T) {
			_, err := c.Download(context.Background(), h, &bytes.Buffer{}, xetclient.DownloadOptions{Size: tc.size})
			if !errors.Is(err, xetclient.ErrSizeMismatch) || errors.Is(err, xetclient.ErrCorrupt) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want ErrSizeMismatch saying %q", err, tc.msg)
			}
		})
	}
	// Without Size, the total comes from the reconstruction: at the latest with the block where
	// the file ends, and before the last byte is written.
	t.Run("total from the reconstruction", func(t *testing.T) {
		var firstTotalAt, lastTotal int64 = -1, 0
		var stats xetclient.DownloadStats
		n, err := c.Download(context.Background(), h, &bytes.Buffer{}, xetclient.DownloadOptions{Stats: &stats,
			Progress: func(done, total int64) {
				if total > 0 && firstTotalAt < 0 {
					firstTotalAt = done
				}
				lastTotal = total
			}})
		if err != nil || n != size || lastTotal != size || firstTotalAt < 0 || firstTotalAt >= size {
			t.Fatalf("n=%d err=%v: last total %d (want %d), first seen at %d bytes done", n, err, lastTotal, size, firstTotalAt)
		}
		if stats.TransferBytes <= 0 {
			t.Errorf("TransferBytes = %d", stats.TransferBytes)
		}
	})
}

func TestDedupWithinUpload(t *testing.T) {
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c := newClient(t, srv.URL, nil)
	a := randBytes(7, 2<<20)
	twice := append(append([]byte{}, a...), a...)
	res := upload(t, c, a, a, twice)
	if res[1].BytesSent != 0 {
		t.Errorf("identical second file sent %d bytes", res[1].BytesSent)
	}
	// twice = a+a: only the chunk around the seam is new.
	if res[2].BytesSent > int64(len(a))/4 {
		t.Errorf("a+a after a sent %d bytes", res[2].BytesSent)
	}
	if res[0].BytesSent < int64(len(a)) {
		t.Errorf("first file sent %d bytes, less than its size", res[0].BytesSent)
	}
	if got := download(t, c, res[2].FileHash, xetclient.DownloadOptions{}); !bytes.Equal(got, twice) {
		t.Fatal("a+a differs")
	}
}

func TestGlobalDedup(t *testing.T) {
	base := randBytes(8, 4<<20)
	edited := bytes.Clone(base)
	copy(edited[2<<20:], "an edit in the middle of the file")
	for _, tc := range []struct {
		name    string
		noDedup bool
	}{{"dedup", false}, {"server without dedup", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCAS(t)
			f.noDedup = tc.noDedup
			srv := startFake(t, f)
			upload(t, newClient(t, srv.URL, nil), base)
			c2 := newClient(t, srv.URL, nil) // a new session: nothing local to dedup against
			res := upload(t, c2, edited)
			if f.hitsOf("dedup") == 0 {
				t.Error("no global dedup query")
			}
			sent, size := res[0].BytesSent, int64(len(edited))
			if tc.noDedup && sent < size {
				t.Errorf("without dedup answers sent %d bytes of %d", sent, size)
			}
			if !tc.noDedup && sent > size/4 {
				t.Errorf("second upload sent %d bytes of %d", sent, size)
			}
			if got := download(t, c2, res[0].FileHash, xetclient.DownloadOptions{}); !bytes.Equal(got, edited) {
				t.Fatal("edited file differs")
			}
		})
	}
}

func TestV1Fallback(t *testing.T) {
	f := newFakeCAS(t)
	f.noV2Recon, f.noV2Shards = true, true
	srv := startFake(t, f)
	c := newClient(t, srv.URL, nil)
	a, b := randBytes(9, 200<<10), textBytes(10, 300<<10)
	ra := upload(t, c, a)
	rb := upload(t, c, b)
	for _, tc := range []struct {
		h    hash.Hash
		want []byte
	}{{ra[0].FileHash, a}, {rb[0].FileHash, b}} {
		if got := download(t, c, tc.h, xetclient.DownloadOptions{Range: &[2]int64{100, 150000}}); !bytes.Equal(got, tc.want[100:150001]) {
			t.Fatal("v1 download differs")
		}
	}
	for route, want := range map[string]int{"shard-v2": 1, "shard-v1": 2, "recon-v2": 1, "recon-v1": 2} {
		if got := f.hitsOf(route); got != want {
			t.Errorf("%s called %d times, want %d (fallback must be remembered)", route, got, want)
		}
	}
}

func TestNotFound(t *testing.T) {
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c := newClient(t, srv.URL, nil)
	_, err := c.Download(context.Background(), hash.Chunk([]byte("nothing")), &bytes.Buffer{}, xetclient.DownloadOptions{})
	if !errors.Is(err, xetclient.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if f.hitsOf("recon-v2") != 1 || f.hitsOf("recon-v1") != 1 {
		t.Errorf("v2 %d, v1 %d calls; want one each", f.hitsOf("recon-v2"), f.hitsOf("recon-v1"))
	}
	// A v1 404 must not make the client give up on v2.
	_, _ = c.Download(context.Background(), hash.Chunk([]byte("nothing")), &bytes.Buffer{}, xetclient.DownloadOptions{})
	if f.hitsOf("recon-v2") != 2 {
		t.Errorf("v2 not tried again after a not-found")
	}
}

func TestURLRefreshOn403(t *testing.T) {
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c := newClient(t, srv.URL, func(o *xetclient.Options) { o.Concurrency = 3 })
	data := randBytes(11, 1<<20)
	h := upload(t, c, data)[0].FileHash

	f.mu.Lock()
	f.forbidN = 1
	f.mu.Unlock()
	if got := download(t, c, h, xetclient.DownloadOptions{}); !bytes.Equal(got, data) {
		t.Fatal("differs after refresh")
	}
	if n := f.hitsOf("recon-v2"); n != 2 {
		t.Errorf("%d reconstruction calls, want 2 (one refresh)", n)
	}

	f.mu.Lock()
	f.forbidAll = true
	f.mu.Unlock()
	_, err := c.Download(context.Background(), h, &bytes.Buffer{}, xetclient.DownloadOptions{})
	var se *xetclient.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusForbidden {
		t.Fatalf("err = %v, want a 403 StatusError once refreshes are exhausted", err)
	}
}

func TestRetries(t *testing.T) {
	data := textBytes(12, 1<<20)
	// The dedup queries the upload makes against an empty server (the first chunk, anchors):
	// a failed one is not retried, so the failing run makes exactly as many.
	base := newFakeCAS(t)
	upload(t, newClient(t, startFake(t, base).URL, nil), data)
	queries := base.hitsOf("dedup")
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c := newClient(t, srv.URL, nil)
	f.failNext("xorb", 2)
	f.failNext("shard-v2", 2)
	f.failNext("dedup", 1)
	h := upload(t, c, data)[0].FileHash
	f.failNext("recon-v2", 2)
	f.mu.Lock()
	f.truncN = 2
	f.mu.Unlock()
	if got := download(t, c, h, xetclient.DownloadOptions{}); !bytes.Equal(got, data) {
		t.Fatal("differs")
	}
	for route, want := range map[string]int{"xorb": 3, "shard-v2": 3, "dedup": queries, "recon-v2": 3, "transfer": 3} {
		if got := f.hitsOf(route); got != want {
			t.Errorf("%s called %d times, want %d", route, got, want)
		}
	}

	f.failNext("xorb", 100)
	_, err := c.UploadFiles(context.Background(), []xetclient.UploadFile{{Reader: bytes.NewReader(randBytes(13, 1000))}}, xetclient.UploadOptions{})
	var se *xetclient.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable {
		t.Fatalf("err = %v, want a 503 StatusError after the last attempt", err)
	}
	if got := f.hitsOf("xorb"); got != 3+6 {
		t.Errorf("xorb called %d times in all, want 9 (6 attempts for the failing one)", got)
	}
}

// TestResumeCutRange: a transfer answer cut mid-body is resumed after the last whole chunk it
// delivered, not fetched again from the start of its range: the retry asks for a later Range
// and the bytes served in all stay within one chunk of a clean download's.
func TestResumeCutRange(t *testing.T) {
	data := randBytes(21, 6<<20)
	f := newFakeCAS(t)
	c := newClient(t, startFake(t, f).URL, nil)
	h := upload(t, c, data)[0].FileHash
	if got := download(t, c, h, xetclient.DownloadOptions{}); !bytes.Equal(got, data) {
		t.Fatal("clean download differs")
	}
	clean := f.served.Swap(0)
	f.mu.Lock()
	first := len(f.ranges)
	f.cutN = 1
	f.mu.Unlock()
	if got := download(t, c, h, xetclient.DownloadOptions{}); !bytes.Equal(got, data) {
		t.Fatal("download after a cut differs")
	}
	served := f.served.Load()
	f.mu.Lock()
	ranges := append([]string(nil), f.ranges[first:]...)
	f.mu.Unlock()
	if len(ranges) < 2 {
		t.Fatalf("transfer requests %q, want the cut one and its resumption", ranges)
	}
	if ranges[0] == ranges[1] {
		t.Errorf("the cut range was asked again whole: %q", ranges)
	}
	const maxChunk = 128 << 10 // a chunk's largest serialized size, header included, rounded up
	if served > clean+maxChunk {
		t.Errorf("served %d bytes after the cut, a clean download %d: more than one chunk fetched twice", served, clean)
	}
}

func TestNoRetryOnClientErrors(t *testing.T) {
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c := newClient(t, srv.URL, func(o *xetclient.Options) { o.Token = "wrong" })
	_, err := c.UploadFiles(context.Background(), []xetclient.UploadFile{{Reader: bytes.NewReader([]byte("hi"))}}, xetclient.UploadOptions{})
	var se *xetclient.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Fatalf("err = %v, want 401", err)
	}
	if got := f.hitsOf("xorb"); got != 1 {
		t.Errorf("401 retried: %d calls", got)
	}
}

func TestShardErrorFrames(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retryable bool
		calls     int
	}{{"retryable", true, 2}, {"fatal", false, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCAS(t)
			f.frames = append(f.frames, wireError("injected failure", tc.retryable))
			srv := startFake(t, f)
			c := newClient(t, srv.URL, nil)
			_, err := c.UploadFiles(context.Background(), []xetclient.UploadFile{{Reader: bytes.NewReader([]byte("hello world"))}}, xetclient.UploadOptions{})
			var se *xetclient.ShardError
			if tc.retryable && err != nil {
				t.Fatalf("retryable error frame not retried: %v", err)
			}
			if !tc.retryable && (!errors.As(err, &se) || se.Message != "injected failure" || se.Retryable) {
				t.Fatalf("err = %v, want a fatal *ShardError", err)
			}
			if got := f.hitsOf("shard-v2"); got != tc.calls {
				t.Errorf("shard posted %d times, want %d", got, tc.calls)
			}
		})
	}
}

func TestCorruptTransferDetected(t *testing.T) {
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c := newClient(t, srv.URL, nil)
	data := randBytes(14, 500<<10)
	h := upload(t, c, data)[0].FileHash
	for _, tc := range []struct {
		skip    bool
		wantErr bool
	}{{false, true}, {true, false}} {
		f.mu.Lock()
		f.corruptN = 1
		f.mu.Unlock()
		var buf bytes.Buffer
		_, err := c.Download(context.Background(), h, &buf, xetclient.DownloadOptions{SkipVerify: tc.skip})
		if tc.wantErr != errors.Is(err, xetclient.ErrCorrupt) {
			t.Errorf("SkipVerify=%v: err = %v", tc.skip, err)
		}
		if tc.skip && bytes.Equal(buf.Bytes(), data) {
			t.Error("the fake did not corrupt anything")
		}
	}
}

func TestTokenURL(t *testing.T) {
	f := newFakeCAS(t)
	srv := startFake(t, f)
	c, err := xetclient.New(xetclient.Options{TokenURL: srv.URL + "/token"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := []byte("token from a hub-style route")
	h := upload(t, c, data)[0].FileHash
	if got := download(t, c, h, xetclient.DownloadOptions{}); !bytes.Equal(got, data) {
		t.Fatal("differs")
	}
	if n := f.hitsOf("token"); n != 1 {
		t.Errorf("token fetched %d times, want 1 (cached until 30 s before exp)", n)
	}
}

func TestRefreshingTokenSource(t *testing.T) {
	for _, tc := range []struct {
		ttl   time.Duration
		calls int
	}{{time.Hour, 1}, {20 * time.Second, 3}, {0, 1}} {
		n := 0
		s := xetclient.NewRefreshingTokenSource(func(context.Context) (xetclient.Token, error) {
			n++
			tok := xetclient.Token{Value: fmt.Sprint(n)}
			if tc.ttl > 0 {
				tok.Expiry = time.Now().Add(tc.ttl)
			}
			return tok, nil
		})
		for i := 0; i < 3; i++ {
			if _, err := s.Token(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if n != tc.calls {
			t.Errorf("ttl %v: %d fetches, want %d", tc.ttl, n, tc.calls)
		}
	}
}

func TestHTTP2(t *testing.T) {
	f := newFakeCAS(t)
	var h2 sync.Map
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h2.Store(r.Proto, true)
		f.handler().ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f.base = srv.URL
	c := newClient(t, srv.URL, func(o *xetclient.Options) { o.Protocol = xetclient.HTTP2; o.InsecureSkipVerify = true })
	data := textBytes(15, 700<<10)
	h := upload(t, c, data)[0].FileHash
	if got := download(t, c, h, xetclient.DownloadOptions{}); !bytes.Equal(got, data) {
		t.Fatal("differs")
	}
	if _, ok := h2.Load("HTTP/2.0"); !ok {
		t.Error("no HTTP/2 request seen")
	}
	if _, ok := h2.Load("HTTP/1.1"); ok {
		t.Error("HTTP/1.1 request seen")
	}
}

// selfSigned returns a TLS certificate for 127.0.0.1.
func selfSigned(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "xetclient test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestHTTP3(t *testing.T) {
	f := newFakeCAS(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protos sync.Map
	srv := &http3.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			protos.Store(r.Proto, true)
			f.handler().ServeHTTP(w, r)
		}),
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(pc) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
		pc.Close()
	})
	f.base = "https://" + pc.LocalAddr().String()
	c := newClient(t, f.base, func(o *xetclient.Options) { o.Protocol = xetclient.HTTP3; o.InsecureSkipVerify = true })
	data := append(randBytes(16, 900<<10), textBytes(17, 600<<10)...)
	h := upload(t, c, data)[0].FileHash
	if got := download(t, c, h, xetclient.DownloadOptions{Range: &[2]int64{1000, 1 << 40}}); !bytes.Equal(got, data[1000:]) {
		t.Fatal("differs")
	}
	if _, ok := protos.Load("HTTP/3.0"); !ok {
		t.Error("no HTTP/3 request seen")
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []xetclient.Options{
		{},
		{Endpoint: "ftp://x"},
		{Endpoint: "http://127.0.0.1:1", Protocol: xetclient.HTTP3},
		{Endpoint: "http://127.0.0.1:1", Protocol: 9},
	} {
		if _, err := xetclient.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func BenchmarkUpload(b *testing.B) {
	f := newFakeCAS(b)
	srv := startFake(b, f)
	data := textBytes(20, 16<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		c := newClient(b, srv.URL, func(o *xetclient.Options) { o.DisableGlobalDedup = true })
		upload(b, c, data)
	}
}

// BenchmarkUploadNew uploads data the server does not have, with global dedup on (the
// default): every chunk of the file is held while its anchors are asked about, then packed.
// Each upload goes to a new fake server.
func BenchmarkUploadNew(b *testing.B) {
	data := randBytes(22, 48<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		srv := startFake(b, newFakeCAS(b))
		upload(b, newClient(b, srv.URL, nil), data)
		srv.Close()
	}
}

func BenchmarkDownload(b *testing.B) {
	f := newFakeCAS(b)
	srv := startFake(b, f)
	data := textBytes(21, 16<<20)
	c := newClient(b, srv.URL, nil)
	h := upload(b, c, data)[0].FileHash
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var at memAt
		at.buf = make([]byte, 0, len(data))
		if _, err := c.DownloadAt(context.Background(), h, &at, xetclient.DownloadOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func randHash() hash.Hash {
	var h hash.Hash
	_, _ = rand.Read(h[:])
	return h
}
