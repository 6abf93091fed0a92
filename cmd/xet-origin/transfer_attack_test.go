package main

import (
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/internal/xfertest"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// originClient is the client of the transfer URL checks: every request has a bound.
var originClient = &http.Client{Timeout: requestTimeout}

// fetches returns every transfer URL of file's v2 and v1 answers for tok.
func fetches(t *testing.T, o *proc, tok string, file hash.Hash) []xfertest.Fetch {
	t.Helper()
	get := func(u string) (int, []byte) { return call(t, "GET", u, tok, nil) }
	return xfertest.Fetches(t, get, o.base(), file)
}

// uploadFile stores f's xorbs and registers it with a write token.
func uploadFile(t *testing.T, o *proc, w string, f fileUp) {
	t.Helper()
	for _, x := range f.xorbs {
		if st, b := call(t, "POST", o.base()+x.path(), w, x.body); st != http.StatusOK {
			t.Fatalf("xorb upload: %d %s", st, b)
		}
	}
	if st, b := call(t, "POST", o.base()+"/v1/shards", w, f.shard); st != http.StatusOK {
		t.Fatalf("shard upload: %d %s", st, b)
	}
}

// hide posts a hide of files in scope to the origin's admin listener.
func hide(t *testing.T, o *proc, admin, scope string, files ...hash.Hash) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"scope": scope, "files": files})
	if st, b := call(t, "POST", admin+"/admin/v1/hide", o.token(t, "", "admin"), body); st != http.StatusOK {
		t.Fatalf("hide: %d %s", st, b)
	}
}

// TestTransferURLAttacks runs the attacks of issue 9 items 4 and 6 against the binary, on both
// backends: (a) hiding a file revokes the transfer URLs already issued for it (403 at once),
// while URLs of the same file issued to another scope and of the scope's other files keep
// working; (b) one signed URL asked for 200 overlapping copies of its full span answers the
// span once, and asking for more parts than it signed ranges and than urlsign.MinParts is 416.
func TestTransferURLAttacks(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		admin := testenv.FreeAddr(t)
		o.args = append(o.args, "--admin-listen", admin)
		o.start(t)
		const scope, other = "models/acme/attack", "models/acme/attack-other"
		rng := mrand.New(mrand.NewPCG(91, 91))
		big := makeFile(makeXorb(rng, 400)) // one xorb of ~2.4 MB stored
		keep := makeFile(makeXorb(rng, 3))
		w := o.token(t, scope, "write")
		uploadFile(t, o, w, big)
		uploadFile(t, o, w, keep)
		uploadFile(t, o, o.token(t, other, "write"), big)
		r, rOther := o.token(t, scope, "read"), o.token(t, other, "read")

		t.Run("overlapping ranges", func(t *testing.T) {
			f := fetches(t, o, r, big.hash)[0]
			h := xfertest.CheckRangeAttacks(t, originClient, f)
			if cr, want := h.Get("Content-Range"), fmt.Sprintf("bytes %d-%d/", f.Start, f.End); !strings.HasPrefix(cr, want) {
				t.Fatalf("Content-Range %q, want %q…", cr, want)
			}
		})

		t.Run("hide revokes issued URLs", func(t *testing.T) {
			bigURLs, keepURLs, otherURLs := fetches(t, o, r, big.hash), fetches(t, o, r, keep.hash), fetches(t, o, rOther, big.hash)
			for _, fs := range [][]xfertest.Fetch{bigURLs, keepURLs, otherURLs} {
				for _, f := range fs {
					expectFetch(t, f, http.StatusPartialContent)
				}
			}
			hide(t, o, "http://"+admin, scope, big.hash)
			// At once: no wait between the hide's answer and these requests.
			for _, f := range bigURLs {
				expectFetch(t, f, http.StatusForbidden)
			}
			for _, fs := range [][]xfertest.Fetch{keepURLs, otherURLs} {
				for _, f := range fs {
					expectFetch(t, f, http.StatusPartialContent)
				}
			}
			// Asking again gets the clean answer: the file is gone from the scope.
			if st, _ := call(t, "GET", o.base()+"/v2/reconstructions/"+big.hash.String(), r, nil); st != http.StatusNotFound {
				t.Errorf("reconstruction after the hide: %d, want 404", st)
			}
		})
	})
}

// expectFetch GETs f's signed range and checks the status (and, for 206, the length).
func expectFetch(t *testing.T, f xfertest.Fetch, want int) {
	t.Helper()
	if st := xfertest.Status(t, originClient, f); st != want {
		t.Fatalf("GET %s: status %d, want %d", f.URL, st, want)
	}
}
