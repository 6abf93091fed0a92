package sqlite_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func openAt(t *testing.T, path string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), sqlite.Options{Path: path})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return db
}

func TestConformance(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index {
		return openAt(t, filepath.Join(t.TempDir(), "index.db"))
	})
}

// TestConformanceLayoutCache runs the suite on the layout cache decorator.
func TestConformanceLayoutCache(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index {
		c, err := index.NewLayoutCache(openAt(t, filepath.Join(t.TempDir(), "index.db")), 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestReopen checks that what was acknowledged is there after Close and Open, and that opening
// an up-to-date database applies no migration twice.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	g := indextest.NewGen(100)
	r := g.Registration("models/a/b", 3, 2, 2)
	l := g.Layout(5)
	db := openAt(t, path)
	if _, err := db.PutXorb(t.Context(), l, 99); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RegisterShard(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := db.Hide(t.Context(), r.Scope, []hash.Hash{r.Files[0].Hash}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		db = openAt(t, path)
		if got, err := db.Layouts(t.Context(), []hash.Hash{l.Hash}); err != nil || len(got) != 1 {
			t.Fatalf("Layouts after reopen = %d, %v", len(got), err)
		}
		if _, err := db.File(t.Context(), r.Files[1].Hash, r.Scope); err != nil {
			t.Fatalf("File after reopen: %v", err)
		}
		if _, err := db.File(t.Context(), r.Files[0].Hash, r.Scope); !errors.Is(err, index.ErrNotFound) {
			t.Fatalf("hidden File after reopen: %v, want ErrNotFound", err)
		}
		if evs, err := db.Events(t.Context(), 0, 0); err != nil || len(evs) != 1 {
			t.Fatalf("Events after reopen = %v, %v; want one", evs, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db = openAt(t, path)
	defer db.Close()
	if ins, err := db.RegisterShard(t.Context(), r); err != nil || ins {
		t.Fatalf("RegisterShard after reopen = %v, %v; want known shard", ins, err)
	}
}

// TestQueryPlans checks that every lookup is a primary-key search, never a scan.
func TestQueryPlans(t *testing.T) {
	db := openAt(t, filepath.Join(t.TempDir(), "index.db"))
	defer db.Close()
	plans, err := db.ExplainLookups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) == 0 {
		t.Fatal("no query plans")
	}
	for q, plan := range plans {
		t.Logf("%-9s %s", q, plan)
		if strings.Contains(plan, "SCAN") || !strings.Contains(plan, "SEARCH") {
			t.Errorf("%s: plan %q is not a key search", q, plan)
		}
	}
	if plan := plans["VisibleFiles"]; !strings.Contains(plan, "visibility_file") || strings.Contains(plan, "TEMP B-TREE") {
		t.Errorf("VisibleFiles: plan %q does not walk visibility_file in order", plan)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := sqlite.Open(t.Context(), sqlite.Options{}); !errors.Is(err, index.ErrInvalid) {
		t.Errorf("Open without path: %v, want ErrInvalid", err)
	}
	if _, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "no", "such", "dir", "x.db")}); err == nil {
		t.Errorf("Open in a missing directory succeeded")
	}
}

func benchOpen(b *testing.B) *sqlite.DB {
	db, err := sqlite.Open(b.Context(), sqlite.Options{Path: filepath.Join(b.TempDir(), "index.db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func BenchmarkRegister(b *testing.B) {
	for _, w := range []int{1, 64} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) { indextest.BenchRegister(b, benchOpen(b), w) })
	}
}

func BenchmarkFileLarge(b *testing.B) { indextest.BenchFileLarge(b, benchOpen(b)) }

func BenchmarkLayouts(b *testing.B) {
	for _, n := range []int{2, 64} {
		b.Run(fmt.Sprintf("xorbs=%d", n), func(b *testing.B) { indextest.BenchLayouts(b, benchOpen(b), n) })
		b.Run(fmt.Sprintf("xorbs=%d/cache", n), func(b *testing.B) {
			c, err := index.NewLayoutCache(benchOpen(b), 256<<20)
			if err != nil {
				b.Fatal(err)
			}
			indextest.BenchLayouts(b, c, n)
		})
	}
}
