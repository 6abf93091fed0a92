package postgres_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestMigrationVisibilityByFile: visibility rows written under schema 7 (primary key (scope,
// file), index on file) are all there after migration 0008, keyed by (file, scope) with an index
// on scope and no index on file alone; the lookups, the paging in (file, scope) order, a scope's
// deletion and a registration of a row already there behave as before. Also when the operator
// built the new indexes beforehand, concurrently (docs/origin.md): the migration uses them.
func TestMigrationVisibilityByFile(t *testing.T) {
	for _, prebuilt := range []bool{false, true} {
		name := "migration builds the indexes"
		if prebuilt {
			name = "indexes built concurrently before"
		}
		t.Run(name, func(t *testing.T) { testMigrationVisibilityByFile(t, prebuilt) })
	}
}

func testMigrationVisibilityByFile(t *testing.T, prebuilt bool) {
	ctx := t.Context()
	dsn := postgres.FreshSchema(t)
	if err := postgres.MigrateTo(ctx, dsn, 7); err != nil {
		t.Fatal(err)
	}
	g := indextest.NewGen(81)
	files := []*index.Registration{g.Registration("models/acme/a", 3, 1, 0), g.Registration("models/acme/b", 2, 1, 0)}
	// The first registration's files are also visible in a third scope.
	shared := *files[0]
	shared.Scope = "models/acme/c"
	files = append(files, &shared)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	want := map[index.VisibleKey]bool{}
	for _, r := range files {
		for _, f := range r.Files {
			b, err := f.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `INSERT INTO files(hash, record) VALUES ($1, $2) ON CONFLICT DO NOTHING`, f.Hash[:], b); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `INSERT INTO visibility(scope, file) VALUES ($1, $2)`, r.Scope, f.Hash[:]); err != nil {
				t.Fatal(err)
			}
			want[index.VisibleKey{Scope: r.Scope, File: f.Hash}] = true
		}
	}
	var oids []uint32
	if prebuilt {
		for _, q := range []string{
			`CREATE UNIQUE INDEX CONCURRENTLY visibility_file_scope ON visibility(file, scope)`,
			`CREATE INDEX CONCURRENTLY visibility_scope ON visibility(scope)`,
		} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		oids = indexOIDs(t, conn)
	}
	conn.Close(ctx)

	db, err := postgres.Open(ctx, postgres.Options{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var defs []string
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'visibility' ORDER BY indexname`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		defs = append(defs, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(defs) != 2 || !strings.Contains(defs[0], "UNIQUE INDEX visibility_pkey ON ") || !strings.HasSuffix(defs[0], "(file, scope)") ||
		!strings.Contains(defs[1], "INDEX visibility_scope ON ") || !strings.HasSuffix(defs[1], "(scope)") {
		t.Fatalf("visibility's indexes after the migration:\n%v\nwant the primary key on (file, scope) and visibility_scope on (scope)", defs)
	}
	if got := indexOIDs(t, conn); prebuilt && !slices.Equal(got, oids) {
		t.Fatalf("index oids %v after the migration, %v before: the indexes built beforehand were not used", got, oids)
	}

	// Every row, once, in (file, scope) order, over pages that split one file's rows.
	var (
		got   []index.VisibleKey
		after index.VisibleKey
	)
	for range len(want) + 1 {
		p, err := db.VisibleFiles(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) == 0 {
			break
		}
		for _, v := range p {
			got = append(got, v.VisibleKey)
		}
		after = p[len(p)-1].VisibleKey
	}
	if len(got) != len(want) {
		t.Fatalf("VisibleFiles after the migration: %d rows, want %d", len(got), len(want))
	}
	for i, k := range got {
		if !want[k] {
			t.Fatalf("row %d (%q, %s) was not written", i, k.Scope, k.File)
		}
		if i > 0 {
			p := got[i-1]
			if c := bytes.Compare(p.File[:], k.File[:]); c > 0 || c == 0 && p.Scope >= k.Scope {
				t.Fatalf("row %d out of (file, scope) order", i)
			}
		}
	}
	for k := range want {
		if err := db.Visible(ctx, k.File, k.Scope); err != nil {
			t.Fatalf("Visible(%s, %q) after the migration: %v", k.File, k.Scope, err)
		}
	}
	// A registration of rows already there adds none (the new key is unique as the old one
	// was); the other scope's rows stay when one scope goes.
	if _, err := db.RegisterShard(ctx, &shared); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM visibility`).Scan(&n); err != nil || n != len(want) {
		t.Fatalf("visibility rows after registering them again: %d, %v; want %d", n, err, len(want))
	}
	if n, err := db.Delete(ctx, "models/acme/a", nil); err != nil || n != 3 {
		t.Fatalf("Delete of models/acme/a = %d, %v; want 3", n, err)
	}
	for _, f := range files[0].Files {
		if err := db.Visible(ctx, f.Hash, "models/acme/c"); err != nil {
			t.Fatalf("file %s in models/acme/c after models/acme/a's deletion: %v", f.Hash, err)
		}
		if err := db.Visible(ctx, f.Hash, "models/acme/a"); !errors.Is(err, index.ErrNotFound) {
			t.Fatalf("file %s in models/acme/a after its deletion: %v, want ErrNotFound", f.Hash, err)
		}
	}
	es, err := db.Files(ctx, hash.Hash{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 5 || slices.ContainsFunc(es, func(e index.FileEntry) bool { return !e.Visible }) {
		t.Fatalf("Files after the deletion = %+v; want 5, each visible in some scope", es)
	}
}

// indexOIDs returns the oids of visibility's indexes on (file, scope) and on (scope), in that
// order, whatever their names.
func indexOIDs(t *testing.T, conn *pgx.Conn) []uint32 {
	t.Helper()
	var a, b uint32
	err := conn.QueryRow(t.Context(), `SELECT
	(SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = 'visibility'::regclass AND i.indkey::text = (SELECT attnum FROM pg_attribute WHERE attrelid = 'visibility'::regclass AND attname = 'file') || ' ' || (SELECT attnum FROM pg_attribute WHERE attrelid = 'visibility'::regclass AND attname = 'scope')),
	(SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = 'visibility'::regclass AND i.indkey::text = (SELECT attnum FROM pg_attribute WHERE attrelid = 'visibility'::regclass AND attname = 'scope')::text)`).Scan(&a, &b)
	if err != nil {
		t.Fatal(err)
	}
	return []uint32{a, b}
}
