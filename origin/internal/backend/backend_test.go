package backend_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/backend"
	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/origin/internal/objstore/objstoretest"
)

// sqliteLocal is the embedded configuration in a fresh directory.
func sqliteLocal(tb testing.TB) *config.Config {
	c := config.Default()
	c.DataDir = tb.TempDir()
	c.Index.SQLitePath = filepath.Join(c.DataDir, "index.db")
	c.Objects.Dir = filepath.Join(c.DataDir, "objects")
	return &c
}

// postgresMinIO is the production configuration on a fresh Postgres schema and a fresh MinIO
// bucket, both removed when the test ends.
func postgresMinIO(tb testing.TB) *config.Config {
	dsn := testenv.Require(tb, testenv.PostgresDSN)
	s3 := testenv.RequireS3(tb)
	var b [6]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	schema := "xet_backend_test_" + suffix
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	bucket := "xet-backend-test-" + suffix
	tb.Cleanup(func() { // after the backends' own Close (cleanups run last-first)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, dsn); err != nil {
			tb.Errorf("drop schema: %v", err)
		} else {
			defer c.Close(ctx)
			if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
				tb.Errorf("drop schema: %v", err)
			}
		}
		mc, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
		if err != nil {
			tb.Errorf("cleanup client: %v", err)
			return
		}
		if ok, _ := mc.BucketExists(ctx, bucket); ok {
			if err := mc.RemoveBucketWithOptions(ctx, bucket, minio.RemoveBucketOptions{ForceDelete: true}); err != nil {
				tb.Errorf("cleanup bucket %s: %v", bucket, err)
			}
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	c := config.Default()
	c.DataDir = tb.TempDir()
	c.Index.Driver, c.Index.PostgresDSN = config.IndexPostgres, u.String()
	c.Objects.Driver, c.Objects.Endpoint, c.Objects.Bucket = config.ObjectsS3, s3.Endpoint, bucket
	c.Objects.AccessKey, c.Objects.SecretKey = s3.AccessKey, s3.SecretKey
	return &c
}

// open runs backend.Open on c, as the origin does, and closes the backends when the test ends.
func open(tb testing.TB, c *config.Config) *backend.Backends {
	tb.Helper()
	b, err := backend.Open(context.Background(), c, prometheus.NewRegistry())
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

var configs = []struct {
	name string
	cfg  func(testing.TB) *config.Config
}{{"sqlite+local", sqliteLocal}, {"postgres+minio", postgresMinIO}}

// TestConformanceStack runs both conformance suites over the whole stack backend.Open builds
// (metrics, timeouts, caches, implementation) in each configuration.
func TestConformanceStack(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			t.Run("index", func(t *testing.T) {
				indextest.Run(t, func(t *testing.T) index.Index { return open(t, c.cfg(t)).Index })
			})
			t.Run("objects", func(t *testing.T) {
				objstoretest.Run(t, func(tb testing.TB) objstore.ObjectStore { return open(tb, c.cfg(tb)).Objects })
			})
		})
	}
}

// unwrapper is what every decorator offers for inspection.
type unwrapper[T any] interface{ Unwrap() T }

// chain lists the types from x down to the implementation.
func chain[T any](x T) []string {
	var out []string
	for {
		out = append(out, reflect.TypeOf(x).String())
		u, ok := any(x).(unwrapper[T])
		if !ok {
			return out
		}
		x = u.Unwrap()
	}
}

// TestOpenStack checks the order and settings of the layers Open builds: metrics outermost,
// then the configured timeout, then the caches (when configured), then the implementation.
func TestOpenStack(t *testing.T) {
	c := sqliteLocal(t)
	c.Limits.DependencyTimeout = config.Duration(3 * time.Second)
	b := open(t, c)
	if got, want := chain(b.Index), []string{"*index.Metrics", "*index.Timeouts", "*index.FileCache",
		"*index.LayoutCache", "*sqlite.DB"}; !reflect.DeepEqual(got, want) {
		t.Errorf("index stack %v, want %v", got, want)
	}
	if got, want := chain(b.Objects), []string{"*objstore.Metrics", "*objstore.Timeouts", "*objstore.Local"}; !reflect.DeepEqual(got, want) {
		t.Errorf("object store stack %v, want %v", got, want)
	}
	if d := b.Index.(*index.Metrics).Unwrap().(*index.Timeouts).Timeout(); d != 3*time.Second {
		t.Errorf("index timeout %v, want the configured 3s", d)
	}
	if d := b.Objects.(*objstore.Metrics).Unwrap().(*objstore.Timeouts).Timeout(); d != 3*time.Second {
		t.Errorf("object store timeout %v, want the configured 3s", d)
	}

	// A local file's body keeps its io.WriterTo (the transfers' sendfile path) through the
	// whole stack.
	ctx := context.Background()
	data := []byte("0123456789")
	if err := b.Objects.Put(ctx, "xorbs/default/k", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	rc, err := b.Objects.GetRange(ctx, "xorbs/default/k", 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, ok := rc.(io.WriterTo); !ok {
		t.Fatalf("%T lost the local file's io.WriterTo", rc)
	}
	var got bytes.Buffer
	if _, err := io.Copy(&got, rc); err != nil || got.String() != "23456" {
		t.Fatalf("copy: %q, %v", got.String(), err)
	}

	// Without caches the timeout wraps the implementation directly.
	c = sqliteLocal(t)
	c.Index.LayoutCache = 0
	if got, want := chain(open(t, c).Index), []string{"*index.Metrics", "*index.Timeouts", "*sqlite.DB"}; !reflect.DeepEqual(got, want) {
		t.Errorf("uncached index stack %v, want %v", got, want)
	}
}

// TestOpenMetrics checks that calls through the opened stack reach the registry under the
// documented names.
func TestOpenMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, err := backend.Open(context.Background(), sqliteLocal(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.Index.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Objects.Put(ctx, "shards/x", strings.NewReader("abc"), 3); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		seen[mf.GetName()] = true
	}
	for _, name := range []string{"xet_origin_index_call_seconds", "xet_origin_objstore_call_seconds", "xet_origin_objstore_bytes_total"} {
		if !seen[name] {
			t.Errorf("%s not registered after calls (have %v)", name, seen)
		}
	}
}
