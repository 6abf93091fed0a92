package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestMigrationVisibilityFileHash: migration 0008 turns visibility_file, on a database of
// version 7 with rows, into a hash index (the registration's cheaper insert, docs/decisions.md
// 2026-12-02 "visibility(file) as a hash index"), and the lookup by file answers as before over
// the old rows and new ones: the collector's Files sees which files some scope sees, before and
// after scopes are deleted.
func TestMigrationVisibilityFileHash(t *testing.T) {
	ctx := t.Context()
	dsn := postgres.FreshSchema(t)
	if err := postgres.MigrateTo(ctx, dsn, 7); err != nil {
		t.Fatal(err)
	}
	g := indextest.NewGen(80)
	shared, only, dead := g.Record(1), g.Record(1), g.Record(1)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		h      hash.Hash
		scopes []string
	}{{shared.Hash, []string{"models/a/x", "models/a/y"}}, {only.Hash, []string{"models/a/x"}}, {dead.Hash, nil}} {
		if _, err := conn.Exec(ctx, `INSERT INTO files(hash, record) VALUES ($1, '\x00')`, f.h[:]); err != nil {
			t.Fatal(err)
		}
		for _, s := range f.scopes {
			if _, err := conn.Exec(ctx, `INSERT INTO visibility(scope, file) VALUES ($1, $2)`, s, f.h[:]); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn.Close(ctx)

	db, err := postgres.Open(ctx, postgres.Options{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var def string
	if err := pgxString(ctx, dsn, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'visibility_file'`, &def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "USING hash (file)") {
		t.Fatalf("visibility_file after the migration: %q; want a hash index on file", def)
	}
	// A file registered after the migration, in a new scope.
	fresh := g.Registration("models/b/z", 1, 1, 1)
	if _, err := db.RegisterShard(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	visible := func() map[hash.Hash]bool {
		t.Helper()
		es, err := db.Files(ctx, hash.Hash{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[hash.Hash]bool{}
		for _, e := range es {
			out[e.Hash] = e.Visible
		}
		return out
	}
	fh := fresh.Files[0].Hash
	if v := visible(); len(v) != 4 || !v[shared.Hash] || !v[only.Hash] || v[dead.Hash] || !v[fh] {
		t.Fatalf("Files after the migration = %v; want %s, %s, %s visible, %s not", v, shared.Hash, only.Hash, fh, dead.Hash)
	}
	// Hidden in x: shared is still visible in y, only and fresh (hidden in z) are not.
	if _, err := db.Delete(ctx, "models/a/x", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete(ctx, "models/b/z", nil); err != nil {
		t.Fatal(err)
	}
	if v := visible(); !v[shared.Hash] || v[only.Hash] || v[fh] {
		t.Fatalf("Files after hiding scope x and z = %v; want only %s visible", v, shared.Hash)
	}
}

func pgxString(ctx context.Context, dsn, q string, s *string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, q).Scan(s)
}
