package xetclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// testXorb builds a xorb of 24 chunks of 16-64 KiB, random bytes or (text) bytes that compress,
// and returns its body, layout and the chunks' bytes in order.
func testXorb(t *testing.T, rng *rand.Rand, scheme xorb.Scheme, text bool) (body []byte, l *xorb.Layout, raw []byte) {
	t.Helper()
	bl := xorb.NewBuilder(scheme)
	hc := hash.NewChunker()
	for range 24 {
		c := make([]byte, 16<<10+rng.IntN(48<<10))
		for i := range c {
			if text {
				c[i] = "abcdefgh "[rng.IntN(9)]
			} else {
				c[i] = byte(rng.Uint32())
			}
		}
		if !bl.Add(c, hc.Sum(c)) {
			t.Fatal("builder refused a chunk")
		}
		raw = append(raw, c...)
	}
	body, l = bl.Finish()
	return body, l, raw
}

// wholeXorbAnswer answers with repeats terms over all 24 chunks of l, each of unpacked bytes,
// fetched as one range of the serialized body from host's /xorb.
func wholeXorbAnswer(host string, l *xorb.Layout, bodyLen int, unpacked uint32, repeats int) wire.QueryReconstructionResponseV2 {
	all := wire.ChunkRange{Start: 0, End: 24}
	ans := wire.QueryReconstructionResponseV2{Xorbs: map[hash.Hash][]wire.MultiRangeFetch{
		l.Hash: {{URL: "http://" + host + "/xorb", Ranges: []wire.RangeDescriptor{{
			Chunks: all, Bytes: wire.ByteRange{Start: 0, End: uint64(bodyLen) - 1}}}}},
	}}
	for range repeats {
		ans.Terms = append(ans.Terms, wire.Term{Hash: l.Hash, UnpackedLength: unpacked, Range: all})
	}
	return ans
}

// TestFetchRangeRoom: plan gives each job the room its decoded chunks need, and fetchRange
// decodes into it without growing it (grown by append, a 64 MiB range was copied about twice
// more). Stored chunks: the serialized range (headers included); LZ4: the terms' unpacked bytes
// exactly, also when terms repeat the same chunks (a file repeating itself).
func TestFetchRangeRoom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scheme  xorb.Scheme
		text    bool
		repeats int
	}{
		{"stored", xorb.None, false, 1},
		{"lz4", xorb.LZ4, true, 1},
		{"lz4-repeated-terms", xorb.LZ4, true, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, l, raw := testXorb(t, rand.New(rand.NewPCG(7, uint64(len(tc.name)))), tc.scheme, tc.text)
			if tc.text && len(body) >= len(raw) {
				t.Fatalf("text did not compress (%d of %d): the case tests nothing", len(body), len(raw))
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/xorb" {
					http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
					return
				}
				if !strings.HasPrefix(r.URL.Path, "/v2/reconstructions/") {
					http.NotFound(w, r)
					return
				}
				_ = json.NewEncoder(w).Encode(wholeXorbAnswer(r.Host, l, len(body), uint32(len(raw)), tc.repeats))
			}))
			defer srv.Close()
			c, err := New(Options{Endpoint: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			total := int64(tc.repeats * len(raw))
			b := &block{c: c, base: srv.URL, first: 0, last: total - 1}
			if n, err := b.plan(context.Background(), 0); err != nil || n != total || len(b.jobs) != 1 {
				t.Fatalf("plan: %d bytes, %d jobs, %v", n, len(b.jobs), err)
			}
			j := b.jobs[0]
			want := uint64(len(raw))
			if tc.scheme == xorb.None {
				want = uint64(len(body))
			}
			if j.rawHint != want {
				t.Fatalf("room %d, want %d (raw %d, serialized %d)", j.rawHint, want, len(raw), len(body))
			}
			var net atomic.Int64
			data, ends, _, err := c.fetchRange(context.Background(), j.url, j, nil, nil, 0, &net, nil)
			if err != nil || !bytes.Equal(data, raw) || len(ends) != 24 {
				t.Fatalf("fetchRange: %d bytes, %d chunks, %v", len(data), len(ends), err)
			}
			if uint64(cap(data)) != j.rawHint {
				t.Errorf("decoded into %d bytes of room, plan gave %d: it grew", cap(data), j.rawHint)
			}
		})
	}
}

