package main

import (
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// gcReport is the JSON report of `xet-origin gc` (origin/internal/gcReport).
type gcReport struct {
	Files          int64   `json:"files"`
	Xorbs          int64   `json:"xorbs"`
	LiveXorbs      int64   `json:"live_xorbs"`
	Condemned      int64   `json:"condemned"`
	Revived        int64   `json:"revived"`
	Sweepable      int64   `json:"sweepable"`
	Swept          int64   `json:"swept"`
	SweptBytes     uint64  `json:"swept_bytes"`
	ObjectsDeleted int64   `json:"objects_deleted"`
	BytesReclaimed uint64  `json:"bytes_reclaimed"`
	Seconds        float64 `json:"seconds"`
	// Dead shards, orphans and hub blobs.
	Shards          int64  `json:"shards"`
	ShardsCondemned int64  `json:"shards_condemned"`
	ShardsSweepable int64  `json:"shards_sweepable"`
	ShardsSwept     int64  `json:"shards_swept"`
	ShardObjects    int64  `json:"shard_objects_deleted"`
	Orphans         int64  `json:"orphans"`
	HubBlobs        int64  `json:"hub_blobs"`
	HubBlobBytes    uint64 `json:"hub_blob_bytes"`
}

// The collector's failpoint steps (origin/internal/lifecycle.Step*).
const (
	stepMarked      = "marked"
	stepIndexSwept  = "index-swept"
	stepObjectBatch = "object-batch"
	stepShardObject = "shard-object"
)

// gcGrace is the grace period of these tests (with --force: below auth.dedup_expiry).
const gcGrace = "1s"

// gcRun runs `xet-origin gc --grace gcGrace --force` (with extra environment) and decodes its
// report; it fails the test unless the status is want.
func (o *proc) gc(t *testing.T, want int, env ...string) gcReport {
	t.Helper()
	saved := o.env
	o.env = append(append([]string(nil), o.env...), env...)
	code, out, errOut := o.runAdmin(t, "gc", "--grace", gcGrace, "--force")
	o.env = saved
	if code != want {
		t.Fatalf("gc: status %d, want %d; stderr %s", code, want, errOut)
	}
	var r gcReport
	if want == 0 {
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("gc report %q: %v", out, err)
		}
	}
	return r
}

// storeBytes sums the xorb objects in o's store.
func (o *proc) storeBytes(t *testing.T) (n uint64) {
	for _, s := range o.xorbObjects(t) {
		n += uint64(s)
	}
	return n
}

// gcFixture is two repositories sharing one xorb: a holds fa (shared + ua1) and fa2 (ua2, one
// term per chunk: a shard over 1 MiB, stored as an object), b holds fb (shared + ub).
type gcFixture struct {
	a, b         string
	fa, fa2, fb  fileUp
	aUniqueBytes uint64 // usage's unique bytes of a before its deletion
	before       uint64 // xorb bytes in the store before
	fa2Shard     string // the object key of fa2's shard
}

// makeBigShardFile is a file over one xorb of n tiny chunks, one term per chunk: its shard
// (n × 48 bytes of xorb section, n × 96 of terms) is over the origin's 1 MiB inline limit for
// n = 8192, so the origin stores it as an object.
func makeBigShardFile(rng *mrand.Rand, n int) fileUp {
	var chunks [][]byte
	for range n {
		raw := make([]byte, 64+rng.IntN(64))
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		chunks = append(chunks, raw)
	}
	x := packXorb(xorb.LZ4, chunks)
	f := fileUp{xorbs: []xorbUp{x}}
	sf := shard.File{}
	var leaves []hash.Leaf
	blk := shard.Xorb{Hash: x.hash, RawBytes: x.layout.RawLen()}
	var s uint32
	for i, ch := range x.layout.ChunkHashes {
		raw := chunks[i]
		f.data = append(f.data, raw...)
		leaves = append(leaves, hash.Leaf{Hash: ch, Size: uint64(len(raw))})
		sf.Terms = append(sf.Terms, shard.Term{Xorb: x.hash, RawBytes: uint32(len(raw)), Start: uint32(i), End: uint32(i + 1)})
		sf.Verification = append(sf.Verification, hash.Verification(x.layout.ChunkHashes[i:i+1]))
		blk.Chunks = append(blk.Chunks, shard.XorbChunk{Hash: ch, RawStart: s, RawLen: x.layout.RawEnds[i] - s})
		s = x.layout.RawEnds[i]
	}
	sf.Hash = hash.File(leaves)
	sh := &shard.Shard{Files: []shard.File{sf}, Xorbs: []shard.Xorb{blk}}
	f.hash = sf.Hash
	f.shard = sh.AppendUpload(nil)
	return f
}

