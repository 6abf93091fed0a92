package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/xfertest"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// fetchStatus GETs a transfer URL for its first signed range and returns the status.
func (e *env) fetchStatus(u string) int {
	e.t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		e.t.Fatal(err)
	}
	r := p.Query().Get("r")
	var s, end uint64
	if _, err := fmt.Sscanf(r, "%d-%d", &s, &end); err != nil {
		e.t.Fatalf("URL %s: ranges %q: %v", u, r, err)
	}
	resp := e.fetch(u, fmt.Sprintf("bytes=%d-%d", s, end))
	read(e.t, resp)
	return resp.StatusCode
}

// TestTransferURLsBoundToFileAndScope: every URL of a single-file answer, and every batch
// entry, is bound to a file and the token's scope. Hiding a file in a scope makes the URLs
// issued for it there 403 at once (single answers, and batch entries bound to it), while the
// same file's URLs issued in another scope and the URLs of the scope's other files keep
// working. A batch entry shared by two files is bound to the first of them in the request.
func TestTransferURLsBoundToFileAndScope(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testTransferURLsBound(t, b) })
	}
}

func testTransferURLsBound(t *testing.T, b backend) {
	e := newEnv(t, b)
	const scope, other = "models/acme/bound", "models/acme/bound-too"
	fa := makeFixture(t, 41, 2, 4, 1000)
	fb := makeFixture(t, 42, 1, 4, 1000)
	e.upload(fa, scope)
	e.upload(fb, scope)
	e.upload(fa, other)
	// c shares fa's first xorb entry (whole-xorb term, identical fetch entry) and has fb's.
	c, _ := e.composeFile(scope, chunkPart{fa, 0, 0, 4, 1000}, chunkPart{fb, 0, 0, 4, 1000})
	tok, otherTok := e.token(scope, auth.Read), e.token(other, auth.Read)

	urls := func(tok string, f hash.Hash) []string {
		get := func(path string) (int, []byte) {
			resp := e.do("GET", path, tok, nil)
			return resp.StatusCode, read(t, resp)
		}
		var out []string
		for _, fe := range xfertest.Fetches(t, get, "", f) {
			out = append(out, fe.URL)
		}
		return out
	}
	aURLs, aOther, bURLs := urls(tok, fa.file), urls(otherTok, fa.file), urls(tok, fb.file)
	// The batch of fa and c: fa's second xorb is fa's alone, its first is shared with c (bound
	// to fa, first in the request), fb's xorb is c's.
	var batch batchAnswer
	if err := json.Unmarshal(expect(t, e.do("GET", batchQuery(fa.file, c), tok, nil), 200), &batch); err != nil {
		t.Fatal(err)
	}
	byXorb := func(x int, f *fixture) []string {
		var out []string
		for _, en := range batch.FetchInfo[f.layouts[x].Hash.String()] {
			out = append(out, en.URL)
		}
		if len(out) == 0 {
			t.Fatalf("batch has no entry for xorb %d of %s", x, f.file)
		}
		return out
	}
	aOnly, shared, cOnly := byXorb(1, fa), byXorb(0, fa), byXorb(0, fb)
	for _, u := range [][]string{aURLs, aOther, bURLs, aOnly, shared, cOnly} {
		for _, x := range u {
			if st := e.fetchStatus(x); st != 206 {
				t.Fatalf("before the hide: %s: %d", x, st)
			}
		}
	}

	if err := e.idx.Hide(context.Background(), scope, []hash.Hash{fa.file}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		urls []string
		want int
	}{
		{"hidden file's URLs", aURLs, 403},
		{"hidden file's batch entries", aOnly, 403},
		{"batch entry shared, bound to the hidden file", shared, 403},
		{"same file, URLs issued in another scope", aOther, 206},
		{"other file of the scope", bURLs, 206},
		{"batch entries of the visible file", cOnly, 206},
	} {
		for _, u := range c.urls {
			if st := e.fetchStatus(u); st != c.want {
				t.Errorf("%s: %s: %d, want %d", c.name, u, st, c.want)
			}
		}
	}
	// The visible file c is still served whole by its own (single) answer.
	for _, u := range urls(tok, c) {
		if st := e.fetchStatus(u); st != 206 {
			t.Errorf("c's own URL after the hide: %d", st)
		}
	}
}

// countingIndex counts the visibility lookups that reach the database (File and FileBytes).
type countingIndex struct {
	index.Index
	n atomic.Int64
}

func (c *countingIndex) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	c.n.Add(1)
	return c.Index.File(ctx, h, scope)
}

func (c *countingIndex) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	c.n.Add(1)
	return c.Index.FileBytes(ctx, h, scope)
}

// TestTransferVisibilityCached: behind the origin's FileCache, the transfer route's visibility
// check is answered from memory while the answer is fresh (no index round trip per request),
// and a Hide through the cache still refuses the URL at once.
func TestTransferVisibilityCached(t *testing.T) {
	db, objs := sqliteLocal().open(t)
	counted := &countingIndex{Index: db}
	fc, err := index.NewFileCache(counted, index.FileCacheOptions{MaxBytes: 16 << 20, VisibilityTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fc.Close() })
	e := newEnvWith(t, fc, objs)
	const scope = "models/acme/cached-transfer"
	f := makeFixture(t, 51, 2, 4, 1000)
	e.upload(f, scope)
	var v2 reconV2
	if err := json.Unmarshal(expect(t, e.do("GET", "/v2/reconstructions/"+f.file.String(), e.token(scope, auth.Read), nil), 200), &v2); err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, es := range v2.Xorbs {
		for _, en := range es {
			urls = append(urls, en.URL)
		}
	}
	for _, u := range urls { // warm: the cache may have dropped a set (ristretto admits asynchronously)
		e.fetchStatus(u)
	}
	fc.Wait()
	before := counted.n.Load()
	const rounds = 50
	for range rounds {
		for _, u := range urls {
			if st := e.fetchStatus(u); st != 206 {
				t.Fatalf("transfer: %d", st)
			}
		}
	}
	if n := counted.n.Load() - before; n != 0 {
		t.Fatalf("%d transfers asked the index %d times for visibility, want 0 (cached)", rounds*len(urls), n)
	}
	if err := fc.Hide(context.Background(), scope, []hash.Hash{f.file}); err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		if st := e.fetchStatus(u); st != 403 {
			t.Fatalf("transfer after the hide: %d, want 403", st)
		}
	}
}