// oneXorb builds a xorb of 24 random stored chunks and serves it with a reconstruction of one
// term over all of them whose unpacked length is the raw length plus extra. The transfer
// handler writes the first 8 chunks, then waits for release (if not nil) before the rest;
// transfers counts its requests.
func oneXorb(t *testing.T, extra uint32, release chan struct{}) (srv *httptest.Server, raw []byte, transfers *atomic.Int32) {
	t.Helper()
	body, l, raw := testXorb(t, rand.New(rand.NewPCG(9, uint64(extra))), xorb.None, false)
	transfers = new(atomic.Int32)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/xorb" {
			transfers.Add(1)
			w.Header().Set("Content-Range", "bytes 0-"+strconv.Itoa(len(body)-1)+"/"+strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusPartialContent)
			cut := l.StoredEnds[7]
			_, _ = w.Write(body[:cut])
			w.(http.Flusher).Flush()
			if release != nil {
				select {
				case <-release:
				case <-time.After(20 * time.Second):
				}
			}
			_, _ = w.Write(body[cut:])
			return
		}
		_ = json.NewEncoder(w).Encode(wholeXorbAnswer(r.Host, l, len(body), uint32(len(raw))+extra, 1))
	}))
	t.Cleanup(srv.Close)
	return srv, raw, transfers
}

// firstWrite signals the first Write it sees, with its length.
type firstWrite struct {
	bytes.Buffer
	first chan int
}

func (w *firstWrite) Write(p []byte) (int, error) {
	if w.Len() == 0 {
		w.first <- len(p)
	}
	return w.Buffer.Write(p)
}

// TestDownloadStreamsFrontier: an in-order download writes the range at the output's frontier
// as its chunks arrive — here while the server holds back all but the first 8 of 24 chunks —,
// and the whole file is still written once, in order.
func TestDownloadStreamsFrontier(t *testing.T) {
	release := make(chan struct{})
	srv, raw, _ := oneXorb(t, 0, release)
	c, err := New(Options{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := &firstWrite{first: make(chan int, 1)}
	done := make(chan error, 1)
	var file hash.Hash
	go func() {
		_, err := c.Download(context.Background(), file, w, DownloadOptions{Size: int64(len(raw)), SkipVerify: true})
		done <- err
	}()
	select {
	case n := <-w.first:
		if n <= 0 || n >= len(raw) {
			t.Errorf("first write of %d bytes while the server held back 16 of 24 chunks", n)
		}
	case err := <-done:
		t.Fatalf("download ended (%v) before the held-back chunks were sent", err)
	case <-time.After(10 * time.Second):
		t.Fatal("nothing written within 10 s while the first 8 chunks were in: the range is held until complete")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.Bytes(), raw) {
		t.Fatalf("wrote %d bytes, differing from the file's %d", w.Len(), len(raw))
	}
}

// TestStreamedRangeNotRetried: once bytes of a range are out, a range whose terms do not add up
// (the answer claims one byte more than its chunks hold) ends the download with ErrCorrupt after
// one transfer; it is not retried as it would be before any byte was written.
func TestStreamedRangeNotRetried(t *testing.T) {
	srv, raw, transfers := oneXorb(t, 1, nil)
	c, err := New(Options{Endpoint: srv.URL, Retry: RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var file hash.Hash
	var out bytes.Buffer
	_, err = c.Download(context.Background(), file, &out, DownloadOptions{SkipVerify: true})
	if !errors.Is(err, ErrCorrupt) || transfers.Load() != 1 || out.Len() == 0 || out.Len() > len(raw) {
		t.Fatalf("err %v after %d transfers, %d bytes written; want ErrCorrupt after 1, some written", err, transfers.Load(), out.Len())
	}
	// With DownloadAt nothing is out before the range is whole: the range is tried again.
	transfers.Store(0)
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = c.DownloadAt(context.Background(), file, f, DownloadOptions{SkipVerify: true})
	if !errors.Is(err, ErrCorrupt) || transfers.Load() < 2 {
		t.Fatalf("DownloadAt: err %v after %d transfers, want ErrCorrupt after a retry", err, transfers.Load())
	}
}