func setupGC(t *testing.T, o *proc) *gcFixture {
	t.Helper()
	rng := mrand.New(mrand.NewPCG(91, 92))
	shared := makeXorb(rng, 3)
	f := &gcFixture{a: "models/acme/gc-a", b: "models/acme/gc-b"}
	f.fa = makeFile(shared, makeXorb(rng, 2))
	f.fa2 = makeBigShardFile(rng, 8192)
	f.fa2Shard = "shards/" + hash.Chunk(f.fa2.shard).String()
	f.fb = makeFile(shared, makeXorb(rng, 2))
	uploadFile(t, o, o.token(t, f.a, "write"), f.fa)
	uploadFile(t, o, o.token(t, f.a, "write"), f.fa2)
	uploadFile(t, o, o.token(t, f.b, "write"), f.fb)
	u := o.usage(t, f.a)
	f.aUniqueBytes = u.Scopes[0].UniqueBytes
	f.before = o.storeBytes(t)
	if f.aUniqueBytes == 0 || u.Totals.StoredBytes != f.before {
		t.Fatalf("usage before: %+v; store holds %d", u, f.before)
	}
	if _, ok := o.storeObjects(t, "shards")[f.fa2Shard]; !ok {
		t.Fatalf("fa2's shard is not stored as an object: %v", o.storeObjects(t, "shards"))
	}
	return f
}

// deleteA deletes repository a through the API and runs the collection that condemns its
// xorbs, then waits out the grace period.
func (f *gcFixture) deleteA(t *testing.T, o *proc) {
	t.Helper()
	if st, b := call(t, "DELETE", o.base()+"/v1/scope", o.token(t, f.a, "write"), nil); st != http.StatusOK {
		t.Fatalf("delete %s: %d %s", f.a, st, b)
	}
	time.Sleep(1100 * time.Millisecond) // the shards registered a grace period ago
	r := o.gc(t, 0)
	// fa2's shard offers only ua2: dead. fa's offers the shared xorb too, through entries that
	// name it until ua1's sweep drops them.
	if r.Condemned != 2 || r.Swept != 0 || r.ObjectsDeleted != 0 || r.ShardsCondemned != 1 || r.Shards != 3 {
		t.Fatalf("first gc after the delete: %+v; want 2 xorbs and 1 of 3 shards condemned, nothing swept", r)
	}
	time.Sleep(1100 * time.Millisecond) // the grace period itself: what is being tested
}

// checkShardsCollected: two more collections a grace period apart leave one shard row (fb's),
// nothing condemned, no shard object (fa2's went), and b whole.
func (f *gcFixture) checkShardsCollected(t *testing.T, o *proc) {
	t.Helper()
	for range 2 {
		time.Sleep(1100 * time.Millisecond)
		o.gc(t, 0)
	}
	if r := o.gc(t, 0); r.Shards != 1 || r.ShardsCondemned != 0 || r.ShardsSweepable != 0 {
		t.Errorf("gc after the shards' grace: %+v; want only b's shard left, nothing condemned", r)
	}
	if left := o.storeObjects(t, "shards"); len(left) != 0 {
		t.Errorf("shard objects left: %v", left)
	}
	checkDownload(t, o.client(t, o.token(t, f.b, "read")), f.fb.hash, f.fb.data)
}

// checkReclaimed: a's unique bytes left the store, b is whole, usage agrees with the store.
func (f *gcFixture) checkReclaimed(t *testing.T, o *proc) {
	t.Helper()
	after := o.storeBytes(t)
	if f.before-after != f.aUniqueBytes {
		t.Errorf("store shrank by %d bytes, want a's unique bytes %d", f.before-after, f.aUniqueBytes)
	}
	checkDownload(t, o.client(t, o.token(t, f.b, "read")), f.fb.hash, f.fb.data)
	if st, _ := call(t, "GET", o.base()+"/v2/reconstructions/"+f.fa.hash.String(), o.token(t, f.a, "read"), nil); st != http.StatusNotFound {
		t.Errorf("deleted file: %d, want 404", st)
	}
	u := o.usage(t)
	if u.Totals.StoredBytes != after || u.Scopes[0].Scope != f.b || o.usage(t, f.a).Scopes[0].Files != 0 {
		t.Errorf("usage after: %+v; store holds %d", u, after)
	}
	if r := o.gc(t, 0); r.Condemned != 0 || r.Swept != 0 || r.ObjectsDeleted != 0 || r.Sweepable != 0 {
		t.Errorf("gc with nothing left to do: %+v", r)
	}
}

