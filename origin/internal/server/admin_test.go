package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// recordingHider records the Hide calls it gets and passes them on.
type recordingHider struct {
	next  Hider
	mu    sync.Mutex
	calls []hideRequest
}

func (h *recordingHider) Hide(ctx context.Context, scope string, files []hash.Hash) error {
	h.mu.Lock()
	h.calls = append(h.calls, hideRequest{Scope: scope, Files: files})
	h.mu.Unlock()
	return h.next.Hide(ctx, scope, files)
}

// adminPost posts body to the admin handler's hide route with tok (none when "") and returns
// the answer.
func adminPost(t *testing.T, admin *httptest.Server, tok, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", admin.URL+"/admin/v1/hide", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := admin.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestAdminHide(t *testing.T) {
	for _, b := range backends(t) {
		b := cachedStack(b)
		t.Run(b.name, func(t *testing.T) { testAdminHide(t, b) })
	}
}

func testAdminHide(t *testing.T, b backend) {
	e := newEnv(t, b)
	rec := &recordingHider{next: e.idx}
	admin := httptest.NewServer(e.srv.Admin(e.reg, rec))
	t.Cleanup(admin.Close)
	adminTok := e.token("", auth.Admin)

	const scope, other = "models/acme/x", "models/acme/y"
	f1, f2 := makeFixture(t, 1, 1, 4, 4096), makeFixture(t, 2, 1, 4, 4096)
	e.upload(f1, scope)
	e.upload(f2, scope)
	e.upload(f1, other)
	status := func(f *fixture, s string) int {
		t.Helper()
		resp := e.do("GET", "/v2/reconstructions/"+f.file.String(), e.token(s, auth.Read), nil)
		read(t, resp)
		return resp.StatusCode
	}
	// Warm the FileCache: the hide must drop these answers at once.
	for _, c := range []struct {
		f *fixture
		s string
	}{{f1, scope}, {f2, scope}, {f1, other}} {
		if st := status(c.f, c.s); st != 200 {
			t.Fatalf("before hide: %s in %s: %d", c.f.file, c.s, st)
		}
	}

	bad := []struct{ name, body string }{
		{"empty body", ``},
		{"not JSON", `scope=models/acme/x`},
		{"empty scope", `{"scope":""}`},
		{"missing scope", `{"files":[]}`},
		{"scope with NUL", `{"scope":"a\u0000b"}`},
		{"scope too long", `{"scope":"` + strings.Repeat("s", index.MaxScopeLen+1) + `"}`},
		{"malformed hash", `{"scope":"models/acme/x","files":["xyz"]}`},
		{"hash not a string", `{"scope":"models/acme/x","files":[1]}`},
		{"unknown field", `{"scope":"models/acme/x","file":"` + f1.file.String() + `"}`},
		{"trailing data", `{"scope":"models/acme/x"} {}`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) { expect(t, adminPost(t, admin, adminTok, c.body), 400) })
	}
	if len(rec.calls) != 0 {
		t.Fatalf("malformed requests reached Hide: %v", rec.calls)
	}

	// One file, named twice: hidden in its scope only, at once (through the caches).
	body := `{"scope":"` + scope + `","files":["` + f1.file.String() + `","` + f1.file.String() + `"]}`
	var ans hideAnswer
	if err := json.Unmarshal(expect(t, adminPost(t, admin, adminTok, body), 200), &ans); err != nil {
		t.Fatal(err)
	}
	if want := (hideAnswer{Scope: scope, Hidden: 1}); ans != want {
		t.Errorf("answer %+v, want %+v", ans, want)
	}
	if st := status(f1, scope); st != 404 {
		t.Errorf("hidden file: %d, want 404", st)
	}
	if st := status(f2, scope); st != 200 {
		t.Errorf("other file of the scope: %d, want 200", st)
	}
	if st := status(f1, other); st != 200 {
		t.Errorf("same file in another scope: %d, want 200", st)
	}

	// No files: the whole scope.
	if err := json.Unmarshal(expect(t, adminPost(t, admin, adminTok, `{"scope":"`+scope+`"}`), 200), &ans); err != nil {
		t.Fatal(err)
	}
	if want := (hideAnswer{Scope: scope, All: true}); ans != want {
		t.Errorf("answer %+v, want %+v", ans, want)
	}
	if st := status(f2, scope); st != 404 {
		t.Errorf("file of a hidden scope: %d, want 404", st)
	}
	if st := status(f1, other); st != 200 {
		t.Errorf("file of another scope: %d, want 200", st)
	}

	// Each hide is one event for the edges, in order.
	evs, err := e.idx.Events(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Scope != scope || len(evs[0].Files) != 1 || evs[0].Files[0] != f1.file ||
		evs[1].Scope != scope || len(evs[1].Files) != 0 {
		t.Errorf("events %+v", evs)
	}

	// The admin listener still serves the metrics, which count the hide route.
	resp, err := admin.Client().Get(admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if mb := string(read(t, resp)); resp.StatusCode != 200 || !strings.Contains(mb, `route="POST /admin/v1/hide"`) {
		t.Errorf("/metrics: %d, hide route counted: %v", resp.StatusCode, strings.Contains(mb, "admin/v1/hide"))
	}
}

func FuzzParseHide(f *testing.F) {
	f.Add([]byte(`{"scope":"models/acme/x"}`))
	f.Add([]byte(`{"scope":"models/acme/x","files":["` + hash.Chunk([]byte("a")).String() + `"]}`))
	f.Add([]byte(`{"scope":"","files":null}`))
	f.Add([]byte(`{"scope":"x","files":["zz"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := parseHide(b)
		if err != nil {
			return
		}
		if index.CheckScope(req.Scope) != nil {
			t.Fatalf("accepted scope %q", req.Scope)
		}
		seen := map[hash.Hash]bool{}
		for _, h := range req.Files {
			if seen[h] {
				t.Fatalf("duplicate file %s kept", h)
			}
			seen[h] = true
		}
	})
}
