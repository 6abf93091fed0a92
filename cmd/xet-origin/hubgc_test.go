package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
)

// hubUpload uploads f to the scope of w the way hf_xet does for a Hub upload: its xorbs, then
// a shard whose file carries the content's SHA-256 (the hub maps it to the Xet hash).
func hubUpload(t *testing.T, o *proc, w string, f fileUp) {
	t.Helper()
	sh, err := shard.Parse(f.shard)
	if err != nil {
		t.Fatal(err)
	}
	sum := hash.FromSHA256(sha256.Sum256(f.data))
	sh.Files[0].SHA256 = &sum
	up := f
	up.shard = sh.AppendUpload(nil)
	uploadFile(t, o, w, up)
}

// hubCommit posts an NDJSON commit to main of model repository id: path → the Xet file f,
// plus one inline file; it returns the commit id.
func hubCommit(t *testing.T, o *proc, w, id, path string, f fileUp, inlinePath string, inline []byte) string {
	t.Helper()
	sum := sha256.Sum256(f.data)
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	for _, l := range []map[string]any{
		{"key": "header", "value": map[string]any{"summary": "upload " + path}},
		{"key": "lfsFile", "value": map[string]any{"path": path, "algo": "sha256", "oid": hex.EncodeToString(sum[:]), "size": len(f.data)}},
		{"key": "file", "value": map[string]any{"path": inlinePath, "content": base64.StdEncoding.EncodeToString(inline), "encoding": "base64"}},
	} {
		if err := enc.Encode(l); err != nil {
			t.Fatal(err)
		}
	}
	st, b := call(t, "POST", o.base()+"/api/models/"+id+"/commit/main", w, body.Bytes(), "Content-Type", "application/x-ndjson")
	if st != http.StatusOK {
		t.Fatalf("commit to %s: %d %s", id, st, b)
	}
	var r struct {
		CommitOid string `json:"commitOid"`
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.CommitOid) != 40 {
		t.Fatalf("commit answer %s: %v", b, err)
	}
	return r.CommitOid
}

// hubRepo creates (or, with del, deletes) model repository ns/name through the Hub routes.
func hubRepo(t *testing.T, o *proc, w, ns, name string, del bool) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": name, "organization": ns, "type": "model"})
	method, route := "POST", "/api/repos/create"
	if del {
		method, route = "DELETE", "/api/repos/delete"
	}
	if st, b := call(t, method, o.base()+route, w, body); st != http.StatusOK {
		t.Fatalf("%s %s/%s: %d %s", route, ns, name, st, b)
	}
}

// hubGet downloads a file of a public model repository at a revision with a plain GET of the
// resolve route (the origin streams a Xet file's bytes from its xorbs).
func hubGet(t *testing.T, o *proc, id, rev, path string) (int, []byte) {
	t.Helper()
	return call(t, "GET", fmt.Sprintf("%s/%s/resolve/%s/%s", o.base(), id, rev, path), "", nil)
}

