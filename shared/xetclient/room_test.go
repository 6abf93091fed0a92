package xetclient

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

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
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			bl := xorb.NewBuilder(tc.scheme)
			hc := hash.NewChunker()
			var raw []byte
			for range 24 {
				c := make([]byte, 16<<10+rng.IntN(48<<10))
				for i := range c {
					if tc.text {
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
			body, l := bl.Finish()
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
				ans := wire.QueryReconstructionResponseV2{Xorbs: map[hash.Hash][]wire.MultiRangeFetch{
					l.Hash: {{URL: "http://" + r.Host + "/xorb", Ranges: []wire.RangeDescriptor{{
						Chunks: wire.ChunkRange{Start: 0, End: 24}, Bytes: wire.ByteRange{Start: 0, End: uint64(len(body)) - 1}}}}},
				}}
				for range tc.repeats {
					ans.Terms = append(ans.Terms, wire.Term{Hash: l.Hash, UnpackedLength: uint32(len(raw)), Range: wire.ChunkRange{Start: 0, End: 24}})
				}
				_ = json.NewEncoder(w).Encode(ans)
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
			data, ends, _, err := c.fetchRange(context.Background(), j.url, j, nil, nil, 0, &net)
			if err != nil || !bytes.Equal(data, raw) || len(ends) != 24 {
				t.Fatalf("fetchRange: %d bytes, %d chunks, %v", len(data), len(ends), err)
			}
			if uint64(cap(data)) != j.rawHint {
				t.Errorf("decoded into %d bytes of room, plan gave %d: it grew", cap(data), j.rawHint)
			}
		})
	}
}
