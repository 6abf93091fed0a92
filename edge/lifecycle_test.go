package edge

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/xfertest"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// TestDeleteThroughEdge: a repository's writer deletes a file, then the whole repository,
// through the edge (the DELETE routes are proxied to the origin). After each, within
// revokeDeadline, the edge answers 404 for the reconstruction and 403 for the transfer URLs it
// had issued for the deleted files, while another repository holding the same file keeps
// downloading through the edge.
func TestDeleteThroughEdge(t *testing.T) {
	const scope, other = "models/acme/edge-delete", "models/acme/edge-delete-other"
	o := startOrigin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	f := upload(t, o, w, 71, 2, 16)
	g := upload(t, o, w, 72, 1, 16)
	upload(t, o, o.token(t, other, "write"), 71, 2, 16) // f, in the other repository too
	rOther := o.token(t, other, "read")
	e := startEdge(t, o, t.TempDir())

	for _, x := range []*fixture{f, g} {
		got, err := download(t, e.tlsURL, r, xetclient.HTTP1, x.hash, nil)
		if err != nil || !bytes.Equal(got, x.data) {
			t.Fatalf("download of %s before the delete: %v", x.hash, err)
		}
	}
	fURLs, gURLs := edgeFetches(t, e, r, f.hash), edgeFetches(t, e, r, g.hash)

	gone := func(name string, file *fixture, urls []xfertest.Fetch) {
		t.Helper()
		start := time.Now()
		deadline := time.Now().Add(revokeDeadline)
		recon := e.tlsURL + "/v2/reconstructions/" + file.hash.String()
		for {
			st, _ := call(t, "GET", recon, r, nil)
			if st == http.StatusNotFound {
				break
			}
			if st != http.StatusOK || time.Now().After(deadline) {
				t.Fatalf("%s: edge reconstruction %d after %v", name, st, time.Since(start))
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, u := range urls {
			if st := fetchStatus(t, u); st != http.StatusForbidden {
				t.Errorf("%s: edge transfer URL issued before: %d, want 403", name, st)
			}
		}
		t.Logf("%s: edge answered 404 after %v", name, time.Since(start).Round(time.Millisecond))
	}

	if st, body := call(t, "DELETE", e.tlsURL+"/v1/files/"+f.hash.String(), r, nil); st != http.StatusForbidden {
		t.Fatalf("delete with a read token through the edge: %d %s", st, body)
	}
	if st, body := call(t, "DELETE", e.tlsURL+"/v1/files/"+f.hash.String(), w, nil); st != http.StatusOK {
		t.Fatalf("delete through the edge: %d %s", st, body)
	}
	if st, _ := call(t, "GET", o.url+"/v2/reconstructions/"+f.hash.String(), r, nil); st != http.StatusNotFound {
		t.Errorf("origin reconstruction right after the delete: %d, want 404", st)
	}
	gone("file", f, fURLs)
	if st, _ := call(t, "GET", e.tlsURL+"/v2/reconstructions/"+g.hash.String(), r, nil); st != http.StatusOK {
		t.Errorf("the repository's other file after the file delete: %d", st)
	}

	if st, body := call(t, "DELETE", e.tlsURL+"/v1/scope", w, nil); st != http.StatusOK {
		t.Fatalf("delete of the repository through the edge: %d %s", st, body)
	}
	gone("repository", g, gURLs)
	if st, _ := call(t, "DELETE", e.tlsURL+"/v1/scope", w, nil); st != http.StatusNotFound {
		t.Errorf("deleting the deleted repository again: %d, want 404", st)
	}
	got, err := download(t, e.tlsURL, rOther, xetclient.HTTP1, f.hash, nil)
	if err != nil || !bytes.Equal(got, f.data) {
		t.Errorf("the other repository's copy after the deletes: %v", err)
	}
}
