package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/origin/internal/objstore/objstoretest"
)

// newS3 opens a store on a new, uniquely named bucket of the test MinIO, removed again (with
// its objects) when the test ends.
func newS3(tb testing.TB) objstore.ObjectStore {
	env := testenv.RequireS3(tb)
	var suffix [8]byte
	rand.Read(suffix[:])
	bucket := "xet-test-" + hex.EncodeToString(suffix[:])
	ctx := context.Background()
	s, err := objstore.NewS3(ctx, objstore.S3Options{
		Endpoint: env.Endpoint, AccessKey: env.AccessKey, SecretKey: env.SecretKey, Bucket: bucket,
	})
	if err != nil {
		tb.Fatalf("NewS3: %v", err)
	}
	tb.Cleanup(func() { removeBucket(tb, env, bucket) })
	return s
}

// removeBucket deletes the bucket and everything in it, through a client of its own.
func removeBucket(tb testing.TB, env testenv.S3, bucket string) {
	c, err := minio.New(env.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(env.AccessKey, env.SecretKey, "")})
	if err != nil {
		tb.Errorf("cleanup client: %v", err)
		return
	}
	// Force-delete: listing cannot be trusted to show an object "a" beside a prefix "a/".
	if err := c.RemoveBucketWithOptions(context.Background(), bucket, minio.RemoveBucketOptions{ForceDelete: true}); err != nil {
		tb.Errorf("cleanup bucket %s: %v", bucket, err)
	}
}

func TestS3(t *testing.T) { objstoretest.Run(t, newS3) }

func BenchmarkS3(b *testing.B) { objstoretest.Bench(b, newS3) }

// Opening the same bucket twice (two origin replicas) works; the second finds it.
func TestS3ExistingBucket(t *testing.T) {
	s := newS3(t).(*objstore.S3)
	env := testenv.RequireS3(t)
	s2, err := objstore.NewS3(context.Background(), objstore.S3Options{
		Endpoint: env.Endpoint, AccessKey: env.AccessKey, SecretKey: env.SecretKey, Bucket: s.Bucket(),
	})
	if err != nil {
		t.Fatalf("second NewS3 on %s: %v", s.Bucket(), err)
	}
	if err := s.Put(context.Background(), "shards/x", bytes.NewReader([]byte("abc")), 3); err != nil {
		t.Fatal(err)
	}
	if size, err := s2.Stat(context.Background(), "shards/x"); err != nil || size != 3 {
		t.Fatalf("Stat through the second store = %d, %v", size, err)
	}
}

func TestS3BadCredentials(t *testing.T) {
	env := testenv.RequireS3(t)
	_, err := objstore.NewS3(context.Background(), objstore.S3Options{
		Endpoint: env.Endpoint, AccessKey: env.AccessKey, SecretKey: "wrong-" + env.SecretKey, Bucket: "xet-test-creds",
	})
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("NewS3 with a wrong secret: err = %v, want ErrUnavailable", err)
	}
}

// A service that cannot be reached is ErrUnavailable (→ 503), at open and on every call.
func TestS3Unreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	opts := objstore.S3Options{Endpoint: addr, AccessKey: "a", SecretKey: "secret-key", Bucket: "xet-test-unreachable", MaxRetries: 1}
	if _, err := objstore.NewS3(context.Background(), opts); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("NewS3: err = %v, want ErrUnavailable", err)
	}
}

func TestS3OptionsValidate(t *testing.T) {
	err := (&objstore.S3Options{Endpoint: "http://host:9000/x", MaxRetries: -1}).Validate()
	if err := (&objstore.S3Options{Endpoint: "h:1", Bucket: "Bad_Bucket", AccessKey: "a", SecretKey: "s"}).Validate(); err == nil {
		t.Error("Validate accepted bucket name Bad_Bucket")
	}
	if err == nil {
		t.Fatal("Validate accepted bad options")
	}
	// Every problem is reported at once.
	for _, want := range []string{"endpoint", "bucket", "secret key", "retries"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("Validate error %q does not mention %q", err, want)
		}
	}
	ok := objstore.S3Options{Endpoint: "127.0.0.1:9000", Bucket: "xet-objects", AccessKey: "a", SecretKey: "s"}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(good options) = %v", err)
	}
}

