package main

import (
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// outageBound is the longest a request may take while a dependency is down. The origin fails
// fast on a refused or reset connection: pgx reports it at once, minio-go after its retries
// (3 attempts, backoff under a second), /readyz pings under a 2 s timeout.
const outageBound = 10 * time.Second

// recoveryBound is how long the origin may take to serve again once the dependency is back.
const recoveryBound = 15 * time.Second

// probe is one request of the outage test.
type probe struct {
	name, method, path string
	tok                string
	body               []byte
	hdr                []string
}

func (p probe) send(o *proc) (answer, error) {
	u := p.path
	if strings.HasPrefix(u, "/") {
		u = o.base() + u
	}
	return do(p.method, u, p.tok, p.body, p.hdr...)
}

// expectUnavailable fails unless the probe is answered, within outageBound, with 503,
// Retry-After and a JSON error body (HEAD answers have no body). A /v2/shards probe may also
// be a 200 stream ending in a retryable error frame (docs/protocol.md §2.7: once the stream
// started, failures are frames).
func expectUnavailable(t *testing.T, o *proc, p probe) {
	t.Helper()
	a, err := p.send(o)
	if err != nil {
		t.Errorf("%s: no answer after %v: %v", p.name, a.took, err)
		return
	}
	if a.took > outageBound {
		t.Errorf("%s: answered after %v (bound %v)", p.name, a.took, outageBound)
	}
	if p.path == "/v2/shards" && a.status == http.StatusOK {
		if f := lastFrame(a.body); f.Type != "error" || f.Retryable == nil || !*f.Retryable {
			t.Errorf("%s: 200 stream ending in %s, want a retryable error frame", p.name, a.body)
		}
		return
	}
	if a.status != http.StatusServiceUnavailable {
		t.Errorf("%s: %d %s, want 503", p.name, a.status, a.body)
		return
	}
	if a.header.Get("Retry-After") == "" {
		t.Errorf("%s: 503 without Retry-After", p.name)
	}
	if p.method == "HEAD" {
		return
	}
	var e struct{ Error, Code string }
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error == "" || e.Code == "" {
		t.Errorf("%s: 503 body %q is not a JSON error", p.name, a.body)
	}
}

// expectStatus fails unless the probe is answered with want.
func expectStatus(t *testing.T, o *proc, p probe, want int) answer {
	t.Helper()
	a, err := p.send(o)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	if a.status != want {
		t.Fatalf("%s: %d %s, want %d", p.name, a.status, a.body, want)
	}
	if p.path == "/v2/shards" && !shardAccepted(p.path, a) {
		t.Fatalf("%s: stream %s does not end in a result", p.name, a.body)
	}
	return a
}

// transferURL returns a signed transfer URL and its Range header for the first term of file,
// from a reconstruction.
func transferURL(t *testing.T, o *proc, tok string, file hash.Hash) (string, string) {
	t.Helper()
	st, body := call(t, "GET", o.base()+"/v2/reconstructions/"+file.String(), tok, nil)
	if st != http.StatusOK {
		t.Fatalf("reconstruction of %s: %d %s", file, st, body)
	}
	u, rangeHdr := firstFetch(body)
	if u == "" {
		t.Fatalf("reconstruction of %s has no term: %s", file, body)
	}
	return u, rangeHdr
}

// proxiedOrigin starts an origin on a fresh PostgreSQL database and MinIO bucket, each reached
// through a proxy the test can cut.
func proxiedOrigin(t *testing.T) (o *proc, pg, s3 *testenv.Proxy) {
	t.Helper()
	bin := buildBinary(t)
	pgAddr, s3Addr := services(t)
	pg, s3 = testenv.NewProxy(t, pgAddr), testenv.NewProxy(t, s3Addr)
	o = newOrigin(t, bin)
	production(t, o, pg.Addr(), s3.Addr())
	o.start(t)
	return o, pg, s3
}

// TestDependencyOutage runs the origin on PostgreSQL and MinIO through proxies, cuts each
// dependency in turn and checks what the routes that need it answer: 503 with Retry-After and
// a JSON error (a retryable error frame on /v2/shards), promptly; /readyz 503 and /healthz 200;
// routes that do not need the dead dependency keep serving. A write rejected during the outage
// leaves no trace, and once the proxy is restored the same requests succeed without a restart.
func TestDependencyOutage(t *testing.T) {
	o, pg, s3 := proxiedOrigin(t)
	const scope = "models/outage/test"
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	edge := o.token(t, "", "edge")
	c := o.client(t, r)
	rng := mrand.New(mrand.NewPCG(11, 11))
	file := func() fileUp { return makeFile(makeXorb(rng, 4), makeXorb(rng, 4)) }
	upload := func(t *testing.T, f fileUp, shard bool) {
		t.Helper()
		for _, x := range f.xorbs {
			expectStatus(t, o, probe{"xorb", "POST", x.path(), w, x.body, nil}, http.StatusOK)
		}
		if shard {
			expectStatus(t, o, probe{"shard", "POST", "/v1/shards", w, f.shard, nil}, http.StatusOK)
		}
	}
	health := probe{name: "GET /healthz", method: "GET", path: "/healthz"}
	ready := probe{name: "GET /readyz", method: "GET", path: "/readyz"}
	expectStatus(t, o, ready, http.StatusOK)

	// reads are the read routes for a registered file; needsObjects marks the one that reads
	// the object store.
	reads := func(f fileUp, transfer, rangeHdr string) (index []probe, objects probe) {
		chunk := f.xorbs[0].layout.ChunkHashes[0] // the file's first chunk: eligible for dedup
		return []probe{
			{"GET /v2/reconstructions", "GET", "/v2/reconstructions/" + f.hash.String(), r, nil, nil},
			{"GET /v1/reconstructions", "GET", "/v1/reconstructions/" + f.hash.String(), r, nil, nil},
			{"HEAD /v1/files", "HEAD", "/v1/files/" + f.hash.String(), r, nil, nil},
			{"GET /v1/chunks", "GET", "/v1/chunks/default-merkledb/" + chunk.String(), r, nil, nil},
			{"HEAD /v1/xorbs", "HEAD", f.xorbs[1].path(), r, nil, nil},
		}, probe{"GET transfer", "GET", transfer, "", nil, []string{"Range", rangeHdr}}
	}
	// internal are the edges' routes for a registered file: the file record, its visibility,
	// the revocation events, and a stored xorb (which needs the object store too). The layouts
	// route is apart: layouts are cached without expiry, so it may keep answering from memory.
	internal := func(f fileUp) (index []probe, objects, layouts probe) {
		x := f.xorbs[1].hash.String()
		return []probe{
				{"GET /internal/v1/files", "GET", "/internal/v1/files/" + f.hash.String() + "?scope=" + scope, edge, nil, nil},
				{"HEAD /internal/v1/files", "HEAD", "/internal/v1/files/" + f.hash.String() + "?scope=" + scope, edge, nil, nil},
				{"GET /internal/v1/events", "GET", "/internal/v1/events?after=0&wait=0", edge, nil, nil},
			}, probe{"GET /internal/v1/xorbs", "GET", "/internal/v1/xorbs/" + x, edge, nil, nil},
			probe{"GET /internal/v1/layouts", "GET", "/internal/v1/layouts?h=" + x, edge, nil, nil}
	}
	// writes are the write routes for a fresh xorb and a file whose xorbs are stored.
	writes := func(x xorbUp, f fileUp) []probe {
		return []probe{
			{"POST /v1/xorbs", "POST", x.path(), w, x.body, nil},
			{"POST /v1/shards", "POST", "/v1/shards", w, f.shard, nil},
			{"POST /v2/shards", "POST", "/v2/shards", w, f.shard, nil},
		}
	}
	// noTrace checks, after recovery, that the writes rejected during the outage left nothing.
	noTrace := func(t *testing.T, x xorbUp, f fileUp) {
		t.Helper()
		expectStatus(t, o, probe{"HEAD rejected xorb", "HEAD", x.path(), r, nil, nil}, http.StatusNotFound)
		expectStatus(t, o, probe{"HEAD rejected file", "HEAD", "/v1/files/" + f.hash.String(), r, nil, nil}, http.StatusNotFound)
		if _, err := download(c, f.hash); !errors.Is(err, xetclient.ErrNotFound) {
			t.Fatalf("file rejected during the outage: download %v, want not found", err)
		}
	}
	restore := func(t *testing.T, p *testenv.Proxy) {
		t.Helper()
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
		if err := eventually(recoveryBound, func() error {
			a, err := ready.send(o)
			return statusIs(a, err, http.StatusOK)
		}); err != nil {
			t.Fatalf("readyz after the restore: %v", err)
		}
	}
	during := func(t *testing.T, name string) {
		t.Helper()
		expectUnavailable(t, o, ready)
		expectStatus(t, o, health, http.StatusOK)
		if t.Failed() {
			t.Fatalf("%s: see above", name)
		}
	}

	t.Run("postgres", func(t *testing.T) {
		cached := file() // read before the outage: its record and visibility are cached
		upload(t, cached, true)
		checkDownload(t, c, cached.hash, cached.data)
		cold := file() // registered, never read before the outage
		upload(t, cold, true)
		pending := file() // xorbs stored, shard not yet registered
		upload(t, pending, false)
		fresh := makeXorb(rng, 3)
		transfer, rangeHdr := transferURL(t, o, r, cached.hash) // reads only the cached file
		index, objects := reads(cold, transfer, rangeHdr)
		for _, p := range index[3:] { // dedup and xorb HEAD: no file lookup that would cache it
			expectStatus(t, o, p, http.StatusOK)
		}
		expectStatus(t, o, objects, http.StatusPartialContent)

		edgeIndex, edgeObjects, edgeLayouts := internal(cold)

		pg.Cut()
		during(t, "postgres down")
		for _, p := range append(append(append(writes(fresh, pending), index...), edgeIndex...), objects, edgeObjects) {
			expectUnavailable(t, o, p) // the transfer routes ask the index for the xorb's size
		}
		if a, err := edgeLayouts.send(o); err != nil || (a.status != http.StatusOK && a.status != http.StatusServiceUnavailable) {
			t.Errorf("%s while postgres is down: %d %s %v, want 200 (cached) or 503", edgeLayouts.name, a.status, a.body, err)
		}
		// A cached reconstruction may be answered from memory for at most the visibility TTL
		// (index.DefaultVisibilityTTL, 2 s) after it was last confirmed; after that it needs the
		// database like any other.
		cachedRecon := probe{"GET cached reconstruction", "GET", "/v2/reconstructions/" + cached.hash.String(), r, nil, nil}
		if err := eventually(recoveryBound, func() error {
			a, err := cachedRecon.send(o)
			if err == nil && a.status == http.StatusOK {
				return errNotYet
			}
			return statusIs(a, err, http.StatusServiceUnavailable)
		}); err != nil {
			t.Fatalf("cached reconstruction while postgres is down: %v", err)
		}
		expectUnavailable(t, o, cachedRecon)

		restore(t, pg)
		noTrace(t, fresh, pending)
		for _, p := range append(append(index, edgeIndex...), edgeObjects, edgeLayouts) {
			expectStatus(t, o, p, http.StatusOK)
		}
		expectStatus(t, o, objects, http.StatusPartialContent)
		for _, p := range writes(fresh, pending) {
			expectStatus(t, o, p, http.StatusOK)
		}
		checkDownload(t, c, pending.hash, pending.data)
		checkDownload(t, c, cached.hash, cached.data)
	})

	t.Run("minio", func(t *testing.T) {
		stored := file()
		upload(t, stored, true)
		transfer, rangeHdr := transferURL(t, o, r, stored.hash)
		pending := file()
		upload(t, pending, false)
		fresh := makeXorb(rng, 3)
		index, objects := reads(stored, transfer, rangeHdr)
		edgeIndex, edgeObjects, edgeLayouts := internal(stored)
		index = append(append(index, edgeIndex...), edgeLayouts)

		s3.Cut()
		during(t, "minio down")
		xorbPost := writes(fresh, pending)[0]
		expectUnavailable(t, o, xorbPost)
		expectUnavailable(t, o, objects)
		expectUnavailable(t, o, edgeObjects)
		// Reconstructions, file and xorb HEADs, dedup answers and the edges' file, layout and
		// event routes come from the index alone, and
		// so do shard uploads: a shard body up to 1 MiB is kept in the index row, not stored as an
		// object (docs/decisions.md). The file's xorbs were stored before the outage.
		for _, p := range append(index, writes(fresh, pending)[1:]...) {
			expectStatus(t, o, p, http.StatusOK)
		}

		restore(t, s3)
		expectStatus(t, o, probe{"HEAD rejected xorb", "HEAD", fresh.path(), r, nil, nil}, http.StatusNotFound)
		expectStatus(t, o, objects, http.StatusPartialContent)
		expectStatus(t, o, edgeObjects, http.StatusOK)
		expectStatus(t, o, xorbPost, http.StatusOK)
		checkDownload(t, c, pending.hash, pending.data)
		checkDownload(t, c, stored.hash, stored.data)
	})
}

// flapLog counts the answers of TestDependencyFlapping.
type flapLog struct {
	mu        sync.Mutex
	ok, unav  int
	files     []fileUp
	fileAcked map[hash.Hash]bool
	events    chan struct{} // an answer came
}

func (l *flapLog) counts() (ok, unav int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.unav
}

// TestDependencyFlapping cuts and restores PostgreSQL and MinIO, in turns, under concurrent
// uploads and downloads. Every request must be answered, and only with success or "try again"
// (503 with Retry-After, or a retryable error frame): a connection dying in the middle of a
// query or a PUT is never a 500. Afterwards every acknowledged file downloads byte-exact and
// every other one is whole or absent.
func TestDependencyFlapping(t *testing.T) {
	o, pg, s3 := proxiedOrigin(t)
	const scope = "models/flap/test"
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	log := &flapLog{fileAcked: map[hash.Hash]bool{}, events: make(chan struct{}, 1<<16)}

	// record counts one answer; it reports whether the request succeeded.
	record := func(what string, a answer, err error, success func(answer) bool) bool {
		defer func() { log.events <- struct{}{} }()
		log.mu.Lock()
		defer log.mu.Unlock()
		switch {
		case err != nil && what == "GET transfer" && a.status == http.StatusPartialContent:
			log.unav++ // the store died mid-body: the short body tells the client to retry
		case err != nil:
			t.Errorf("%s: no answer after %v: %v", what, a.took, err)
		case a.took > outageBound:
			t.Errorf("%s: answered after %v (bound %v)", what, a.took, outageBound)
		case success(a):
			log.ok++
			return true
		case a.status == http.StatusServiceUnavailable && a.header.Get("Retry-After") != "":
			log.unav++
		case a.status == http.StatusOK && lastFrame(a.body).Type == "error" && lastFrame(a.body).Retryable != nil && *lastFrame(a.body).Retryable:
			log.unav++
		default:
			t.Errorf("%s: %d %q: neither success nor try-again", what, a.status, a.body)
		}
		return false
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(i), 5))
			var mine []fileUp // acknowledged files this worker reads back
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				f := makeFile(makeXorb(rng, 3), makeXorb(rng, 3))
				stored := true
				for _, x := range f.xorbs {
					a, err := do("POST", o.base()+x.path(), w, x.body)
					if !record("POST xorb", a, err, func(a answer) bool { return a.status == http.StatusOK }) {
						stored = false
					}
				}
				if stored {
					path := []string{"/v1/shards", "/v2/shards"}[n%2]
					log.mu.Lock()
					log.files = append(log.files, f)
					log.mu.Unlock()
					a, err := do("POST", o.base()+path, w, f.shard)
					if record("POST "+path, a, err, func(a answer) bool { return shardAccepted(path, a) }) {
						log.mu.Lock()
						log.fileAcked[f.hash] = true
						log.mu.Unlock()
						mine = append(mine, f)
					}
				}
				if len(mine) > 0 { // a reconstruction and a transfer of an earlier file
					g := mine[rng.IntN(len(mine))]
					a, err := do("GET", o.base()+"/v2/reconstructions/"+g.hash.String(), r, nil)
					if record("GET reconstruction", a, err, func(a answer) bool { return a.status == http.StatusOK }) {
						u, rh := firstFetch(a.body)
						a, err := do("GET", u, "", nil, "Range", rh)
						record("GET transfer", a, err, func(a answer) bool { return a.status == http.StatusPartialContent })
					}
				}
			}
		}()
	}
	// Each round cuts one dependency until some requests were refused, then restores it until
	// some succeeded again.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for !cond() {
			select {
			case <-log.events:
			case <-deadline:
				close(stop)
				wg.Wait()
				t.Fatalf("%s: not within 20 s", what)
			}
		}
	}
	for round := range 4 {
		p, name := pg, "postgres"
		if round%2 == 1 {
			p, name = s3, "minio"
		}
		_, unav := log.counts()
		p.Cut()
		waitFor(name+" cut: 3 requests refused", func() bool { _, u := log.counts(); return u >= unav+3 })
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
		ok, _ := log.counts()
		waitFor(name+" restored: 10 requests served", func() bool { k, _ := log.counts(); return k >= ok+10 })
	}
	close(stop)
	wg.Wait()
	ok, unav := log.counts()
	t.Logf("%d requests served, %d refused with 503 or a retryable frame", ok, unav)

	c := o.client(t, r)
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, f := range log.files {
		got, err := download(c, f.hash)
		switch {
		case log.fileAcked[f.hash] && err != nil:
			t.Errorf("acknowledged file %s: %v", f.hash, err)
		case err != nil && !errors.Is(err, xetclient.ErrNotFound):
			t.Errorf("refused file %s is half registered: %v", f.hash, err)
		case err == nil && string(got) != string(f.data):
			t.Errorf("file %s downloads %d bytes that differ from the %d uploaded", f.hash, len(got), len(f.data))
		}
	}
}

// firstFetch returns the transfer URL and Range header of the first term of a /v2
// reconstruction answer ("" when it has none).
func firstFetch(body []byte) (string, string) {
	var a wire.QueryReconstructionResponseV2
	if json.Unmarshal(body, &a) != nil || len(a.Terms) == 0 || len(a.Xorbs[a.Terms[0].Hash]) == 0 {
		return "", ""
	}
	e := a.Xorbs[a.Terms[0].Hash][0]
	return e.URL, fmt.Sprintf("bytes=%d-%d", e.Ranges[0].Bytes.Start, e.Ranges[0].Bytes.End)
}
