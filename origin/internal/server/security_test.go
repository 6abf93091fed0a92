package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestErrorBodiesRevealNothing asks for files, chunks and records that are unknown or belong to
// another scope, on both backends with and without the caches, and checks every 404 body is
// the fixed {"error":"not found"}: no driver text (`sql: no rows in result set`, pgx's), no
// internal route, no scope, no index wording reaches the client.
func TestErrorBodiesRevealNothing(t *testing.T) {
	for _, b := range backends(t) {
		for _, b := range []backend{b, cachedStack(b)} {
			t.Run(b.name, func(t *testing.T) { testErrorBodies(t, b) })
		}
	}
}

func testErrorBodies(t *testing.T, b backend) {
	e := newEnv(t, b)
	const scope, other = "models/acme/secret", "models/evil/probe"
	f := makeFixture(t, 7, 1, 3, 4096)
	e.upload(f, scope)
	unknown := hash.Chunk([]byte("no such file"))
	mine, theirs := e.token(other, auth.Read), e.token(scope, auth.Read)
	edge := e.token("", auth.Edge)
	for _, c := range []struct{ name, path, tok string }{
		{"unknown file v1", "/v1/reconstructions/" + unknown.String(), mine},
		{"unknown file v2", "/v2/reconstructions/" + unknown.String(), theirs},
		{"foreign file v1", "/v1/reconstructions/" + f.file.String(), mine},
		{"foreign file v2", "/v2/reconstructions/" + f.file.String(), mine},
		{"foreign file batch", "/v1/reconstructions?file_id=" + f.file.String(), mine},
		{"unknown chunk", "/v1/chunks/default/" + unknown.String(), mine},
		{"internal record, other scope", "/internal/v1/files/" + f.file.String() + "?scope=" + other, edge},
		{"internal record, unknown", "/internal/v1/files/" + unknown.String() + "?scope=" + scope, edge},
		{"internal xorb, unknown", "/internal/v1/xorbs/" + unknown.String(), edge},
		{"no such route", "/v1/nothing", mine},
		{"token route, bad type", "/api/secrets/a/b/xet-read-token/main", theirs},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := expect(t, e.do("GET", c.path, c.tok, nil), 404)
			var got httpapi.ErrorBody
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got != (httpapi.ErrorBody{Error: "not found", Code: "not_found"}) {
				t.Errorf("body %s, want the fixed not-found body", body)
			}
			for _, leak := range []string{"sql", "rows", "internal", "index", scope, "secret", "evil"} {
				if strings.Contains(string(body), leak) {
					t.Errorf("body %s reveals %q", body, leak)
				}
			}
		})
	}
}

// TestAdminNeedsAdminToken: the admin listener's hide route and pprof answer 401 without a
// token and 403 for every token but an admin one (an edge token included), and a refused hide
// reaches nothing; /metrics stays readable for scrapers.
func TestAdminNeedsAdminToken(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	rec := &recordingHider{next: e.idx}
	admin := httptest.NewServer(e.srv.Admin(e.reg, rec))
	t.Cleanup(admin.Close)
	const scope = "models/acme/x"
	f := makeFixture(t, 3, 1, 2, 4096)
	e.upload(f, scope)
	hide := `{"scope":"` + scope + `"}`
	forged := e.token("", auth.Admin)
	forged = forged[:len(forged)-4] + "AAAA" // signature no longer verifies
	refused := []struct {
		name, tok string
		status    int
	}{
		{"no token", "", 401},
		{"garbage", "not-a-jwt", 401},
		{"bad signature", forged, 401},
		{"read", e.token(scope, auth.Read), 403},
		{"write", e.token(scope, auth.Write), 403},
		{"edge", e.token("", auth.Edge), 403},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			expect(t, adminPost(t, admin, c.tok, hide), c.status)
			for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/pprof/symbol"} {
				req, _ := http.NewRequest("GET", admin.URL+p, nil)
				if c.tok != "" {
					req.Header.Set("Authorization", "Bearer "+c.tok)
				}
				resp, err := admin.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				expect(t, resp, c.status)
			}
		})
	}
	if len(rec.calls) != 0 {
		t.Fatalf("refused requests reached Hide: %v", rec.calls)
	}
	expect(t, e.do("GET", "/v2/reconstructions/"+f.file.String(), e.token(scope, auth.Read), nil), 200)

	// Scrapers need no token; the admin token opens pprof and the hide route.
	resp, err := admin.Client().Get(admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, resp, 200)
	tok := e.token("", auth.Admin)
	req, _ := http.NewRequest("GET", admin.URL+"/debug/pprof/cmdline", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err = admin.Client().Do(req); err != nil {
		t.Fatal(err)
	}
	expect(t, resp, 200)
	expect(t, adminPost(t, admin, tok, hide), 200)
	expect(t, e.do("GET", "/v2/reconstructions/"+f.file.String(), e.token(scope, auth.Read), nil), 404)
}

// TestHubTokenClientTokensOnly: the Hub-compatible token route exchanges a client's own token
// for a CAS token of its scope, and nothing else: an edge token (which reads every scope on
// the internal API) and an admin token mint nothing, for any scope.
func TestHubTokenClientTokensOnly(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	const scope = "models/acme/x"
	route := func(op string) string { return "/api/models/acme/x/xet-" + op + "-token/main" }
	for _, c := range []struct {
		name, tok, op string
		status        int
	}{
		{"edge read", e.token("", auth.Edge), "read", 403},
		{"edge write", e.token("", auth.Edge), "write", 403},
		{"edge token named after the scope", e.token(scope, auth.Edge), "read", 403},
		{"admin read", e.token("", auth.Admin), "read", 403},
		{"read, other scope", e.token("models/acme/y", auth.Read), "read", 403},
		{"read asks write", e.token(scope, auth.Read), "write", 403},
		{"read", e.token(scope, auth.Read), "read", 200},
		{"write asks read", e.token(scope, auth.Write), "read", 200},
		{"write", e.token(scope, auth.Write), "write", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := expect(t, e.do("GET", route(c.op), c.tok, nil), c.status)
			if c.status != 200 {
				if strings.Contains(string(body), "accessToken") {
					t.Errorf("refused answer carries a token: %s", body)
				}
				return
			}
			var ans struct{ AccessToken string }
			if err := json.Unmarshal(body, &ans); err != nil {
				t.Fatal(err)
			}
			cl, err := e.srv.verifier.Verify(ans.AccessToken)
			if err != nil || cl.Scope != scope || !cl.Access.Client() {
				t.Errorf("minted %+v (%v), want a client token of %s", cl, err, scope)
			}
		})
	}
}
