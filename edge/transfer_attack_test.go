package edge

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/xfertest"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// edgeFetches returns every transfer URL of file's v2 and v1 answers from the edge for tok;
// they must be the edge's own (answered locally, not proxied to the origin).
func edgeFetches(t *testing.T, e *runningEdge, tok string, file hash.Hash) []xfertest.Fetch {
	t.Helper()
	get := func(u string) (int, []byte) { return call(t, "GET", u, tok, nil) }
	out := xfertest.Fetches(t, get, e.tlsURL, file)
	for _, f := range out {
		if !strings.HasPrefix(f.URL, e.tlsURL+"/") {
			t.Fatalf("URL %s is not the edge's (%s): the answer was proxied", f.URL, e.tlsURL)
		}
	}
	return out
}

// fetchStatus GETs f's signed range from the edge and returns the status, checking the length
// of a 206.
func fetchStatus(t *testing.T, f xfertest.Fetch) int {
	t.Helper()
	return xfertest.Status(t, insecureClient(), f)
}

// TestEdgeTransferURLAttacks runs the attacks of issue 9 items 4 and 6 against an edge in front
// of the origin binary: (a) one edge URL asked for 200 overlapping copies of its full span
// answers the span once, and more parts than it signed ranges and than urlsign.MinParts is
// 416; (b) after a hide on the origin, the edge URLs already issued for the file turn 403 as
// soon as the edge applies the origin's revocation event (measured; bounded by
// revokeDeadline), while URLs of the same file issued to another scope and of the scope's other
// file keep working.
func TestEdgeTransferURLAttacks(t *testing.T) {
	const scope, other = "models/acme/edge-attack", "models/acme/edge-attack-other"
	o, admin := startOriginAdmin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	big := upload(t, o, w, 31, 1, 300) // one xorb of 300 chunks
	keep := upload(t, o, w, 32, 1, 4)
	upload(t, o, o.token(t, other, "write"), 31, 1, 300) // the same file, in another scope
	rOther := o.token(t, other, "read")
	e := startEdge(t, o, t.TempDir())

	t.Run("overlapping ranges", func(t *testing.T) {
		xfertest.CheckRangeAttacks(t, insecureClient(), edgeFetches(t, e, r, big.hash)[0])
	})

	t.Run("hide revokes issued URLs", func(t *testing.T) {
		bigURLs, keepURLs, otherURLs := edgeFetches(t, e, r, big.hash), edgeFetches(t, e, r, keep.hash), edgeFetches(t, e, rOther, big.hash)
		for _, fs := range [][]xfertest.Fetch{bigURLs, keepURLs, otherURLs} {
			for _, f := range fs {
				if st := fetchStatus(t, f); st != http.StatusPartialContent {
					t.Fatalf("before the hide: %s: %d", f.URL, st)
				}
			}
		}
		body, _ := json.Marshal(map[string]any{"scope": scope, "files": []string{big.hash.String()}})
		start := time.Now()
		if st, ans := call(t, "POST", admin+"/admin/v1/hide", o.token(t, "", "admin"), body); st != http.StatusOK {
			t.Fatalf("hide: %d %s", st, ans)
		}
		// Every issued edge URL of the hidden file turns 403 within the bound; the time until
		// the last one did is the edge's revocation latency.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		deadline := time.NewTimer(revokeDeadline)
		defer deadline.Stop()
		for _, f := range bigURLs {
			for st := fetchStatus(t, f); st != http.StatusForbidden; st = fetchStatus(t, f) {
				if st != http.StatusPartialContent {
					t.Fatalf("edge URL during revocation: %d", st)
				}
				select {
				case <-deadline.C:
					t.Fatalf("edge URL %s still answers %d %v after the hide", f.URL, st, revokeDeadline)
				case <-tick.C:
				}
			}
		}
		t.Logf("edge transfer URLs refused %v after the hide was posted", time.Since(start).Round(time.Millisecond))
		for _, fs := range [][]xfertest.Fetch{keepURLs, otherURLs} {
			for _, f := range fs {
				if st := fetchStatus(t, f); st != http.StatusPartialContent {
					t.Errorf("after the hide: %s (another file or scope): %d, want 206", f.URL, st)
				}
			}
		}
	})
}
