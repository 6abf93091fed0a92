package edge

import (
	"bytes"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"

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

// segmentFiles counts the data cache's segment files of xorb h under the edge's directory.
func segmentFiles(t *testing.T, dir string, h hash.Hash) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), h.String()+".") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGCEvictsEdgeCache: an edge that served a repository's files holds their xorbs in its
// data cache. After the repository is deleted and the origin's garbage collection (the
// binary's gc command, two runs a grace period apart) deleted its unique xorbs, the edge
// removes their segments from disk within revokeDeadline of the sweep, keeps those of another
// repository, which still downloads byte-exact through it, and the transfer URLs it issued
// for the deleted files return no bytes.
func TestGCEvictsEdgeCache(t *testing.T) {
	const a, b = "models/acme/edge-gc-a", "models/acme/edge-gc-b"
	o := startOrigin(t, t.TempDir())
	wa, ra, rb := o.token(t, a, "write"), o.token(t, a, "read"), o.token(t, b, "read")
	fa := upload(t, o, wa, 81, 2, 8)
	fb := upload(t, o, o.token(t, b, "write"), 82, 1, 8)
	edgeDir := t.TempDir()
	e := startEdge(t, o, edgeDir)
	for _, c := range []struct {
		f   *fixture
		tok string
	}{{fa, ra}, {fb, rb}} {
		got, err := download(t, e.tlsURL, c.tok, xetclient.HTTP1, c.f.hash, nil)
		if err != nil || !bytes.Equal(got, c.f.data) {
			t.Fatalf("download of %s: %v", c.f.hash, err)
		}
	}
	// A segment is renamed into place just after its last verified bytes were served.
	for _, l := range append(append([]*xorb.Layout{}, fa.layouts...), fb.layouts...) {
		waitFor(t, "xorb "+l.Hash.String()+" in the edge's data cache after its download", func() bool {
			return segmentFiles(t, edgeDir, l.Hash) > 0
		})
	}
	aURLs := edgeFetches(t, e, ra, fa.hash)
	if st, body := call(t, "DELETE", e.tlsURL+"/v1/scope", wa, nil); st != http.StatusOK {
		t.Fatalf("delete: %d %s", st, body)
	}
	gc := func() {
		t.Helper()
		code, out, errOut := testenv.RunStatus(t, o.bin, nil, "gc", "--data-dir", o.dir, "--grace", "1s", "--force")
		if code != 0 {
			t.Fatalf("gc: %d %s %s", code, out, errOut)
		}
	}
	gc()                                // condemns
	time.Sleep(1100 * time.Millisecond) // the grace period
	gc()                                // sweeps, deletes the objects, appends the sweep event
	start := time.Now()
	for _, l := range fa.layouts {
		for segmentFiles(t, edgeDir, l.Hash) > 0 {
			if time.Since(start) > revokeDeadline {
				t.Fatalf("the edge still caches deleted xorb %s %v after the sweep", l.Hash, revokeDeadline)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("edge evicted the deleted xorbs within %v of the sweep", time.Since(start).Round(time.Millisecond))
	if segmentFiles(t, edgeDir, fb.layouts[0].Hash) == 0 {
		t.Error("the other repository's xorb was evicted too")
	}
	got, err := download(t, e.tlsURL, rb, xetclient.HTTP1, fb.hash, nil)
	if err != nil || !bytes.Equal(got, fb.data) {
		t.Errorf("the other repository after the collection: %v", err)
	}
	for _, u := range aURLs {
		if st := fetchStatus(t, u); st == http.StatusPartialContent || st == http.StatusOK {
			t.Errorf("edge transfer URL of a deleted, collected file: %d", st)
		}
	}
}
