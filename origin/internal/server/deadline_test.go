package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// stalledIndex answers nothing: every call waits for its context, like a database behind a
// partition.
type stalledIndex struct{ index.Index }

func (stalledIndex) XorbSize(ctx context.Context, _ hash.Hash) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (stalledIndex) RecordPossession(ctx context.Context, _ string, _ hash.Hash) error {
	<-ctx.Done()
	return ctx.Err()
}

func (stalledIndex) Possessed(ctx context.Context, _ string, _ []hash.Hash) (map[hash.Hash]bool, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestBoundedIndex(t *testing.T) {
	const d = 50 * time.Millisecond
	b := newBoundedIndex(stalledIndex{}, d)
	start := time.Now()
	_, err := b.XorbSize(context.Background(), hash.Hash{})
	if !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("stalled index: %v, want index.ErrUnavailable", err)
	}
	if took := time.Since(start); took > 20*d {
		t.Fatalf("stalled index answered after %v, bound %v", took, d)
	}
	// The possession calls of ingest and the dedup route are bounded too.
	if err := b.RecordPossession(context.Background(), "s", hash.Hash{}); !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("stalled RecordPossession: %v, want index.ErrUnavailable", err)
	}
	if _, err := b.Possessed(context.Background(), "s", []hash.Hash{{}}); !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("stalled Possessed: %v, want index.ErrUnavailable", err)
	}
	// The caller leaving is not the dependency's fault.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.XorbSize(ctx, hash.Hash{}); !errors.Is(err, context.Canceled) || errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("cancelled caller: %v, want context.Canceled only", err)
	}
}

// paceStore is an object store whose Put reads the body in small pieces, gap apart, and whose
// GetRange bodies stall once they handed out what they have.
type paceStore struct {
	Objects
	gap   time.Duration
	stall bool // Put waits for its context after reading the body
	data  []byte
}

