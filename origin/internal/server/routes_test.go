package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

func TestDedup(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b)
			f := makeFixture(t, 30, 2, 6, 1500)
			e.upload(f, "models/d/d")
			r := e.token("models/other/repo", auth.Read) // dedup is global
			first := f.layouts[0].ChunkHashes[0]         // eligible: starts the file
			for _, prefix := range []string{"default", "default-merkledb"} {
				resp := e.do("GET", "/v1/chunks/"+prefix+"/"+first.String(), r, nil)
				body := expect(t, resp, 200)
				ans, err := shard.Parse(body)
				if err != nil {
					t.Fatal(err)
				}
				if ans.Footer == nil || ans.Footer.HMACKey.IsZero() || len(ans.Files) != 0 || len(ans.Xorbs) != 2 {
					t.Fatalf("answer %+v", ans)
				}
				if ans.Footer.Expired(e.clock.Now().Add(6 * 24 * time.Hour)) {
					t.Fatal("answer expires within 6 days")
				}
				loc, ok := ans.FindChunk(first)
				if !ok || ans.Xorbs[loc.Xorb].Hash != f.layouts[0].Hash || loc.Chunk != 0 {
					t.Fatalf("chunk not found by its keyed hash: %+v %v", loc, ok)
				}
				for i, x := range ans.Xorbs {
					want := xorbBlock(f.layouts[i])
					if x.RawBytes != want.RawBytes || len(x.Chunks) != len(want.Chunks) {
						t.Fatalf("xorb %d block %+v", i, x)
					}
					for j, c := range x.Chunks {
						if c.RawStart != want.Chunks[j].RawStart || c.RawLen != want.Chunks[j].RawLen ||
							c.Hash != hash.HMAC(ans.Footer.HMACKey, want.Chunks[j].Hash) {
							t.Fatalf("xorb %d chunk %d: %+v", i, j, c)
						}
					}
				}
			}
			// A chunk that neither starts the file nor is an anchor (shard.AnchorModulus) is no entry.
			plain := -1
			for j, c := range f.layouts[0].ChunkHashes[1:] {
				if c.Mod(shard.AnchorModulus) != 0 {
					plain = j + 1
					break
				}
			}
			if plain < 0 {
				t.Fatal("fixture has no chunk that is not an anchor")
			}
			expect(t, e.do("GET", "/v1/chunks/default/"+f.layouts[0].ChunkHashes[plain].String(), r, nil), 404)
			expect(t, e.do("GET", "/v1/chunks/other/"+first.String(), r, nil), 400)
			expect(t, e.do("GET", "/v1/chunks/default/zz", r, nil), 400)
			expect(t, e.do("GET", "/v1/chunks/default/"+first.String(), "", nil), 401)
		})
	}
}

func TestHubToken(t *testing.T) {
	e := newEnv(t, sqliteLocal(), func(c *config.Config) { c.EdgeURL = "https://edge.example" })
	user := e.token("models/acme/llama", auth.Write)
	type answer struct {
		CasURL      string `json:"casUrl"`
		Exp         int64  `json:"exp"`
		AccessToken string `json:"accessToken"`
	}
	get := func(path, tok string, status int) answer {
		var a answer
		b := expect(t, e.do("GET", path, tok, nil), status)
		if status == 200 {
			if err := json.Unmarshal(b, &a); err != nil || a.AccessToken == "" || a.Exp <= e.clock.Now().Unix() {
				t.Fatalf("%s: %s", path, b)
			}
		}
		return a
	}
	w := get("/api/models/acme/llama/xet-write-token/main", user, 200)
	if w.CasURL != e.cfg.PublicURL {
		t.Fatalf("write casUrl %q", w.CasURL)
	}
	c, err := e.srv.verifier.Verify(w.AccessToken)
	if err != nil || c.Scope != "models/acme/llama" || c.Access != auth.Write {
		t.Fatalf("minted token %+v %v", c, err)
	}
	// The minted CAS token uploads.
	f := makeFixture(t, 31, 1, 3, 500)
	expect(t, e.do("POST", "/v1/xorbs/default/"+f.layouts[0].Hash.String(), w.AccessToken, f.xorbs[0]), 200)
	rd := get("/api/models/acme/llama/xet-read-token/refs%2Fpr%2F1", user, 200)
	if rd.CasURL != "https://edge.example" {
		t.Fatalf("read casUrl %q", rd.CasURL)
	}
	if c, err := e.srv.verifier.Verify(rd.AccessToken); err != nil || c.Access != auth.Read {
		t.Fatalf("read token %+v %v", c, err)
	}
	reader := e.token("models/acme/llama", auth.Read)
	get("/api/models/acme/llama/xet-read-token/main", reader, 200)
	get("/api/models/acme/llama/xet-write-token/main", reader, 403)
	get("/api/models/acme/other/xet-read-token/main", user, 403)
	get("/api/datasets/acme/llama/xet-read-token/main", user, 403)
	get("/api/models/acme/llama/xet-read-token/main", "", 401)
	get("/api/widgets/acme/llama/xet-read-token/main", user, 404)
	get("/api/models/acme/llama/xet-admin-token/main", user, 404)
}

