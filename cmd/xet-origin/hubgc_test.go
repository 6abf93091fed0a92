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

// hubGCFixture: repositories acme/hub-a (two commits, each a Xet file and an inline file) and
// acme/hub-c (one commit), their Xet files sharing one xorb and each holding a unique one.
type hubGCFixture struct {
	wa, wc, rc  string // CAS tokens: write a, write c, read c
	shared      xorbUp
	v1, v2, fc  fileUp
	revC        string
	want        []hubWant
	before      map[string]int64 // xorb objects before c's deletion
	beforeBytes uint64
}

type hubWant struct {
	id, rev, path string
	data          []byte
}

const hubA, hubC = "acme/hub-a", "acme/hub-c"

func xorbObjectKey(x xorbUp) string { return "xorbs/default/" + x.hash.String() }

func setupHubGC(t *testing.T, o *proc) *hubGCFixture {
	t.Helper()
	rng := mrand.New(mrand.NewPCG(95, 96))
	f := &hubGCFixture{shared: makeXorb(rng, 3)}
	f.wa, f.wc, f.rc = o.token(t, "models/"+hubA, "write"), o.token(t, "models/"+hubC, "write"), o.token(t, "models/"+hubC, "read")
	hubRepo(t, o, f.wa, "acme", "hub-a", false)
	hubRepo(t, o, f.wc, "acme", "hub-c", false)
	f.v1 = makeFile(f.shared, makeXorb(rng, 2))
	f.v2 = makeFile(f.shared, makeXorb(rng, 2))
	f.fc = makeFile(f.shared, makeXorb(rng, 2))
	cfg1, cfg2 := []byte(`{"v":1}`), []byte(`{"v":2}`)
	hubUpload(t, o, f.wa, f.v1)
	rev1 := hubCommit(t, o, f.wa, hubA, "model.bin", f.v1, "config.json", cfg1)
	hubUpload(t, o, f.wa, f.v2)
	rev2 := hubCommit(t, o, f.wa, hubA, "model.bin", f.v2, "config.json", cfg2)
	hubUpload(t, o, f.wc, f.fc)
	f.revC = hubCommit(t, o, f.wc, hubC, "model.bin", f.fc, "config.json", cfg1)
	f.want = []hubWant{
		{hubA, rev1, "model.bin", f.v1.data}, {hubA, rev1, "config.json", cfg1},
		{hubA, rev2, "model.bin", f.v2.data}, {hubA, rev2, "config.json", cfg2},
		{hubA, "main", "model.bin", f.v2.data},
	}
	f.checkAll(t, o, "after the upload")
	if st, b := call(t, "GET", o.base()+"/v2/reconstructions/"+f.fc.hash.String(), f.rc, nil); st != http.StatusOK {
		t.Fatalf("reconstruction of c's file: %d %s", st, b)
	}
	if st, _ := hubGet(t, o, hubC, f.revC, "model.bin"); st != http.StatusOK {
		t.Fatalf("c's file: %d", st)
	}
	f.before, f.beforeBytes = o.xorbObjects(t), o.storeBytes(t)
	for _, x := range []xorbUp{f.shared, f.fc.xorbs[1], f.v1.xorbs[1], f.v2.xorbs[1]} {
		if _, ok := f.before[xorbObjectKey(x)]; !ok {
			t.Fatalf("xorb %s not in the store: %v", x.hash, f.before)
		}
	}
	return f
}

// checkAll downloads every revision of repository a, byte-exact.
func (f *hubGCFixture) checkAll(t *testing.T, o *proc, when string) {
	t.Helper()
	for _, w := range f.want {
		st, got := hubGet(t, o, w.id, w.rev, w.path)
		if st != http.StatusOK || !bytes.Equal(got, w.data) {
			t.Fatalf("%s: GET %s@%s/%s: %d, %d bytes (want 200, %d bytes equal): %.200s", when, w.id, w.rev, w.path, st, len(got), len(w.data), got)
		}
	}
}