// proxy forwards TCP connections to an upstream address until stopped; stopping it is the
// service going down, as the client sees it.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, upstream string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(u, c); u.Close() })
			p.wg.Go(func() { io.Copy(c, u); c.Close() })
		}
	})
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// MinIO going away after the store is open: every call reports ErrUnavailable (→ 503).
func TestS3Down(t *testing.T) {
	env := testenv.RequireS3(t)
	var suffix [8]byte
	rand.Read(suffix[:])
	bucket := "xet-test-down-" + hex.EncodeToString(suffix[:])
	t.Cleanup(func() { removeBucket(t, env, bucket) })
	p := startProxy(t, env.Endpoint)
	ctx := context.Background()
	s, err := objstore.NewS3(ctx, objstore.S3Options{
		Endpoint: p.ln.Addr().String(), AccessKey: env.AccessKey, SecretKey: env.SecretKey, Bucket: bucket, MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	key := "xorbs/default/before"
	if err := s.Put(ctx, key, bytes.NewReader([]byte("stored")), 6); err != nil {
		t.Fatal(err)
	}
	p.stop()

	checks := map[string]error{
		"Put":  s.Put(ctx, "xorbs/default/after", bytes.NewReader(make([]byte, 1000)), 1000),
		"Ping": s.Ping(ctx),
	}
	_, checks["Stat"] = s.Stat(ctx, key)
	_, _, checks["Get"] = s.Get(ctx, key)
	_, checks["GetRange"] = s.GetRange(ctx, key, 1, 2)
	checks["Delete"] = s.Delete(ctx, key)
	for op, err := range checks {
		if !errors.Is(err, objstore.ErrUnavailable) {
			t.Errorf("%s with MinIO down: err = %v, want ErrUnavailable", op, err)
		}
	}
}

// headerLog records the headers of the PUT requests sent through it.
type headerLog struct {
	mu   sync.Mutex
	puts []http.Header
	next http.RoundTripper
}

func (l *headerLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/xorbs/") { // not the bucket's
		l.mu.Lock()
		l.puts = append(l.puts, r.Header.Clone())
		l.mu.Unlock()
	}
	return l.next.RoundTrip(r)
}

// TestS3CreateSendsPlainBody: a Create is one PUT of the object as it is, with its length and no
// payload hash, checksum trailer or aws-chunked framing (each would cost another pass or copy
// of every xorb byte in the origin; the chunks were validated before, docs/decisions.md).
func TestS3CreateSendsPlainBody(t *testing.T) {
	env := testenv.RequireS3(t)
	var suffix [8]byte
	rand.Read(suffix[:])
	bucket := "xet-test-" + hex.EncodeToString(suffix[:])
	log := &headerLog{next: http.DefaultTransport.(*http.Transport).Clone()}
	s, err := objstore.NewS3(context.Background(), objstore.S3Options{
		Endpoint: env.Endpoint, AccessKey: env.AccessKey, SecretKey: env.SecretKey, Bucket: bucket, Transport: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeBucket(t, env, bucket) })
	body := make([]byte, 200<<10)
	rand.Read(body)
	if err := s.Create(context.Background(), "xorbs/default/x", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	if len(log.puts) != 1 {
		t.Fatalf("%d PUT requests; want one", len(log.puts))
	}
	h := log.puts[0]
	if got := h.Get("X-Amz-Content-Sha256"); got != "UNSIGNED-PAYLOAD" {
		t.Errorf("X-Amz-Content-Sha256 %q; want UNSIGNED-PAYLOAD", got)
	}
	for _, k := range []string{"X-Amz-Trailer", "Content-Md5", "Content-Encoding", "X-Amz-Decoded-Content-Length"} {
		if v := h.Get(k); v != "" {
			t.Errorf("%s: %q; want none", k, v)
		}
	}
	if h.Get("If-None-Match") != "*" {
		t.Errorf("If-None-Match %q; want *", h.Get("If-None-Match"))
	}
}