// TestGCReclaimsDeletedRepository, on both backends against the binary: deleting a
// repository that shares a xorb with another, then two collections a grace period apart,
// shrinks the store (measured in the store) by exactly the unique bytes usage reported for it,
// leaves the other repository byte-exact, and the usage report agrees with the store after.
// Condemned xorbs are not offered by the dedup route, a registration referencing a condemned
// xorb revives it (it survives the sweep), one referencing a swept xorb is 400 missing_xorb
// until the xorb is uploaded again. Bad grace periods exit 2 with the reason; a dry run
// changes nothing.
func TestGCReclaimsDeletedRepository(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		o.start(t)
		f := setupGC(t, o)
		for _, c := range []struct {
			args []string
			why  string
		}{
			{[]string{"--grace", "1s"}, "shorter than auth.dedup_expiry"},
			{[]string{"--grace", "0s", "--force"}, "below the minimum"},
			{[]string{"--grace", "-1h", "--force"}, "below the minimum"},
			{[]string{"--grace", "soon"}, "invalid value"},
			{[]string{"extra"}, "unexpected arguments"},
		} {
			code, _, errOut := o.runAdmin(t, "gc", c.args...)
			if code != 2 || !strings.Contains(errOut, c.why) {
				t.Errorf("gc %q: status %d, stderr %q; want 2 and %q", c.args, code, errOut, c.why)
			}
		}
		if r := o.gc(t, 0); r.Condemned != 0 || r.LiveXorbs != 4 || r.Xorbs != 4 {
			t.Fatalf("gc with everything live: %+v", r)
		}
		f.deleteA(t, o)

		// Condemned: not offered by the dedup route (the shared xorb still is).
		rt := o.token(t, f.b, "read")
		ua2 := f.fa2.xorbs[0]
		// fa's first chunk (the shared xorb's) is a dedup entry that fb's shard, registered last,
		// took over: it offers fb's xorbs (shared, ub) and inherits what fa's offered (shared,
		// ua1) — all but the condemned ua1.
		st, ans := call(t, "GET", o.base()+"/v1/chunks/default/"+f.fa.xorbs[0].layout.ChunkHashes[0].String(), rt, nil)
		if st != http.StatusOK {
			t.Fatalf("dedup of the shared xorb's chunk: %d", st)
		}
		sh, err := shard.Parse(ans)
		if err != nil {
			t.Fatal(err)
		}
		offered := map[hash.Hash]bool{}
		for _, x := range sh.Xorbs {
			offered[x.Hash] = true
		}
		if ua1 := f.fa.xorbs[1].hash; offered[ua1] || !offered[f.fa.xorbs[0].hash] || !offered[f.fb.xorbs[1].hash] || len(offered) != 2 {
			t.Errorf("dedup answer offers %v; want the shared xorb and fb's own, never the condemned ua1 %s", offered, ua1)
		}
		// fa2's first chunk names fa2's shard, whose only xorb ua2 is condemned: nothing to offer.
		if st, _ := call(t, "GET", o.base()+"/v1/chunks/default/"+ua2.layout.ChunkHashes[0].String(), rt, nil); st != http.StatusNotFound {
			t.Errorf("dedup with every xorb condemned: %d, want 404", st)
		}
		// A shard referencing condemned ua2 (no xorb upload: as after a dedup answer) revives it.
		c := "models/acme/gc-c"
		wc := o.token(t, c, "write")
		if st, b := call(t, "POST", o.base()+"/v1/shards", wc, f.fa2.shard); st != http.StatusOK {
			t.Fatalf("registration referencing a condemned xorb: %d %s", st, b)
		}
		dry := o.runDry(t)
		if dry.Sweepable != 1 || dry.SweptBytes == 0 || dry.Swept != 0 {
			t.Errorf("dry run: %+v; want 1 sweepable", dry)
		}
		r := o.gc(t, 0)
		// The registration revived ua2 itself (its transaction dropped the condemnation).
		if r.Revived != 0 || r.LiveXorbs != 3 || r.Swept != 1 || r.ObjectsDeleted != 1 || r.BytesReclaimed == 0 || r.BytesReclaimed != r.SweptBytes {
			t.Fatalf("gc after the grace: %+v; want ua2 revived, ua1 swept", r)
		}
		checkDownload(t, o.client(t, o.token(t, c, "read")), f.fa2.hash, f.fa2.data)
		f.aUniqueBytes -= uint64(o.xorbObjects(t)["xorbs/default/"+ua2.hash.String()])

		// A registration referencing swept ua1: missing_xorb; after uploading it again: fine.
		st, b := call(t, "POST", o.base()+"/v1/shards", wc, f.fa.shard)
		if st != http.StatusBadRequest || !strings.Contains(string(b), "missing_xorb") {
			t.Errorf("registration referencing a swept xorb: %d %s; want 400 missing_xorb", st, b)
		}
		f.checkReclaimed(t, o)
		uploadFile(t, o, wc, f.fa)
		checkDownload(t, o.client(t, o.token(t, c, "read")), f.fa.hash, f.fa.data)
	})
}