// refuseDropA: every CAS-level delete in repository a's scope is refused (409 through the
// API, naming the repository route; exit 1 for the command) and changes nothing: hf_xet's CAS
// read of a's file still answers.
func (f *hubGCFixture) refuseDropA(t *testing.T, o *proc) {
	t.Helper()
	for _, path := range []string{"/v1/scope", "/v1/files/" + f.v1.hash.String()} {
		st, b := call(t, "DELETE", o.base()+path, f.wa, nil)
		if st != http.StatusConflict || !strings.Contains(string(b), "hub_repository") || !strings.Contains(string(b), "/api/repos/delete") {
			t.Fatalf("DELETE %s in Hub repository %s: %d %s; want 409 naming DELETE /api/repos/delete", path, hubA, st, b)
		}
	}
	if code, _, errOut := o.runAdmin(t, "delete", "--scope", "models/"+hubA, "--all"); code != 1 || !strings.Contains(errOut, "/api/repos/delete") {
		t.Fatalf("xet-origin delete of Hub repository %s: status %d, stderr %q; want 1 naming the repository route", hubA, code, errOut)
	}
	for _, f := range []fileUp{f.v1, f.v2} {
		if st, b := call(t, "GET", o.base()+"/v2/reconstructions/"+f.hash.String(), o.token(t, "models/"+hubA, "read"), nil); st != http.StatusOK {
			t.Fatalf("CAS reconstruction in %s after the refused deletes: %d %s", hubA, st, b)
		}
	}
}

// deleteC deletes repository c through the Hub route; its scope loses visibility at once.
func (f *hubGCFixture) deleteC(t *testing.T, o *proc) {
	t.Helper()
	hubRepo(t, o, f.wc, "acme", "hub-c", true)
	if st, _ := call(t, "GET", o.base()+"/v2/reconstructions/"+f.fc.hash.String(), f.rc, nil); st != http.StatusNotFound {
		t.Fatalf("reconstruction of the deleted repository's file: %d, want 404", st)
	}
	if st, b := hubGet(t, o, hubC, f.revC, "model.bin"); st != http.StatusNotFound || !strings.Contains(string(b), "not found") {
		t.Fatalf("resolve in the deleted repository: %d %s, want 404", st, b)
	}
}

// cCollected reports nil once c's unique xorb is gone from the store and the store shrank by
// exactly its size, the other xorbs unchanged.
func (f *hubGCFixture) cCollected(t *testing.T, o *proc) error {
	after := o.xorbObjects(t)
	unique := xorbObjectKey(f.fc.xorbs[1])
	if _, ok := after[unique]; ok {
		return fmt.Errorf("the deleted repository's unique xorb is still stored")
	}
	for _, x := range []xorbUp{f.shared, f.v1.xorbs[1], f.v2.xorbs[1]} {
		if k := xorbObjectKey(x); after[k] != f.before[k] {
			return fmt.Errorf("xorb %s: %d bytes stored now, %d before", x.hash, after[k], f.before[k])
		}
	}
	if got, want := f.beforeBytes-o.storeBytes(t), uint64(f.before[unique]); got != want {
		return fmt.Errorf("store shrank by %d bytes, want the unique xorb's %d", got, want)
	}
	return nil
}

