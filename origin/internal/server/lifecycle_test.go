package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/xfertest"
	"github.com/xetcdn/xetcdn/origin/internal/lifecycle"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestDelete: the deletion routes. A write token of the scope deletes a file (or the whole
// scope): its reconstruction is 404 at once (through the origin's caches), the transfer URLs
// issued for it in that scope are refused, the same file in another scope and the scope's
// other files are untouched; each deletion is one event. A read token is 403, a file not
// visible in the token's scope (unknown, other scope's, already deleted) is 404, and neither
// records an event. The admin route deletes in any scope with the same answers.
func TestDelete(t *testing.T) {
	for _, b := range backends(t) {
		b := cachedStack(b)
		t.Run(b.name, func(t *testing.T) { testDelete(t, b) })
	}
}

func testDelete(t *testing.T, b backend) {
	e := newEnv(t, b)
	const scope, other = "models/acme/del", "models/acme/del-fork"
	f1, f2, f3 := makeFixture(t, 51, 2, 4, 1000), makeFixture(t, 52, 1, 4, 1000), makeFixture(t, 53, 1, 4, 1000)
	e.upload(f1, scope)
	e.upload(f2, scope)
	e.upload(f1, other)
	e.upload(f3, other)
	w, r, ow := e.token(scope, auth.Write), e.token(scope, auth.Read), e.token(other, auth.Write)
	status := func(f *fixture, s string) int {
		t.Helper()
		resp := e.do("GET", "/v2/reconstructions/"+f.file.String(), e.token(s, auth.Read), nil)
		read(t, resp)
		return resp.StatusCode
	}
	urls := func(f *fixture, s string) []string {
		get := func(path string) (int, []byte) {
			resp := e.do("GET", path, e.token(s, auth.Read), nil)
			return resp.StatusCode, read(t, resp)
		}
		var out []string
		for _, fe := range xfertest.Fetches(t, get, "", f.file) {
			out = append(out, fe.URL)
		}
		return out
	}
	u1, u1other, u2 := urls(f1, scope), urls(f1, other), urls(f2, scope)
	for _, u := range append(append(append([]string{}, u1...), u1other...), u2...) {
		if st := e.fetchStatus(u); st != 206 {
			t.Fatalf("before the delete: %s: %d", u, st)
		}
	}

	// Refused: no event, nothing deleted.
	expect(t, e.do("DELETE", "/v1/files/"+f1.file.String(), r, nil), 403)
	expect(t, e.do("DELETE", "/v1/scope", r, nil), 403)
	expect(t, e.do("DELETE", "/v1/files/"+f1.file.String(), "", nil), 401)
	expect(t, e.do("DELETE", "/v1/files/"+hash.Chunk([]byte("none")).String(), w, nil), 404)
	expect(t, e.do("DELETE", "/v1/files/"+f3.file.String(), w, nil), 404) // other scope's file
	expect(t, e.do("DELETE", "/v1/files/xyz", w, nil), 400)
	expect(t, e.do("DELETE", "/v1/scope", e.token("models/acme/empty", auth.Write), nil), 404)
	if evs, err := e.idx.Events(t.Context(), 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("events after refused deletes: %v, %v", evs, err)
	}
	if st := status(f1, scope); st != 200 {
		t.Fatalf("after refused deletes: %d", st)
	}

	var ans deleteAnswer
	if err := json.Unmarshal(expect(t, e.do("DELETE", "/v1/files/"+f1.file.String(), w, nil), 200), &ans); err != nil {
		t.Fatal(err)
	}
	if want := (deleteAnswer{Scope: scope, Deleted: 1}); ans != want {
		t.Errorf("answer %+v, want %+v", ans, want)
	}
	if st := status(f1, scope); st != 404 {
		t.Errorf("deleted file: %d, want 404", st)
	}
	if st := status(f1, other); st != 200 {
		t.Errorf("same file in the other scope: %d, want 200", st)
	}
	for _, c := range []struct {
		name string
		urls []string
		want int
	}{{"deleted file's URLs", u1, 403}, {"same file's URLs in the other scope", u1other, 206}, {"other file's URLs", u2, 206}} {
		for _, u := range c.urls {
			if st := e.fetchStatus(u); st != c.want {
				t.Errorf("%s: %d, want %d", c.name, st, c.want)
			}
		}
	}
	expect(t, e.do("DELETE", "/v1/files/"+f1.file.String(), w, nil), 404) // already deleted

	// The whole scope (its one remaining file).
	if err := json.Unmarshal(expect(t, e.do("DELETE", "/v1/scope", w, nil), 200), &ans); err != nil {
		t.Fatal(err)
	}
	if want := (deleteAnswer{Scope: scope, Deleted: 1, All: true}); ans != want {
		t.Errorf("answer %+v, want %+v", ans, want)
	}
	if st := status(f2, scope); st != 404 {
		t.Errorf("file of the deleted scope: %d, want 404", st)
	}
	for _, u := range u2 {
		if st := e.fetchStatus(u); st != 403 {
			t.Errorf("URL of the deleted scope's file: %d, want 403", st)
		}
	}
	if st := status(f3, other); st != 200 {
		t.Errorf("other scope: %d, want 200", st)
	}

	// The admin route: bad bodies 400, nothing visible 404, then the other scope's f3.
	admin := httptest.NewServer(e.srv.Admin(e.reg, e.idx))
	t.Cleanup(admin.Close)
	at := e.token("", auth.Admin)
	post := func(tok, body string) *http.Response {
		req, err := http.NewRequest("POST", admin.URL+"/admin/v1/delete", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := admin.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	expect(t, post(at, `{"scope":""}`), 400)
	expect(t, post(at, `{"scope":"`+other+`","files":["zz"]}`), 400)
	expect(t, post(ow, `{"scope":"`+other+`"}`), 403)
	expect(t, post(at, `{"scope":"`+scope+`"}`), 404)
	if err := json.Unmarshal(expect(t, post(at, `{"scope":"`+other+`","files":["`+f3.file.String()+`"]}`), 200), &ans); err != nil {
		t.Fatal(err)
	}
	if want := (deleteAnswer{Scope: other, Deleted: 1}); ans != want {
		t.Errorf("admin answer %+v, want %+v", ans, want)
	}
	if st := status(f3, other); st != 404 {
		t.Errorf("admin-deleted file: %d, want 404", st)
	}

	evs, err := e.idx.Events(t.Context(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[0].Scope != scope || len(evs[0].Files) != 1 || evs[0].Files[0] != f1.file ||
		evs[1].Scope != scope || evs[1].Files != nil || evs[2].Scope != other || len(evs[2].Files) != 1 {
		t.Errorf("events %+v", evs)
	}
}

// TestAdminUsage: per-scope logical, unique and shared bytes and the totals, from the admin
// route, against sizes known from the fixtures; ?scope= narrows the scopes; bad scope 400.
func TestAdminUsage(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testAdminUsage(t, b) })
	}
}

func testAdminUsage(t *testing.T, b backend) {
	e := newEnv(t, b)
	const a, c = "models/acme/u-a", "models/acme/u-c"
	f1, f2, f3 := makeFixture(t, 61, 2, 4, 1000), makeFixture(t, 62, 1, 4, 1000), makeFixture(t, 63, 1, 3, 1000)
	e.upload(f1, a)
	e.upload(f2, a)
	e.upload(f1, c)
	e.upload(f3, c)
	// Stored sizes as the object store has them (ingest appends a fresh footer).
	size := func(f *fixture) (n uint64) {
		for _, l := range f.layouts {
			sz, err := e.objs.Stat(t.Context(), objstore.XorbKey(l.Hash))
			if err != nil {
				t.Fatal(err)
			}
			n += uint64(sz)
		}
		return n
	}
	admin := httptest.NewServer(e.srv.Admin(e.reg, e.idx))
	t.Cleanup(admin.Close)
	at := e.token("", auth.Admin)
	get := func(q string, status int) *lifecycle.Usage {
		req, err := http.NewRequest("GET", admin.URL+"/admin/v1/usage"+q, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+at)
		resp, err := admin.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := expect(t, resp, status)
		if status != 200 {
			return nil
		}
		var u lifecycle.Usage
		if err := json.Unmarshal(b, &u); err != nil {
			t.Fatal(err)
		}
		return &u
	}
	u := get("", 200)
	want := []lifecycle.ScopeUsage{
		{Scope: a, Files: 2, LogicalBytes: uint64(len(f1.data) + len(f2.data)), UniqueBytes: size(f2), SharedBytes: size(f1), Xorbs: 3},
		{Scope: c, Files: 2, LogicalBytes: uint64(len(f1.data) + len(f3.data)), UniqueBytes: size(f3), SharedBytes: size(f1), Xorbs: 3},
	}
	if len(u.Scopes) != 2 || u.Scopes[0] != want[0] || u.Scopes[1] != want[1] {
		t.Fatalf("scopes %+v, want %+v", u.Scopes, want)
	}
	wt := lifecycle.Totals{Scopes: 2, Files: 4, LogicalBytes: want[0].LogicalBytes + want[1].LogicalBytes,
		StoredBytes: size(f1) + size(f2) + size(f3), SharedBytes: size(f1), Xorbs: 4}
	if u.Totals != wt {
		t.Fatalf("totals %+v, want %+v", u.Totals, wt)
	}
	if u := get("?scope="+c, 200); len(u.Scopes) != 1 || u.Scopes[0] != want[1] || u.Totals != wt {
		t.Fatalf("?scope=%s: %+v", c, u)
	}
	if u := get("?scope=models/none", 200); len(u.Scopes) != 1 || u.Scopes[0] != (lifecycle.ScopeUsage{Scope: "models/none"}) {
		t.Fatalf("?scope of nothing: %+v", u)
	}
	get("?scope=", 400)

	// After a's deletion, c holds f1's xorbs alone.
	if _, err := e.idx.Delete(t.Context(), a, nil); err != nil {
		t.Fatal(err)
	}
	u = get("", 200)
	want[1].UniqueBytes, want[1].SharedBytes = size(f1)+size(f3), 0
	if len(u.Scopes) != 1 || u.Scopes[0] != want[1] {
		t.Fatalf("after deleting %s: %+v, want %+v", a, u.Scopes, want[1])
	}
}