func (s *paceStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	buf := make([]byte, 4)
	for {
		select {
		case <-time.After(s.gap):
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := r.Read(buf); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	if s.stall {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *paceStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.Put(ctx, key, r, size)
}

func (s *paceStore) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	rc, err := s.GetRange(ctx, key, 0, int64(len(s.data)))
	return rc, int64(len(s.data)), err
}

func (s *paceStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return io.NopCloser(io.MultiReader(bytes.NewReader(s.data), ctxReader{ctx})), nil
}

// ctxReader blocks until its context ends.
type ctxReader struct{ ctx context.Context }

func (r ctxReader) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

func TestBoundedObjects(t *testing.T) {
	const d = 100 * time.Millisecond
	body := strings.Repeat("x", 40) // ten reads, d/3 apart: longer than d in all, never idle for d

	t.Run("steady put", func(t *testing.T) {
		b := &boundedObjects{Objects: &paceStore{gap: d / 3}, d: d}
		if err := b.Put(context.Background(), "k", strings.NewReader(body), int64(len(body))); err != nil {
			t.Fatalf("a put that keeps reading failed: %v", err)
		}
	})
	t.Run("steady create", func(t *testing.T) {
		b := &boundedObjects{Objects: &paceStore{gap: d / 3}, d: d}
		if err := b.Create(context.Background(), "k", strings.NewReader(body), int64(len(body))); err != nil {
			t.Fatalf("a create that keeps reading failed: %v", err)
		}
	})
	for _, write := range []string{"put", "create"} {
		t.Run("stalled "+write, func(t *testing.T) {
			b := &boundedObjects{Objects: &paceStore{gap: d / 3, stall: true}, d: d}
			call := b.Put
			if write == "create" {
				call = b.Create
			}
			// The test's own bound, far above d: a call that is not bounded fails, not hangs.
			ctx, cancel := context.WithTimeout(context.Background(), 50*d)
			defer cancel()
			start := time.Now()
			err := call(ctx, "k", strings.NewReader(body), int64(len(body)))
			if !errors.Is(err, objstore.ErrUnavailable) {
				t.Fatalf("a %s that never finishes: %v, want objstore.ErrUnavailable", write, err)
			}
			if took := time.Since(start); took > 20*d {
				t.Fatalf("stalled %s failed after %v, bound %v", write, took, d)
			}
		})
	}
	for _, get := range []string{"range", "whole"} {
		t.Run("body "+get, func(t *testing.T) { testBoundedBody(t, d, get) })
	}
}

// testBoundedBody checks a body returned by boundedObjects.GetRange ("range") or Get ("whole").
func testBoundedBody(t *testing.T, d time.Duration, get string) {
	b := &boundedObjects{Objects: &paceStore{data: []byte("abc")}, d: d}
	// The test's own bound, far above d: a body that is not watched fails, not hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 50*d)
	defer cancel()
	var rc io.ReadCloser
	var err error
	if get == "range" {
		rc, err = b.GetRange(ctx, "k", 0, 3)
	} else {
		rc, _, err = b.Get(ctx, "k")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// A consumer slower than d (a slow client downstream) is not the store's fault.
	<-time.After(2 * d)
	got := make([]byte, 3)
	if _, err := io.ReadFull(rc, got); err != nil || string(got) != "abc" {
		t.Fatalf("read after a pause: %q, %v", got, err)
	}
	// The store stalling mid-body is.
	start := time.Now()
	if _, err := rc.Read(got); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("stalled body: %v, want objstore.ErrUnavailable", err)
	}
	if took := time.Since(start); took > 20*d {
		t.Fatalf("stalled body failed after %v, bound %v", took, d)
	}
}

// TestStalledDependencies puts proxies between the server and the real PostgreSQL and MinIO
// and stalls each in turn (connections stay open, nothing answers): every request that needs
// the stalled dependency must still be answered, with 503 and Retry-After, within a bound set
// by the dependency timeout; requests that do not need it keep working; after the stall the
// same requests succeed.
func TestStalledDependencies(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		// bound allows for the timeout, the index's own write timeout (registrations), and a
		// loaded machine.
		bound = 5 * time.Second
	)
	pgAddr, err := url.Parse(testenv.Require(t, testenv.PostgresDSN))
	if err != nil {
		t.Fatal(err)
	}
	pg := testenv.NewProxy(t, pgAddr.Host)
	s3 := testenv.NewProxy(t, testenv.RequireS3(t).Endpoint)
	idx, objs := openPostgresMinIO(t, pg.Addr(), s3.Addr(), postgres.Options{WriteTimeout: 2 * timeout})
	e := newEnvOptions(t, idx, objs, func(o *Options) { o.DependencyTimeout = timeout })
	w, r := e.token("s", auth.Write), e.token("s", auth.Read)

	type req struct {
		name, method, path, tok string
		body                    []byte
		hdr                     []string
	}
	client := *e.ts.Client()
	client.Timeout = 2 * bound // a hang fails the test instead of stalling it
	send := func(q req) (*http.Response, []byte, time.Duration) {
		t.Helper()
		hr, err := http.NewRequest(q.method, e.ts.URL+q.path, bytes.NewReader(q.body))
		if err != nil {
			t.Fatal(err)
		}
		if q.tok != "" {
			hr.Header.Set("Authorization", "Bearer "+q.tok)
		}
		for i := 0; i+1 < len(q.hdr); i += 2 {
			hr.Header.Set(q.hdr[i], q.hdr[i+1])
		}
		start := time.Now()
		resp, err := client.Do(hr)
		if err != nil {
			t.Fatalf("%s: no answer after %v: %v", q.name, time.Since(start), err)
		}
		return resp, read(t, resp), time.Since(start)
	}
	unavailable := func(q req) {
		t.Helper()
		resp, body, took := send(q)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: %d (Retry-After %q) %s, want 503 with Retry-After", q.name, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if took > bound {
			t.Errorf("%s: answered after %v, bound %v", q.name, took, bound)
		}
	}
	ok := func(q req, want int) {
		t.Helper()
		if resp, body, _ := send(q); resp.StatusCode != want {
			t.Errorf("%s: %d %s, want %d", q.name, resp.StatusCode, body, want)
		}
	}
	// transfer returns the transfer request of f's first term.
	transfer := func(f *fixture) req {
		var a reconV2
		if err := json.Unmarshal(expect(t, e.do("GET", "/v2/reconstructions/"+f.file.String(), r, nil), 200), &a); err != nil {
			t.Fatal(err)
		}
		x := a.Xorbs[a.Terms[0].Hash.String()][0]
		return req{"GET transfer", "GET", strings.TrimPrefix(x.URL, e.ts.URL), "", nil,
			[]string{"Range", fmt.Sprintf("bytes=%d-%d", x.Ranges[0].Bytes.Start, x.Ranges[0].Bytes.End)}}
	}
	reads := func(f *fixture) []req {
		return []req{
			{"GET /v2/reconstructions", "GET", "/v2/reconstructions/" + f.file.String(), r, nil, nil},
			{"HEAD /v1/files", "HEAD", "/v1/files/" + f.file.String(), r, nil, nil},
			{"GET /v1/chunks", "GET", "/v1/chunks/default/" + f.layouts[0].ChunkHashes[0].String(), r, nil, nil},
			{"HEAD /v1/xorbs", "HEAD", "/v1/xorbs/default/" + f.layouts[0].Hash.String(), r, nil, nil},
		}
	}
	writes := func(fresh, pending *fixture) []req {
		return []req{
			{"POST /v1/xorbs", "POST", "/v1/xorbs/default/" + fresh.layouts[0].Hash.String(), w, fresh.xorbs[0], nil},
			{"POST /v1/shards", "POST", "/v1/shards", w, pending.body, nil},
		}
	}
	uploadXorbs := func(f *fixture) {
		for i, body := range f.xorbs {
			expect(t, e.do("POST", "/v1/xorbs/default/"+f.layouts[i].Hash.String(), w, body), 200)
		}
	}
	health := req{"GET /healthz", "GET", "/healthz", "", nil, nil}
	ready := req{"GET /readyz", "GET", "/readyz", "", nil, nil}
	restore := func(p *testenv.Proxy) {
		t.Helper()
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, _, _ := send(ready)
			if resp.StatusCode == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("readyz %d 10 s after the restore", resp.StatusCode)
			}
		}
	}

	t.Run("postgres", func(t *testing.T) {
		served := makeFixture(t, 61, 2, 3, 700)
		e.upload(served, "s")
		tr := transfer(served)
		pending := makeFixture(t, 62, 1, 3, 700)
		uploadXorbs(pending)
		fresh := makeFixture(t, 63, 1, 3, 700)

		pg.Stall()
		unavailable(ready)
		ok(health, http.StatusOK)
		for _, q := range append(append(writes(fresh, pending), reads(served)...), tr) {
			unavailable(q)
		}
		restore(pg)
		ok(req{"HEAD rejected xorb", "HEAD", "/v1/xorbs/default/" + fresh.layouts[0].Hash.String(), r, nil, nil}, http.StatusNotFound)
		ok(req{"HEAD rejected file", "HEAD", "/v1/files/" + pending.file.String(), r, nil, nil}, http.StatusNotFound)
		for _, q := range reads(served) {
			ok(q, http.StatusOK)
		}
		ok(tr, http.StatusPartialContent)
		for _, q := range writes(fresh, pending) {
			ok(q, http.StatusOK)
		}
		if got := e.reconstructV2(pending.file, r, ""); !bytes.Equal(got, pending.data) {
			t.Fatal("the file registered after the stall does not download as uploaded")
		}
	})

	t.Run("minio", func(t *testing.T) {
		served := makeFixture(t, 71, 2, 3, 700)
		e.upload(served, "s")
		tr := transfer(served)
		pending := makeFixture(t, 72, 1, 3, 700)
		uploadXorbs(pending)
		fresh := makeFixture(t, 73, 1, 3, 700)

		s3.Stall()
		unavailable(ready)
		ok(health, http.StatusOK)
		unavailable(writes(fresh, pending)[0])
		unavailable(tr)
		for _, q := range append(reads(served), writes(fresh, pending)[1]) { // index only
			ok(q, http.StatusOK)
		}
		restore(s3)
		ok(req{"HEAD rejected xorb", "HEAD", "/v1/xorbs/default/" + fresh.layouts[0].Hash.String(), r, nil, nil}, http.StatusNotFound)
		ok(tr, http.StatusPartialContent)
		ok(writes(fresh, pending)[0], http.StatusOK)
		if got := e.reconstructV2(pending.file, r, ""); !bytes.Equal(got, pending.data) {
			t.Fatal("the file registered during the stall does not download as uploaded")
		}
	})
}

