package server

import (
	"encoding/json"
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