func TestInternalAPI(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b)
			f := makeFixture(t, 32, 2, 4, 800)
			e.upload(f, "models/i/i")
			edge := e.token("edge-eu", auth.Edge)

			rec, err := recon.UnmarshalFileRecord(expect(t, e.do("GET", "/internal/v1/files/"+f.file.String()+"?scope=models/i/i", edge, nil), 200))
			if err != nil || rec.Hash != f.file || rec.Size != uint64(len(f.data)) || len(rec.Terms) != 2 {
				t.Fatalf("record %+v %v", rec, err)
			}
			expect(t, e.do("GET", "/internal/v1/files/"+f.file.String()+"?scope=models/other", edge, nil), 404)
			expect(t, e.do("HEAD", "/internal/v1/files/"+f.file.String()+"?scope=models/i/i", edge, nil), 200)
			expect(t, e.do("HEAD", "/internal/v1/files/"+f.file.String()+"?scope=models/other", edge, nil), 404)
			expect(t, e.do("GET", "/internal/v1/files/"+f.file.String(), edge, nil), 400)

			unknown := hash.Chunk([]byte("unknown"))
			path := fmt.Sprintf("/internal/v1/layouts?h=%s&h=%s&h=%s", f.layouts[0].Hash, unknown, f.layouts[1].Hash)
			got := decodeLayouts(t, expect(t, e.do("GET", path, edge, nil), 200))
			if len(got) != 2 || got[0].Hash != f.layouts[0].Hash || got[1].Hash != f.layouts[1].Hash ||
				got[1].NumChunks() != 4 {
				t.Fatalf("layouts %+v", got)
			}
			expect(t, e.do("GET", "/internal/v1/layouts", edge, nil), 400)
			expect(t, e.do("GET", "/internal/v1/layouts?h=bad", edge, nil), 400)

			obj := expect(t, e.do("GET", "/internal/v1/xorbs/"+f.layouts[0].Hash.String(), edge, nil), 200)
			if _, err := xorb.ParseObject(obj); err != nil {
				t.Fatalf("stored object: %v", err)
			}
			part := expect(t, e.do("GET", "/internal/v1/xorbs/"+f.layouts[0].Hash.String(), edge, nil, "Range", "bytes=5-20"), 206)
			if string(part) != string(obj[5:21]) {
				t.Fatal("internal range: wrong bytes")
			}
			expect(t, e.do("GET", "/internal/v1/xorbs/"+unknown.String(), edge, nil), 404)

			ks, err := auth.ParseJWKS(expect(t, e.do("GET", "/internal/v1/jwks", edge, nil), 200))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := ks.Lookup(e.keys.Signing.ID); !ok {
				t.Fatal("jwks lacks the signing key")
			}

			// Events: nothing yet (short wait), then a revocation.
			var evs struct {
				Events []struct {
					Seq   int64
					Scope string
					Files []hash.Hash
				}
			}
			json.Unmarshal(expect(t, e.do("GET", "/internal/v1/events?after=0&wait=0", edge, nil), 200), &evs)
			if len(evs.Events) != 0 {
				t.Fatalf("events before any revocation: %+v", evs)
			}
			if err := e.idx.Hide(context.Background(), "models/i/i", []hash.Hash{f.file}); err != nil {
				t.Fatal(err)
			}
			json.Unmarshal(expect(t, e.do("GET", "/internal/v1/events?after=0", edge, nil), 200), &evs)
			if len(evs.Events) != 1 || evs.Events[0].Scope != "models/i/i" || len(evs.Events[0].Files) != 1 || evs.Events[0].Files[0] != f.file {
				t.Fatalf("events %+v", evs)
			}
			expect(t, e.do("GET", "/internal/v1/files/"+f.file.String()+"?scope=models/i/i", edge, nil), 404)
			expect(t, e.do("GET", "/internal/v1/events?after=x", edge, nil), 400)

			for _, tok := range []string{"", e.token("models/i/i", auth.Read), e.token("models/i/i", auth.Write)} {
				want := 403
				if tok == "" {
					want = 401
				}
				expect(t, e.do("GET", "/internal/v1/jwks", tok, nil), want)
			}
		})
	}
}

