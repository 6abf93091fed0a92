package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
)

// freshSchema creates an empty schema for t, dropped when t ends, and returns a DSN whose
// connections use it.
func freshSchema(t testing.TB) string {
	t.Helper()
	dsn := testenv.Require(t, testenv.PostgresDSN)
	var b [6]byte
	rand.Read(b[:])
	schema := "xet_test_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background() // t.Context() is canceled before cleanups run
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("connect to drop %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL: %q", testenv.PostgresDSN, dsn)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func open(t testing.TB) *postgres.DB {
	t.Helper()
	dsn := freshSchema(t)
	db, err := postgres.Open(t.Context(), postgres.Options{DSN: dsn})
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
