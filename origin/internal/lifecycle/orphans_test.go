package lifecycle

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// orphanBackend is an index and a store, the grace period the test uses on them, and how it
// makes the objects written so far older than that grace.
type orphanBackend struct {
	name  string
	open  func(t *testing.T) (index.Index, objstore.ObjectStore)
	grace time.Duration
	age   func(t *testing.T, objs objstore.ObjectStore, keys []string)
}

func orphanBackends() []orphanBackend {
	return []orphanBackend{{
		name: "sqlite+local",
		open: func(t *testing.T) (index.Index, objstore.ObjectStore) {
			ix, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "index.db")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ix.Close() })
			objs, err := objstore.NewLocal(filepath.Join(t.TempDir(), "objects"))
			if err != nil {
				t.Fatal(err)
			}
			return ix, objs
		},
		grace: time.Hour,
		age: func(t *testing.T, objs objstore.ObjectStore, keys []string) {
			old := time.Now().Add(-2 * time.Hour)
			for _, k := range keys {
				dir, name := path.Split(k)
				p := filepath.Join(objs.(*objstore.Local).Root(), filepath.FromSlash(dir), "_"+name[:2], name)
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
		},
	}, {
		// MinIO sets modification times itself: a short grace, and waiting it out.
		name:  "postgres+minio",
		open:  openPostgresMinIO,
		grace: 3 * time.Second,
		age:   func(*testing.T, objstore.ObjectStore, []string) { time.Sleep(4500 * time.Millisecond) },
	}}
}

// openPostgresMinIO opens a Postgres index in a fresh schema and a MinIO store in a fresh
// bucket; skips without the test services (fails under CI=true).
func openPostgresMinIO(t *testing.T) (index.Index, objstore.ObjectStore) {
	dsn := testenv.Require(t, testenv.PostgresDSN)
	s3 := testenv.RequireS3(t)
	var b [6]byte
	rand.Read(b[:])
	schema := "xet_gc_test_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	ix, err := postgres.Open(ctx, postgres.Options{DSN: u.String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	objs, err := objstore.NewS3(ctx, objstore.S3Options{Endpoint: s3.Endpoint, Bucket: "xet-gc-test-" + hex.EncodeToString(b[:]),
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return ix, objs
}

func putObject(t *testing.T, objs objstore.ObjectStore, key string, body []byte) {
	t.Helper()
	if err := objs.Put(t.Context(), key, bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
}

// TestGCOrphans: objects without an index row, older than the grace period, are reported by a
// dry run (which deletes nothing) and deleted by a real one; a young orphan, an indexed xorb
// (live or not) and an indexed shard's object are kept.
func TestGCOrphans(t *testing.T) {
	for _, b := range orphanBackends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			ix, objs := b.open(t)
			g := indextest.NewGen(9)

			orphanXorb, orphanShard := g.Hash(), g.Hash()
			xorbBody, shardBody := []byte("orphan xorb bytes"), []byte("orphan shard")
			putObject(t, objs, objstore.XorbKey(orphanXorb), xorbBody)
			putObject(t, objs, objstore.ShardKey(orphanShard), shardBody)

			// Indexed: a live xorb (a visible file references it, registered by a shard whose
			// body is in the store) and an unreferenced one.
			live, unref := g.Layout(2), g.Layout(2)
			for _, l := range []*xorb.Layout{live, unref} {
				putObject(t, objs, objstore.XorbKey(l.Hash), []byte("indexed xorb"))
				if _, err := ix.PutXorb(ctx, l, 12); err != nil {
					t.Fatal(err)
				}
			}
			shard := g.Hash()
			putObject(t, objs, objstore.ShardKey(shard), []byte("indexed shard body"))
			rec := &recon.FileRecord{Hash: g.Hash(), Size: 10, Terms: []recon.Term{{Xorb: live.Hash, End: 1, RawBytes: 10, ByteEnd: 8}}}
			if _, err := ix.RegisterShard(ctx, &index.Registration{Shard: shard, Scope: "models/r", Files: []*recon.FileRecord{rec}}); err != nil {
				t.Fatal(err)
			}
			kept := []string{objstore.XorbKey(live.Hash), objstore.XorbKey(unref.Hash), objstore.ShardKey(shard)}
			orphans := []string{objstore.XorbKey(orphanXorb), objstore.ShardKey(orphanShard)}
			b.age(t, objs, append(kept, orphans...))

			stat := func(key string) error { _, err := objs.Stat(ctx, key); return err }
			rep, err := GC(ctx, ix, objs, GCOptions{Grace: b.grace, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Orphans != 2 || rep.OrphanBytes != uint64(len(xorbBody)+len(shardBody)) || rep.ObjectsDeleted != 0 || rep.OrphansRestored != 0 {
				t.Errorf("dry run: %+v; want 2 orphans of %d bytes, nothing deleted", rep, len(xorbBody)+len(shardBody))
			}
			for _, k := range append(kept, orphans...) {
				if err := stat(k); err != nil {
					t.Errorf("after the dry run, %s: %v", k, err)
				}
			}

			young := g.Hash()
			putObject(t, objs, objstore.XorbKey(young), []byte("young orphan"))
			rep, err = GC(ctx, ix, objs, GCOptions{Grace: b.grace})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Orphans != 2 || rep.OrphanBytes != uint64(len(xorbBody)+len(shardBody)) || rep.ObjectsDeleted != 2 ||
				rep.BytesReclaimed != rep.OrphanBytes || rep.OrphansRestored != 0 {
				t.Errorf("gc: %+v; want 2 orphans of %d bytes deleted", rep, len(xorbBody)+len(shardBody))
			}
			for _, k := range orphans {
				if err := stat(k); !errors.Is(err, objstore.ErrNotFound) {
					t.Errorf("orphan %s after gc: %v, want ErrNotFound", k, err)
				}
			}
			for _, k := range append(kept, objstore.XorbKey(young)) {
				if err := stat(k); err != nil {
					t.Errorf("%s after gc: %v, want kept", k, err)
				}
			}
		})
	}
}