// TestHubGCRoots, on both backends against the binary, proves the hub feeds `xet-origin gc`
// (docs/hub.md, "Garbage collection"):
//
//   - CAS-level deletes in repository a's scope (DELETE /v1/scope, /v1/files, xet-origin
//     delete) are refused (409 / exit 1, naming DELETE /api/repos/delete) and change nothing;
//     after two collections a grace period apart every revision of a still downloads
//     byte-exact, through the resolve route and hf_xet's CAS route;
//   - deleting repository c (DELETE /api/repos/delete) drops its scope's visibility (the CAS
//     read is 404 at once) and its files stop being roots: two collections later its unique
//     xorb is gone (measured in the store), the store shrank by exactly its size, and the xorb
//     it shared with a stays;
//   - deleting a as well (its scope already invisible) frees the rest: the store holds no xorb.
func TestHubGCRoots(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		o.start(t)
		f := setupHubGC(t, o)
		f.refuseDropA(t, o)
		var reps []gcReport
		for range 2 {
			reps = append(reps, o.gc(t, 0))
			time.Sleep(1100 * time.Millisecond) // the grace period (gcGrace)
		}
		f.checkAll(t, o, "after the refused CAS deletes and two collections")
		checkDownload(t, o.client(t, o.token(t, "models/"+hubA, "read")), f.v1.hash, f.v1.data)
		for i, r := range reps {
			if r.Condemned != 0 || r.Swept != 0 || r.ObjectsDeleted != 0 || r.HubBlobs != 0 {
				t.Fatalf("gc %d after the refused deletes: %+v; want nothing condemned or swept", i+1, r)
			}
		}
		if blobs := o.storeObjects(t, "hub"); len(blobs) != 2 {
			t.Fatalf("hub objects: %v; want the two inline files", blobs)
		}

		f.deleteC(t, o)
		if r := o.gc(t, 0); r.Condemned != 1 || r.Swept != 0 {
			t.Fatalf("first gc after the repository deletion: %+v; want its one unique xorb condemned", r)
		}
		time.Sleep(1100 * time.Millisecond)
		if r := o.gc(t, 0); r.Swept != 1 || r.ObjectsDeleted != 1 {
			t.Fatalf("second gc after the repository deletion: %+v; want its unique xorb swept", r)
		}
		if err := f.cCollected(t, o); err != nil {
			t.Error(err)
		}
		f.checkAll(t, o, "after repository c was deleted and collected")

		// c's inline file is also a's first revision's: both blobs stay.
		if blobs := o.storeObjects(t, "hub"); len(blobs) != 2 {
			t.Fatalf("hub objects after deleting c: %v; want both inline files (a names them)", blobs)
		}

		// Deleting a: none of its revisions roots anything, and the store empties. Its inline
		// files, which no commit names any more (written more than a grace ago), go to the
		// trash in the first run and for good a grace later; a commit storing the same content
		// again in between is served, and the second run keeps it.
		hubRepo(t, o, f.wa, "acme", "hub-a", true)
		if st, _ := hubGet(t, o, hubA, "main", "model.bin"); st != http.StatusNotFound {
			t.Fatalf("resolve in deleted repository a: %d, want 404", st)
		}
		if r := o.gc(t, 0); r.Condemned != 3 || r.HubBlobs != 0 {
			t.Fatalf("first gc after deleting a: %+v; want its 3 xorbs condemned, no blob deleted yet", r)
		}
		cfg1Key := "hub/blobs/" + sha256hex([]byte(`{"v":1}`))
		if hubObjs := o.storeObjects(t, "hub"); len(hubObjs) != 2 || hubObjs[cfg1Key] != 0 {
			t.Fatalf("hub objects after the first gc: %v; want both inline files in the trash", hubObjs)
		}
		wd := o.token(t, "models/acme/hub-d", "write")
		hubRepo(t, o, wd, "acme", "hub-d", false)
		fd := makeFile(makeXorb(mrand.New(mrand.NewPCG(97, 98)), 2))
		hubUpload(t, o, wd, fd)
		revD := hubCommit(t, o, wd, "acme/hub-d", "model.bin", fd, "config.json", []byte(`{"v":1}`))
		time.Sleep(1100 * time.Millisecond)
		r := o.gc(t, 0)
		if r.Swept != 3 || r.HubBlobs != 1 || r.HubBlobBytes != uint64(len(`{"v":2}`)) || r.ObjectsDeleted != 4 {
			t.Fatalf("second gc after deleting a: %+v; want its 3 xorbs swept and the trashed {\"v\":2} deleted", r)
		}
		if left := o.xorbObjects(t); len(left) != 1 || left[xorbObjectKey(fd.xorbs[0])] == 0 {
			t.Errorf("xorbs left after deleting every repository but d: %v", left)
		}
		if hubObjs := o.storeObjects(t, "hub"); len(hubObjs) != 1 || hubObjs[cfg1Key] == 0 {
			t.Fatalf("hub objects after the second gc: %v; want only d's inline file", hubObjs)
		}
		if st, b := hubGet(t, o, "acme/hub-d", revD, "config.json"); st != http.StatusOK || string(b) != `{"v":1}` {
			t.Fatalf("d's inline file: %d %q", st, b)
		}
	})
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestHubGCRootsBackground is TestHubGCRoots with the origin's background collector (gc.interval
// 200 ms, grace 1 s) instead of the command: once it has collected deleted repository c's unique
// xorb (so it ran past the grace period after a's scope delete too), every revision of a still
// downloads byte-exact.
func TestHubGCRootsBackground(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		withGCConfig(t, o, "200ms")
		o.start(t)
		f := setupHubGC(t, o)
		f.refuseDropA(t, o)
		f.deleteC(t, o)
		if err := eventually(30*time.Second, func() error { return f.cCollected(t, o) }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // more runs, each past a's grace period
		f.checkAll(t, o, "after background collections")
	})
}