// runDry runs `xet-origin gc --dry-run` and decodes its report.
func (o *proc) runDry(t *testing.T) gcReport {
	t.Helper()
	code, out, errOut := o.runAdmin(t, "gc", "--grace", gcGrace, "--force", "--dry-run")
	if code != 0 {
		t.Fatalf("gc --dry-run: %d %s", code, errOut)
	}
	var r gcReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestGCCrashAtEachStep kills the collector (exit 137 at a failpoint, no cleanup: as kill -9)
// after marking, between the index sweep and the object deletions, and after the first batch
// of object deletions; the next collection finishes the job: the store shrinks by the deleted
// repository's unique bytes, the other repository downloads byte-exact, and a third run finds
// nothing to do. On both backends.
func TestGCCrashAtEachStep(t *testing.T) {
	for _, step := range []string{stepMarked, stepIndexSwept, stepObjectBatch, stepShardObject} {
		t.Run(step, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, o *proc) {
				o.start(t)
				f := setupGC(t, o)
				f.deleteA(t, o)
				o.gc(t, 137, "XETCDN_GC_FAILPOINT="+step)
				if step == stepMarked {
					// Killed before sweeping: nothing deleted yet.
					if got := o.storeBytes(t); got != f.before {
						t.Errorf("after a crash at %s the store holds %d, want %d", step, got, f.before)
					}
				}
				checkDownload(t, o.client(t, o.token(t, f.b, "read")), f.fb.hash, f.fb.data)
				if step == stepShardObject || step == stepIndexSwept {
					// The crashed run swept fa2's shard from the index: its object is an orphan.
					if _, ok := o.storeObjects(t, "shards")[f.fa2Shard]; ok != (step == stepIndexSwept) {
						t.Errorf("after a crash at %s fa2's shard object stored: %v", step, ok)
					}
				}
				r := o.gc(t, 0)
				if r.ObjectsDeleted == 0 && step != stepObjectBatch && step != stepShardObject {
					t.Errorf("the run after the crash deleted nothing: %+v", r)
				}
				if step == stepIndexSwept && r.Orphans != 1 {
					t.Errorf("the run after the crash: %+v; want fa2's shard object deleted as an orphan", r)
				}
				f.checkReclaimed(t, o)
				f.checkShardsCollected(t, o)
			})
		})
	}
}