// TestHubGCRoots, on both backends against the binary, proves the hub feeds garbage collection
// (docs/hub.md, "Garbage collection"):
//
//   - a Hub repository with two commits (each a Xet file and an inline file) whose scope's
//     visibility is dropped through the CAS lifecycle route (DELETE /v1/scope) keeps every
//     revision downloadable byte-exact through two `xet-origin gc` runs a grace period apart:
//     its commits are roots, nothing is condemned;
//   - deleting a Hub repository (DELETE /api/repos/delete) drops its scope's visibility (the
//     CAS read is 404 at once) and its files stop being roots: two collections later its unique
//     xorb is gone from the store (measured in the store) and the store shrank by exactly its
//     size, while the xorb it shared with the other repositories stays and they download
//     byte-exact.
func TestHubGCRoots(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		o.start(t)
		rng := mrand.New(mrand.NewPCG(95, 96))
		shared := makeXorb(rng, 3)
		const a, c = "acme/hub-a", "acme/hub-c"
		wa, wc := o.token(t, "models/"+a, "write"), o.token(t, "models/"+c, "write")
		hubRepo(t, o, wa, "acme", "hub-a", false)
		hubRepo(t, o, wc, "acme", "hub-c", false)
		v1 := makeFile(shared, makeXorb(rng, 2))
		v2 := makeFile(shared, makeXorb(rng, 2))
		fc := makeFile(shared, makeXorb(rng, 2))
		cfg1, cfg2 := []byte(`{"v":1}`), []byte(`{"v":2}`)
		hubUpload(t, o, wa, v1)
		rev1 := hubCommit(t, o, wa, a, "model.bin", v1, "config.json", cfg1)
		hubUpload(t, o, wa, v2)
		rev2 := hubCommit(t, o, wa, a, "model.bin", v2, "config.json", cfg2)
		hubUpload(t, o, wc, fc)
		revC := hubCommit(t, o, wc, c, "model.bin", fc, "config.json", cfg1)

		want := []struct {
			id, rev, path string
			data          []byte
		}{
			{a, rev1, "model.bin", v1.data}, {a, rev1, "config.json", cfg1},
			{a, rev2, "model.bin", v2.data}, {a, rev2, "config.json", cfg2},
			{a, "main", "model.bin", v2.data},
		}
		checkAll := func(when string) {
			t.Helper()
			for _, w := range want {
				st, got := hubGet(t, o, w.id, w.rev, w.path)
				if st != http.StatusOK || !bytes.Equal(got, w.data) {
					t.Fatalf("%s: GET %s@%s/%s: %d, %d bytes (want 200, %d bytes equal)", when, w.id, w.rev, w.path, st, len(got), len(w.data))
				}
			}
		}
		checkAll("after the upload")

		// (a) The scope's visibility dropped through the CAS lifecycle route: the commits
		// still name the files, so they stay roots.
		if st, b := call(t, "DELETE", o.base()+"/v1/scope", wa, nil); st != http.StatusOK {
			t.Fatalf("DELETE /v1/scope of %s: %d %s", a, st, b)
		}
		for i := range 2 {
			if r := o.gc(t, 0); r.Condemned != 0 || r.Swept != 0 || r.ObjectsDeleted != 0 {
				t.Fatalf("gc %d after the scope delete: %+v; want nothing condemned or swept", i+1, r)
			}
			time.Sleep(1100 * time.Millisecond) // the grace period (gcGrace)
		}
		checkAll("after the scope's visibility was dropped and two collections")

		// (b) Deleting repository c: its scope loses visibility at once, then its unique xorb is
		// collected; the shared xorb and repository a stay.
		rc := o.token(t, "models/"+c, "read")
		if st, b := call(t, "GET", o.base()+"/v2/reconstructions/"+fc.hash.String(), rc, nil); st != http.StatusOK {
			t.Fatalf("reconstruction of c's file before its deletion: %d %s", st, b)
		}
		if st, _ := hubGet(t, o, c, revC, "model.bin"); st != http.StatusOK {
			t.Fatalf("c's file before its deletion: %d", st)
		}
		before := o.xorbObjects(t)
		key := func(x xorbUp) string { return "xorbs/default/" + x.hash.String() }
		unique := fc.xorbs[1]
		for _, x := range []xorbUp{shared, unique, v1.xorbs[1], v2.xorbs[1]} {
			if _, ok := before[key(x)]; !ok {
				t.Fatalf("xorb %s not in the store before the deletion: %v", x.hash, before)
			}
		}
		storeBefore := o.storeBytes(t)
		hubRepo(t, o, wc, "acme", "hub-c", true)
		if st, _ := call(t, "GET", o.base()+"/v2/reconstructions/"+fc.hash.String(), rc, nil); st != http.StatusNotFound {
			t.Fatalf("reconstruction of the deleted repository's file: %d, want 404", st)
		}
		if st, b := hubGet(t, o, c, revC, "model.bin"); st != http.StatusNotFound || !strings.Contains(string(b), "not found") {
			t.Fatalf("resolve in the deleted repository: %d %s, want 404", st, b)
		}
		if r := o.gc(t, 0); r.Condemned != 1 || r.Swept != 0 {
			t.Fatalf("first gc after the repository deletion: %+v; want its one unique xorb condemned", r)
		}
		time.Sleep(1100 * time.Millisecond)
		if r := o.gc(t, 0); r.Swept != 1 || r.ObjectsDeleted != 1 {
			t.Fatalf("second gc after the repository deletion: %+v; want its unique xorb swept", r)
		}
		after := o.xorbObjects(t)
		if _, ok := after[key(unique)]; ok {
			t.Errorf("the deleted repository's unique xorb is still stored")
		}
		for _, x := range []xorbUp{shared, v1.xorbs[1], v2.xorbs[1]} {
			if after[key(x)] != before[key(x)] {
				t.Errorf("xorb %s: %d bytes stored after, %d before", x.hash, after[key(x)], before[key(x)])
			}
		}
		if got, want := storeBefore-o.storeBytes(t), uint64(before[key(unique)]); got != want {
			t.Errorf("store shrank by %d bytes, want the unique xorb's %d", got, want)
		}
		checkAll("after repository c was deleted and collected")
	})
}
