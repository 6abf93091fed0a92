package edge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestEdgeErrorBodiesRevealNothing asks the edge for another scope's file and for unknown
// files, on the edge's own routes and on the routes it proxies, and checks each 404 body is
// the fixed not-found body: never the edge's call to the origin (`origin: not found: HEAD
// /internal/v1/files/…?scope=…`), the owning scope or the origin's driver text.
func TestEdgeErrorBodiesRevealNothing(t *testing.T) {
	const scope, other = "models/acme/secret", "models/evil/probe"
	o := startOrigin(t, t.TempDir())
	f := upload(t, o, o.token(t, scope, "write"), 21, 1, 4)
	e := startEdge(t, o, t.TempDir())
	mine := o.token(t, other, "read")
	unknown := hash.Chunk([]byte("no such file"))
	for _, c := range []struct{ name, path string }{
		{"foreign file v1", "/v1/reconstructions/" + f.hash.String()},
		{"foreign file v2", "/v2/reconstructions/" + f.hash.String()},
		{"unknown file v2", "/v2/reconstructions/" + unknown.String()},
		{"foreign file batch", "/v1/reconstructions?file_id=" + f.hash.String()},
		{"unknown chunk (proxied)", "/v1/chunks/default/" + unknown.String()},
	} {
		for _, base := range []string{e.tlsURL, e.httpURL} {
			st, body := call(t, "GET", base+c.path, mine, nil)
			if st != 404 {
				t.Errorf("%s: %d %s, want 404", c.name, st, body)
				continue
			}
			var got struct{ Error, Code string }
			if err := json.Unmarshal(body, &got); err != nil || got.Error != "not found" || got.Code != "not_found" {
				t.Errorf("%s: body %s, want the fixed not-found body", c.name, body)
			}
			for _, leak := range []string{"origin", "internal", "scope", "sql", "rows", scope, other} {
				if strings.Contains(string(body), leak) {
					t.Errorf("%s: body %s reveals %q", c.name, body, leak)
				}
			}
		}
	}
}

// TestEdgeAdminNeedsAdminToken: the edge's admin listener serves /metrics to anyone who
// reaches it and pprof only with an admin token (checked with the origin's keys): 401 without
// a token, 403 for client and edge tokens. The token route proxied by the edge refuses edge
// tokens too.
func TestEdgeAdminNeedsAdminToken(t *testing.T) {
	o := startOrigin(t, t.TempDir())
	admin := testenv.FreeAddr(t)
	e := startEdge(t, o, t.TempDir(), "--admin-listen", admin)
	if e.AdminAddr() != admin {
		t.Fatalf("admin listener on %s, want %s", e.AdminAddr(), admin)
	}
	base := "http://" + admin
	for _, c := range []struct {
		name, tok string
		status    int
	}{
		{"no token", "", 401},
		{"garbage", "x.y.z", 401},
		{"read", o.token(t, "models/a/b", "read"), 403},
		{"write", o.token(t, "models/a/b", "write"), 403},
		{"edge", o.token(t, "edge", "edge"), 403},
		{"admin", o.token(t, "", "admin"), 200},
	} {
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
			if st, body := call(t, "GET", base+p, c.tok, nil); st != c.status {
				t.Errorf("%s: GET %s: %d %.200s, want %d", c.name, p, st, body, c.status)
			}
		}
	}
	if st, body := call(t, "GET", base+"/metrics", "", nil); st != 200 || !strings.Contains(string(body), "xet_edge_") {
		t.Errorf("/metrics without a token: %d", st)
	}

	// The token route through the edge (proxied): an edge token mints nothing, a client's own
	// token still gets its CAS token.
	route := e.tlsURL + "/api/models/a/b/xet-read-token/main"
	if st, body := call(t, "GET", route, o.token(t, "edge", "edge"), nil); st != 403 || strings.Contains(string(body), "accessToken") {
		t.Errorf("token route with an edge token through the edge: %d %s, want 403", st, body)
	}
	if st, body := call(t, "GET", route, o.token(t, "models/a/b", "read"), nil); st != 200 {
		t.Errorf("token route with the scope's read token through the edge: %d %s", st, body)
	}
}
