package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
)

func open(t testing.TB) *postgres.DB { return openConns(t, 0) }

func openConns(t testing.TB, maxConns int32) *postgres.DB {
	return openWith(t, postgres.Options{MaxConns: maxConns})
}

func openWith(t testing.TB, o postgres.Options) *postgres.DB {
	t.Helper()
	o.DSN = postgres.FreshSchema(t)
	db, err := postgres.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() }) // before the schema is dropped (cleanups run last-first)
	return db
}

func TestConformance(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index { return open(t) })
}

// TestQueryPlans fills the tables with enough rows (tens of thousands) for the planner to
// prefer an index to a sequential scan whenever one applies, and checks that no lookup scans.
func TestQueryPlans(t *testing.T) {
	db := open(t)
	plans, err := db.ExplainLookups(t.Context(), 20000)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) == 0 {
		t.Fatal("no query plans")
	}
	for q, plan := range plans {
		t.Logf("%s:\n%s", q, plan)
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index") {
			t.Errorf("%s: plan is not an index lookup:\n%s", q, plan)
		}
	}
}

// TestUnavailable needs no server: nothing listens on port 1 of loopback.
func TestUnavailable(t *testing.T) {
	_, err := postgres.Open(t.Context(), postgres.Options{DSN: "postgres://xet@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5"})
	if !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("Open of an unreachable server: %v, want ErrUnavailable", err)
	}
	if _, err := postgres.Open(t.Context(), postgres.Options{DSN: "postgres://xet@127.0.0.1:1/postgres?sslmode=bogus"}); !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("Open with a malformed DSN: %v, want ErrInvalid", err)
	}
}

func BenchmarkRegister(b *testing.B) {
	for _, c := range []struct {
		workers, registrars int
		conns               int32
	}{{1, 1, 2}, {64, 4, 12}, {64, 8, 16}, {64, 16, 24}} {
		b.Run(fmt.Sprintf("workers=%d/registrars=%d", c.workers, c.registrars), func(b *testing.B) {
			indextest.BenchRegister(b, openWith(b, postgres.Options{MaxConns: c.conns, Registrars: c.registrars}), c.workers)
		})
	}
}

func BenchmarkFileLarge(b *testing.B) { indextest.BenchFileLarge(b, open(b)) }

func BenchmarkLayouts(b *testing.B) {
	for _, n := range []int{2, 64} {
		b.Run(fmt.Sprintf("xorbs=%d", n), func(b *testing.B) { indextest.BenchLayouts(b, open(b), n) })
		b.Run(fmt.Sprintf("xorbs=%d/cache", n), func(b *testing.B) {
			c, err := index.NewLayoutCache(open(b), 256<<20)
			if err != nil {
				b.Fatal(err)
			}
			indextest.BenchLayouts(b, c, n)
		})
	}
}
