package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/shared/auth"
)

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
