package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestCheckGrace: the grace period's range, with and without force.
func TestCheckGrace(t *testing.T) {
	const week = 7 * 24 * time.Hour
	for _, c := range []struct {
		grace time.Duration
		force bool
		ok    bool
	}{
		{week + time.Hour, false, true},
		{week, false, true},
		{week - time.Second, false, false},
		{time.Second, true, true},
		{time.Second - 1, true, false},
		{0, true, false},
		{-time.Hour, true, false},
	} {
		err := CheckGrace(c.grace, week, c.force)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrGrace)) {
			t.Errorf("CheckGrace(%v, force %v) = %v; want ok %v", c.grace, c.force, err, c.ok)
		}
	}
}

type fileRoots []hash.Hash

func (r fileRoots) Files(ctx context.Context, fn func(hash.Hash) error) error {
	for _, f := range r {
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// TestGCRoots: a file kept by a root source survives garbage collection after its visibility
// is gone (its xorb stays indexed and stored); without the root, the same state is collected.
func TestGCRoots(t *testing.T) {
	ctx := t.Context()
	ix, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "index.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	objs, err := objstore.NewLocal(filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	g := indextest.NewGen(5)
	l := g.Layout(2)
	body := []byte("xorb bytes")
	if err := objs.Put(ctx, objstore.XorbKey(l.Hash), bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.PutXorb(ctx, l, uint64(len(body))); err != nil {
		t.Fatal(err)
	}
	rec := &recon.FileRecord{Hash: g.Hash(), Size: 10, Terms: []recon.Term{{Xorb: l.Hash, End: 1, RawBytes: 10, ByteEnd: 8}}}
	if _, err := ix.RegisterShard(ctx, &index.Registration{Shard: g.Hash(), Scope: "models/r", Files: []*recon.FileRecord{rec}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Delete(ctx, "models/r", nil); err != nil {
		t.Fatal(err)
	}
	run := func(roots ...Roots) *Report {
		t.Helper()
		var last *Report
		for range 2 {
			time.Sleep(5 * time.Millisecond)
			if last, err = GC(ctx, ix, objs, GCOptions{Grace: time.Millisecond, Roots: roots}); err != nil {
				t.Fatal(err)
			}
		}
		return last
	}
	if r := run(fileRoots{rec.Hash}); r.Swept != 0 || r.LiveXorbs != 1 {
		t.Fatalf("with the file rooted: %+v", r)
	}
	if _, err := objs.Stat(ctx, objstore.XorbKey(l.Hash)); err != nil {
		t.Fatalf("rooted file's xorb object: %v", err)
	}
	if r := run(); r.Swept != 1 || r.ObjectsDeleted != 1 {
		t.Fatalf("without the root: %+v", r)
	}
	if _, err := objs.Stat(ctx, objstore.XorbKey(l.Hash)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("collected xorb's object: %v", err)
	}
}
