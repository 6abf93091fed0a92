package sqlite_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
)

// TestRegisterManyRows: a shard of more files and dedup chunks than one multi-row insert
// writes (two full statements of 64 rows and a remainder) registers every file record,
// visibility row and dedup entry, byte for byte, and registering it again inserts nothing.
func TestRegisterManyRows(t *testing.T) {
	db := openAt(t, filepath.Join(t.TempDir(), "index.db"))
	defer db.Close()
	ctx := t.Context()
	g := indextest.NewGen(15)
	r := g.Registration("models/acme/many", 2*64+37, 3, 2*64+5)
	for _, again := range []bool{false, true} {
		ins, err := db.RegisterShard(ctx, r)
		if err != nil || ins == again {
			t.Fatalf("RegisterShard (again=%v) = %v, %v; want inserted=%v", again, ins, err, !again)
		}
	}
	for i, f := range r.Files {
		b, err := db.FileBytes(ctx, f.Hash, "models/acme/many")
		if err != nil {
			t.Fatalf("file %d of %d: %v", i, len(r.Files), err)
		}
		want, _ := f.MarshalBinary()
		if !bytes.Equal(b, want) {
			t.Fatalf("file %d of %d: record differs from the registered one", i, len(r.Files))
		}
		if err := db.Visible(ctx, f.Hash, "models/acme/many"); err != nil {
			t.Fatalf("file %d of %d: %v", i, len(r.Files), err)
		}
		if err := db.Visible(ctx, f.Hash, "models/acme/other"); err == nil {
			t.Fatalf("file %d of %d visible in another scope", i, len(r.Files))
		}
	}
	for _, c := range r.Dedup {
		wantDedup(t, db, c, r.Xorbs)
	}
}
