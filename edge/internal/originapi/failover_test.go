package originapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFailover: requests to the first origin go to the one in use; a dead one is left for the
// next (and the move sticks), a request with a body is resent only if it can be got again, an
// HTTP error answer is an answer (no move), other hosts pass through.
func TestFailover(t *testing.T) {
	var hits [2]int
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits[1]++
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		io.WriteString(w, r.Host+" "+string(b))
	}))
	defer live.Close()
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits[0]++ }))
	deadURL := dead.URL
	dead.Close() // refuses connections from now on
	origins, err := ParseOrigins(deadURL + ", " + live.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	f := NewFailover(http.DefaultTransport, origins)
	c := &http.Client{Transport: f}

	get := func(u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	liveHost := strings.TrimPrefix(live.URL, "http://")
	if st, body := get(deadURL + "/x"); st != 200 || !strings.HasPrefix(body, liveHost) {
		t.Fatalf("GET via the dead origin: %d %q, want 200 from the live one with its Host", st, body)
	}
	if f.Moves.Load() != 1 || f.Current().String() != live.URL {
		t.Errorf("moves %d, current %s; want 1 and the live origin", f.Moves.Load(), f.Current())
	}
	// The move sticks: the next request goes straight to the live origin, an error answer too.
	if st, _ := get(deadURL + "/fail"); st != http.StatusServiceUnavailable || f.Moves.Load() != 1 {
		t.Errorf("503 answer: status %d, moves %d; want the 503 and no move", st, f.Moves.Load())
	}
	// A body that cannot be got again is not resent: fail over from scratch with a fresh Failover.
	f2 := NewFailover(http.DefaultTransport, origins)
	req, _ := http.NewRequest("POST", deadURL+"/p", io.NopCloser(strings.NewReader("payload")))
	if _, err := f2.RoundTrip(req); err == nil {
		t.Error("a one-shot body was resent to the next origin")
	}
	req, _ = http.NewRequest("POST", deadURL+"/p", strings.NewReader("payload")) // GetBody set
	resp, err := (&http.Client{Transport: f2}).Do(req)
	if err != nil {
		t.Fatalf("POST with a rewindable body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasSuffix(string(b), " payload") {
		t.Errorf("resent POST body: %q", b)
	}
	// Other hosts pass through untouched.
	before := hits[1]
	if st, _ := get(live.URL + "/other"); st != 200 || hits[1] != before+1 {
		t.Errorf("pass-through: %d", st)
	}
	if _, err := ParseOrigins("http://a:1,ftp://b"); err == nil {
		t.Error("ftp origin accepted")
	}
	if _, err := ParseOrigins("http://a:1,"); err == nil {
		t.Error("empty origin accepted")
	}
}