func decodeLayouts(t *testing.T, b []byte) []*xorb.Layout {
	t.Helper()
	if len(b) < 4 {
		t.Fatalf("layouts answer of %d bytes", len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	var out []*xorb.Layout
	for range n {
		var h hash.Hash
		copy(h[:], b)
		size := binary.LittleEndian.Uint32(b[32:])
		l, err := xorb.UnmarshalLayout(b[36 : 36+size])
		if err != nil || l.Hash != h {
			t.Fatalf("layout %s: %v", h, err)
		}
		out = append(out, l)
		b = b[36+size:]
	}
	if len(b) != 0 {
		t.Fatalf("%d trailing bytes", len(b))
	}
	return out
}

func TestTelemetry(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	r := e.token("s", auth.Read)
	good := `{"time":"2026-01-01T00:00:00Z","event":"xet_upload_summary","session_id":"x","user_agent":"hf_xet/1.8.0","metrics":{"bytes":1}}`
	expect(t, e.do("POST", "/v1/telemetry", r, []byte(good)), 200)
	expect(t, e.do("POST", "/v1/telemetry", r, []byte(`{"event":"custom","userAgent":"js"}`)), 200)
	expect(t, e.do("POST", "/v1/telemetry", r, []byte(`{"event":`)), 400)
	expect(t, e.do("POST", "/v1/telemetry", r, []byte(`{"metrics":{}}`)), 400)
	expect(t, e.do("POST", "/v1/telemetry", r, []byte(`{"event":"e","user_agent":"a","userAgent":"b"}`)), 400)
	expect(t, e.do("POST", "/v1/telemetry", r, []byte(`{"event":"`+strings.Repeat("x", maxTelemetryBody)+`"}`)), 413)
	expect(t, e.do("POST", "/v1/telemetry", "", []byte(good)), 401)
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "xet_origin_telemetry_events_total" {
			for _, m := range mf.GetMetric() {
				counted[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if counted["xet_upload_summary"] != 1 || counted["other"] != 1 {
		t.Fatalf("telemetry counters %v", counted)
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	expect(t, e.do("GET", "/healthz", "", nil), 200)
	expect(t, e.do("GET", "/readyz", "", nil), 200)
	expect(t, e.do("GET", "/no/such/route", "", nil), 404)
	// hf_xet 1.8.0 asks for an upload grant before every xorb and falls back to the direct
	// upload only on 404; any other status (405 included) fails the upload.
	expect(t, e.do("POST", "/v1/xorb-grants/default/"+hash.Zero.String(), e.token("s", auth.Write),
		[]byte(`{"length":1,"checksum":{"algo":"crc64nvme","value":"1"}}`)), 404)
	if id := e.do("GET", "/healthz", "", nil).Header.Get("X-Request-Id"); id == "" {
		t.Fatal("no X-Request-Id")
	}
}

// failingStore is an object store that is down: every call fails as unreachable. Only for the
// 503 test; the other tests use real stores.
type failingStore struct{}

var errStoreDown = errors.New("test store: unavailable")

func (failingStore) Put(context.Context, string, io.Reader, int64) error    { return errStoreDown }
func (failingStore) Create(context.Context, string, io.Reader, int64) error { return errStoreDown }
func (failingStore) Get(context.Context, string) (io.ReadCloser, int64, error) {
	return nil, 0, errStoreDown
}
func (failingStore) GetRange(context.Context, string, int64, int64) (io.ReadCloser, error) {
	return nil, errStoreDown
}
func (failingStore) Stat(context.Context, string) (int64, error) { return 0, errStoreDown }
func (failingStore) Delete(context.Context, string) error        { return errStoreDown }
func (failingStore) Ping(context.Context) error                  { return errStoreDown }
func (failingStore) List(context.Context, string, func(objstore.ObjectInfo) error) error {
	return errStoreDown
}

func TestObjectStoreDown(t *testing.T) {
	idx, _ := sqliteLocal().open(t)
	e := newEnvWith(t, idx, failingStore{})
	e.srv.errs = httpapi.NewErrors(httpapi.ErrorsOptions{Extra: append(baseRules(), httpapi.Rule{Err: errStoreDown, Status: 503, Code: "store_unavailable"})})
	e.srv.wrapper.Errors = e.srv.errs // the routes map errors with the wrapper's
	f := makeFixture(t, 33, 1, 3, 500)
	resp := e.do("POST", "/v1/xorbs/default/"+f.layouts[0].Hash.String(), e.token("s", auth.Write), f.xorbs[0])
	expect(t, resp, 503)
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	expect(t, e.do("HEAD", "/v1/xorbs/default/"+f.layouts[0].Hash.String(), e.token("s", auth.Read), nil), 404)
	resp = e.do("GET", "/readyz", "", nil)
	expect(t, resp, 503)
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
}

func TestDevNoAuth(t *testing.T) {
	e := newEnv(t, sqliteLocal(), func(c *config.Config) { c.DevNoAuth = true })
	f := makeFixture(t, 34, 1, 3, 500)
	uploadXorbs(e, f, "")
	expect(t, e.do("POST", "/v1/shards", "", f.body), 200)
	expect(t, e.do("HEAD", "/v1/files/"+f.file.String(), "", nil), 200)
	// A presented token is still checked.
	expect(t, e.do("HEAD", "/v1/files/"+f.file.String(), "garbage", nil), 401)
}

func TestIndexDown(t *testing.T) {
	idx, objs := sqliteLocal().open(t)
	e := newEnvWith(t, idx, objs)
	f := makeFixture(t, 35, 1, 3, 500)
	w := e.token("s", auth.Write)
	uploadXorbs(e, f, w)
	idx.Close() // every later call fails with index.ErrUnavailable
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/shards"},
		{"GET", "/v2/reconstructions/" + f.file.String()},
		{"HEAD", "/v1/xorbs/default/" + f.layouts[0].Hash.String()},
		{"GET", "/readyz"},
	} {
		resp := e.do(c.method, c.path, w, f.body)
		expect(t, resp, 503)
		if resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s %s: 503 without Retry-After", c.method, c.path)
		}
	}
}

func TestEventsLongPollEndsOnDrain(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	done := make(chan []byte)
	go func() {
		resp := e.do("GET", "/internal/v1/events?after=0", e.token("edge", auth.Edge), nil) // waits up to 30 s
		done <- read(t, resp)
	}()
	e.srv.Drain()
	select {
	case b := <-done:
		if string(b) != `{"events":[]}`+"\n" {
			t.Fatalf("answer %q", b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("long poll did not end on Drain")
	}
}

// TestLocalStoreBroken breaks a real local store (its directory replaced by a file, as when a
// disk is unmounted) and expects 503 + Retry-After, and nothing indexed.
func TestLocalStoreBroken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	idx, _ := sqliteLocal().open(t)
	e := newEnvWith(t, idx, openLocalStore(t, dir))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := makeFixture(t, 36, 1, 3, 500)
	resp := e.do("POST", "/v1/xorbs/default/"+f.layouts[0].Hash.String(), e.token("s", auth.Write), f.xorbs[0])
	expect(t, resp, 503)
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	expect(t, e.do("HEAD", "/v1/xorbs/default/"+f.layouts[0].Hash.String(), e.token("s", auth.Read), nil), 404)
	expect(t, e.do("GET", "/readyz", "", nil), 503)
}