func TestDependencyTimeoutDefault(t *testing.T) {
	for _, c := range []struct {
		set  time.Duration
		want time.Duration // 0 = unbounded
	}{{0, DefaultDependencyTimeout}, {time.Second, time.Second}, {-1, 0}} {
		idx, objs := sqliteLocal().open(t)
		e := newEnvOptions(t, idx, objs, func(o *Options) { o.DependencyTimeout = c.set })
		bi, isIdx := e.srv.idx.(*boundedIndex)
		bo, isObj := e.srv.objs.(*boundedObjects)
		switch {
		case c.want == 0 && (isIdx || isObj):
			t.Errorf("DependencyTimeout %v: calls are bounded", c.set)
		case c.want != 0 && (!isIdx || !isObj):
			t.Errorf("DependencyTimeout %v: index %T, objects %T, want both bounded", c.set, e.srv.idx, e.srv.objs)
		case c.want != 0 && (bi.d != c.want || bo.d != c.want):
			t.Errorf("DependencyTimeout %v: bounds %v and %v, want %v", c.set, bi.d, bo.d, c.want)
		}
	}
}

// TestBoundedObjectsKeepSendfile checks that a local file's body keeps its io.WriterTo (the
// sendfile path of plain-HTTP transfers) through the bound.
func TestBoundedObjectsKeepSendfile(t *testing.T) {
	_, objs := sqliteLocal().open(t)
	b := newBoundedObjects(objs, time.Second)
	ctx := context.Background()
	data := []byte("0123456789")
	if err := b.Put(ctx, "xorbs/default/k", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	rc, err := b.GetRange(ctx, "xorbs/default/k", 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, ok := rc.(io.WriterTo); !ok {
		t.Fatalf("%T lost the local file's io.WriterTo", rc)
	}
	var got bytes.Buffer
	if _, err := io.Copy(&got, rc); err != nil || got.String() != "23456" {
		t.Fatalf("copy: %q, %v", got.String(), err)
	}
}