// withGCConfig makes o run its background collector every interval with a 1 s grace (forced),
// adding a "gc" block to o's configuration file (creating one for the embedded backends).
func withGCConfig(t *testing.T, o *proc, interval string) {
	t.Helper()
	cfg := map[string]any{}
	path := filepath.Join(t.TempDir(), "gc.json")
	if i := slices.Index(o.args, "--config"); i >= 0 {
		b, err := os.ReadFile(o.args[i+1])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		path = o.args[i+1]
	} else {
		o.args = append(o.args, "--config", path)
	}
	cfg["gc"] = map[string]any{"interval": interval, "grace": gcGrace, "force": true}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestGCOriginKilledAtEachStep: the origin's background collector (gc.interval 300 ms) is
// killed with the origin (exit 137, no cleanup, at a failpoint) after marking, between the
// index sweep and the object deletions, and after the first batch of deletions. Restarted
// without the failpoint, the origin's next runs finish the job: the store shrinks by the deleted
// repository's unique bytes and the other repository downloads byte-exact. On both backends.
func TestGCOriginKilledAtEachStep(t *testing.T) {
	for _, step := range []string{stepMarked, stepIndexSwept, stepObjectBatch, stepShardObject} {
		t.Run(step, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, o *proc) {
				p := o.start(t)
				f := setupGC(t, o)
				p.Stop()
				withGCConfig(t, o, "300ms")
				if st, b := func() (int, []byte) {
					p := o.start(t)
					defer p.Stop()
					return call(t, "DELETE", o.base()+"/v1/scope", o.token(t, f.a, "write"), nil)
				}(); st != http.StatusOK {
					t.Fatalf("delete: %d %s", st, b)
				}
				saved := o.env
				o.env = append(append([]string(nil), o.env...), "XETCDN_GC_FAILPOINT="+step)
				p = o.start(t)
				o.env = saved
				select {
				case <-p.Exited():
				case <-time.After(30 * time.Second):
					t.Fatalf("the origin did not reach the failpoint %s within 30 s", step)
				}
				if !strings.Contains(p.Log(), "gc failpoint "+step) {
					t.Fatalf("the origin exited, but not at the failpoint: %s", p.Log())
				}
				o.start(t)
				if err := eventually(30*time.Second, func() error {
					if got := o.storeBytes(t); f.before-got != f.aUniqueBytes {
						return fmt.Errorf("store holds %d bytes, want %d", got, f.before-f.aUniqueBytes)
					}
					if left := o.storeObjects(t, "shards"); len(left) != 0 {
						return fmt.Errorf("shard objects left: %v", left)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				checkDownload(t, o.client(t, o.token(t, f.b, "read")), f.fb.hash, f.fb.data)
				if st, _ := call(t, "GET", o.base()+"/v2/reconstructions/"+f.fa.hash.String(), o.token(t, f.a, "read"), nil); st != http.StatusNotFound {
					t.Errorf("deleted file after the collection: %d", st)
				}
			})
		})
	}
}

// TestGCRefusesUnavailableBackends: with the object store or the index unreachable, `xet-origin
// gc` exits 1 naming the dependency and changes nothing: the next run with both reachable finds
// exactly what it would have found (the repository's xorbs still unmarked, nothing swept).
func TestGCRefusesUnavailableBackends(t *testing.T) {
	bin := buildBinary(t)
	o := newOrigin(t, bin)
	pg, s3 := services(t)
	production(t, o, pg, s3)
	p := o.start(t)
	f := setupGC(t, o)
	if st, b := call(t, "DELETE", o.base()+"/v1/scope", o.token(t, f.a, "write"), nil); st != http.StatusOK {
		t.Fatalf("delete: %d %s", st, b)
	}
	p.Stop()
	i := slices.Index(o.args, "--config")
	good := o.args[i+1]
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	dead := testenv.FreeAddr(t) // nothing listens there
	objs := cfg["objects"].(map[string]any)
	objs["endpoint"] = dead
	badStore := filepath.Join(t.TempDir(), "bad-store.json")
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(badStore, b, 0o600); err != nil {
		t.Fatal(err)
	}
	saved := slices.Clone(o.args)
	o.args[i+1] = badStore
	code, out, errOut := o.runAdmin(t, "gc", "--grace", gcGrace, "--force")
	o.args = saved
	if code != 1 || !strings.Contains(errOut, "object store") || !strings.Contains(errOut, "unavailable") || out != "" {
		t.Errorf("gc with the store down: status %d, stdout %q, stderr %q; want 1 naming the store", code, out, errOut)
	}
	// The index unreachable: a DSN to the dead address.
	savedEnv := slices.Clone(o.env)
	for k, e := range o.env {
		if strings.HasPrefix(e, "XETCDN_POSTGRES_DSN=") {
			o.env[k] = "XETCDN_POSTGRES_DSN=postgres://x:y@" + dead + "/db?connect_timeout=2"
		}
	}
	code, out, errOut = o.runAdmin(t, "gc", "--grace", gcGrace, "--force")
	o.env = savedEnv
	if code != 1 || out != "" || !strings.Contains(errOut, "unavailable") {
		t.Errorf("gc with the index down: status %d, stdout %q, stderr %q; want 1, unavailable", code, out, errOut)
	}
	// Nothing was marked by the refused runs: this one condemns a's two xorbs.
	if r := o.gc(t, 0); r.Condemned != 2 || r.Swept != 0 {
		t.Errorf("first run after the refused ones: %+v; want 2 condemned", r)
	}
}