// indexOnDelete runs hook (once) just before deleting key: an upload indexing the object
// between the collector's last look at the index and its Delete.
type indexOnDelete struct {
	objstore.ObjectStore
	key  string
	hook func()
}

func (s *indexOnDelete) Delete(ctx context.Context, key string) error {
	if key == s.key && s.hook != nil {
		s.hook()
		s.hook = nil
	}
	return s.ObjectStore.Delete(ctx, key)
}

// TestGCOrphanIndexedDuringDeletion: an orphan xorb that an upload indexes while the collector
// deletes it is put back whole, and reported as restored, not deleted.
func TestGCOrphanIndexedDuringDeletion(t *testing.T) {
	b := orphanBackends()[0]
	ctx := t.Context()
	ix, local := b.open(t)
	l := indextest.NewGen(11).Layout(2)
	key := objstore.XorbKey(l.Hash)
	body := []byte("bytes an upload found under its key")
	putObject(t, local, key, body)
	b.age(t, local, []string{key})
	objs := &indexOnDelete{ObjectStore: local, key: key, hook: func() {
		if _, err := ix.PutXorb(ctx, l, uint64(len(body))); err != nil {
			t.Error(err)
		}
	}}
	rep, err := GC(ctx, ix, objs, GCOptions{Grace: b.grace})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphansRestored != 1 || rep.Orphans != 0 || rep.ObjectsDeleted != 0 {
		t.Errorf("report %+v; want 1 orphan restored, none deleted", rep)
	}
	rc, _, err := local.Get(ctx, key)
	if err != nil {
		t.Fatalf("indexed xorb's object after gc: %v", err)
	}
	defer rc.Close()
	var got bytes.Buffer
	if _, err := got.ReadFrom(rc); err != nil || !bytes.Equal(got.Bytes(), body) {
		t.Errorf("restored object: %q, %v; want %q", got.Bytes(), err, body)
	}
}

// TestGCTempFiles: a local store's temporary file of an upload a crash interrupted, older than
// the grace period, is reported by a dry run and removed by a real one; an upload in flight
// keeps its file and still commits, also one whose file is older than the grace period (a body
// still arriving: docs/decisions.md, 2026-12-02 "A live write's temporary file is not garbage").
func TestGCTempFiles(t *testing.T) {
	b := orphanBackends()[0] // sqlite+local: the store with temporary files
	ctx := t.Context()
	ix, objs := b.open(t)
	l := objs.(*objstore.Local)
	stage := func(key, body string) *objstore.Staged {
		st, err := l.Stage(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
		return st
	}
	g := indextest.NewGen(11)
	// What a crash leaves: the file of an upload never committed, held by no process (the
	// staged file linked to a name of its own, then the staged object closed).
	crashed := stage(objstore.XorbKey(g.Hash()), "crashed upload")
	var staged string
	filepath.WalkDir(l.Root(), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			staged = p
		}
		return nil
	})
	stale := filepath.Join(filepath.Dir(staged), ".put-crashed")
	if err := os.Link(staged, stale); err != nil {
		t.Fatal(err)
	}
	crashed.Close()
	old := time.Now().Add(-2 * b.grace)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	young := objstore.XorbKey(g.Hash())
	inFlight := stage(young, "in flight")
	defer inFlight.Close()
	temps := func() map[string]bool {
		out := map[string]bool{}
		filepath.WalkDir(l.Root(), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				out[p] = true
			}
			return nil
		})
		return out
	}
	before := temps()
	slowKey := objstore.XorbKey(g.Hash())
	slow := stage(slowKey, "slow") // in flight for longer than the grace period
	defer slow.Close()
	for p := range temps() {
		if !before[p] {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}

	rep, err := GC(ctx, ix, objs, GCOptions{Grace: b.grace, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TempFiles != 1 || rep.TempBytes != uint64(len("crashed upload")) {
		t.Errorf("dry run: %d temporary files of %d bytes, want 1 of %d", rep.TempFiles, rep.TempBytes, len("crashed upload"))
	}
	if _, err := os.Stat(stale); err != nil {
		t.Errorf("after the dry run: %v", err)
	}
	rep, err = GC(ctx, ix, objs, GCOptions{Grace: b.grace})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TempFiles != 1 || rep.TempBytes != uint64(len("crashed upload")) {
		t.Errorf("gc: %d temporary files of %d bytes, want 1 of %d", rep.TempFiles, rep.TempBytes, len("crashed upload"))
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file after gc: %v, want removed", err)
	}
	for _, w := range []*objstore.Staged{inFlight, slow} {
		if err := w.Commit(ctx); err != nil {
			t.Fatalf("an upload in flight after gc: %v", err)
		}
	}
	for _, k := range []string{young, slowKey} {
		if _, err := objs.Stat(ctx, k); err != nil {
			t.Errorf("committed after gc: %v", err)
		}
	}
}
