package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// backends lists the backends the API tests run on: SQLite + local disk always, and Postgres +
// MinIO when the test services are there (always in CI).
func backends(t testing.TB) []backend {
	return []backend{sqliteLocal(), postgresMinIO()}
}

// postgresMinIO opens a Postgres index in a fresh schema and a MinIO store in a fresh bucket.
func postgresMinIO() backend {
	return backend{name: "postgres+minio", open: func(t testing.TB) (index.Index, objstore.ObjectStore) {
		return openPostgresMinIO(t, "", "", postgres.Options{})
	}}
}

// openPostgresMinIO opens a Postgres index in a fresh schema and a MinIO store in a fresh
// bucket, reached at pgAddr and s3Addr when those are set (proxies in front of the services);
// o gives the index's options beside its DSN. Both are removed when the test ends.
func openPostgresMinIO(t testing.TB, pgAddr, s3Addr string, o postgres.Options) (index.Index, objstore.ObjectStore) {
	dsn := testenv.Require(t, testenv.PostgresDSN)
	s3 := testenv.RequireS3(t)
	var b [6]byte
	rand.Read(b[:])
	schema := "xet_origin_test_" + hex.EncodeToString(b[:])
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
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if pgAddr != "" {
		u.Host = pgAddr
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	o.DSN = u.String()
	db, err := postgres.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // runs before the schema is dropped
	endpoint := s3.Endpoint
	if s3Addr != "" {
		endpoint = s3Addr
	}
	bucket := "xet-origin-test-" + hex.EncodeToString(b[:])
	store, err := objstore.NewS3(ctx, objstore.S3Options{Endpoint: endpoint, Bucket: bucket,
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return db, store
}
