package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// S3Options configure an S3 store. Endpoint, Bucket, AccessKey and SecretKey are required.
type S3Options struct {
	Endpoint  string // host:port of MinIO or another S3-compatible service
	Bucket    string // created at open when missing
	Region    string // optional
	UseTLS    bool   // HTTPS instead of plain HTTP
	AccessKey string
	SecretKey string
	// MaxRetries bounds the attempts of one request that fails with a retryable error (network,
	// 5xx); 0 means 3. A Put body is never replayed, so Puts are attempted once.
	MaxRetries int
	// Transport replaces the default HTTP transport (tests, custom TLS); nil uses minio-go's.
	Transport http.RoundTripper
}

// Validate reports every problem of o at once.
func (o *S3Options) Validate() error {
	var errs []error
	if o.Endpoint == "" {
		errs = append(errs, errors.New("objstore: s3 endpoint is empty"))
	} else if strings.Contains(o.Endpoint, "/") {
		errs = append(errs, fmt.Errorf("objstore: s3 endpoint %q must be host:port, without scheme or path", o.Endpoint))
	}
	if o.Bucket == "" {
		errs = append(errs, errors.New("objstore: s3 bucket is empty"))
	} else if err := s3utils.CheckValidBucketNameStrict(o.Bucket); err != nil {
		errs = append(errs, fmt.Errorf("objstore: s3 bucket %q: %w", o.Bucket, err))
	}
	if o.AccessKey == "" || o.SecretKey == "" {
		errs = append(errs, errors.New("objstore: s3 access key and secret key are required"))
	}
	if o.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("objstore: s3 max retries %d is negative", o.MaxRetries))
	}
	return errors.Join(errs...)
}

// S3 is an ObjectStore in one bucket of an S3-compatible service, through minio-go. Each key is
// the object name unchanged. S3 gives the Put contract by itself: an object becomes visible
// only when its PUT completes, whole, and the service acknowledges it only once stored (MinIO
// with its default fsync settings). Put sends one PUT request with a known Content-Length,
// streaming the body without buffering it; the body itself is not signed (see write).
type S3 struct {
	core   minio.Core
	bucket string
}

var _ ObjectStore = (*S3)(nil)

// singlePutMax is the largest object sent as one PUT (the S3 limit); larger ones go multipart.
const singlePutMax = 5 << 30

// NewS3 connects to the service and creates the bucket if it does not exist. An unreachable
// service is ErrUnavailable.
func NewS3(ctx context.Context, o S3Options) (*S3, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	retries := o.MaxRetries
	if retries == 0 {
		retries = 3
	}
	transport := o.Transport
	if transport == nil {
		t, err := minio.DefaultTransport(o.UseTLS)
		if err != nil {
			return nil, fmt.Errorf("objstore: s3 transport: %w", err)
		}
		transport = t
	}
	c, err := minio.New(o.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""),
		Secure:     o.UseTLS,
		Region:     o.Region,
		Transport:  ifMatchTransport{transport},
		MaxRetries: retries,
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: s3 client for %s: %w", o.Endpoint, err)
	}
	s := &S3{core: minio.Core{Client: c}, bucket: o.Bucket}
	exists, err := c.BucketExists(ctx, o.Bucket)
	if err != nil {
		return nil, s3Err("open bucket", o.Bucket, err)
	}
	if !exists {
		err := c.MakeBucket(ctx, o.Bucket, minio.MakeBucketOptions{Region: o.Region})
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			err = nil // created concurrently by another replica
		}
		if err != nil {
			return nil, s3Err("create bucket", o.Bucket, err)
		}
	}
	return s, nil
}

// Bucket returns the bucket the store uses.
func (s *S3) Bucket() string { return s.bucket }

// Put implements ObjectStore.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "put", key, r, size)
}

// Create implements ObjectStore with a conditional PUT ("If-None-Match: *"): the service
// refuses it with 412 Precondition Failed when the key holds an object, and of concurrent
// conditional PUTs of one key it commits one. Only a single PUT carries the condition, so
// Create takes objects of up to 5 GiB (xorbs are at most 64 MiB).
func (s *S3) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	if size > singlePutMax {
		return fmt.Errorf("create %s: %d bytes is more than one conditional PUT takes (%d)", key, size, int64(singlePutMax))
	}
	return s.write(ctx, "create", key, r, size)
}

// write is Put (op "put") and Create (op "create": the PUT is conditional on no object).
func (s *S3) write(ctx context.Context, op, key string, r io.Reader, size int64) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%s %s: %w: negative size %d", op, key, ErrSize, size)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	src := newExactReader(ctx, r, size)
	if size == 0 { // nothing will be read: find a non-empty body before the empty object is stored
		if err := src.done(); err != nil {
			return fmt.Errorf("%s %s: %w", op, key, err)
		}
	}
	opts := minio.PutObjectOptions{
		DisableMultipart: size <= singlePutMax,
		ContentType:      "application/octet-stream",
		// Signing the payload would hash every xorb with SHA-256 once more (a third of the
		// origin's ingest CPU on MinIO, perf/BENCHMARKS.md). The bytes were validated already.
		// No other checksum goes with them either: minio-go adds its CRC32C trailer only for a
		// client opened with TrailingHeaders (not set here) and Content-MD5 only when asked, so
		// the request body is copied once, by net/http, into the connection.
		DisableContentSha256: true,
	}
	if op == "create" {
		opts.SetMatchETagExcept("*") // If-None-Match: *
	}
	body := &guardedReader{r: src}
	_, err := s.core.Client.PutObject(ctx, s.bucket, key, body, size, opts)
	// The HTTP transport may still hold the body after PutObject returns: cut it off from r
	// before handing r back to the caller.
	body.close()
	if op == "create" && err != nil && minio.ToErrorResponse(err).Code == minio.PreconditionFailed {
		// The service may refuse before reading the body, so src's state says nothing here.
		return fmt.Errorf("%s %s: %w", op, key, ErrExists)
	}
	if serr := src.err; serr != nil { // the body's fault or the caller's ctx: the PUT was aborted
		return fmt.Errorf("%s %s: %w", op, key, serr)
	}
	if err != nil {
		return s3Err(op, key, err)
	}
	// A PUT acknowledged without reading the whole body cannot happen with a Content-Length,
	// but a wrong-length body must never pass silently.
	if err := src.done(); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	return nil
}

// Get implements ObjectStore.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	if err := CheckKey(key); err != nil {
		return nil, 0, err
	}
	body, info, _, err := s.core.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, s3Err("get", key, err)
	}
	if info.Size < 0 {
		body.Close()
		return nil, 0, fmt.Errorf("get %s: %w: response without Content-Length", key, ErrUnavailable)
	}
	return body, info.Size, nil
}

// GetRange implements ObjectStore.
func (s *S3) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := checkRange(off, n); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if n == 0 { // HTTP cannot ask for zero bytes: check that the object and the offset exist
		size, err := s.Stat(ctx, key)
		if err != nil {
			return nil, err
		}
		if off > size {
			return nil, fmt.Errorf("get %s: %w: offset %d of %d bytes", key, ErrRange, off, size)
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+n-1); err != nil {
		return nil, fmt.Errorf("get %s: %w: %w", key, ErrRange, err)
	}
	body, info, hdr, err := s.core.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, s3Err("get", key, err)
	}
	// A range that runs past the end is answered with what exists; the contract refuses it.
	if info.Size != n {
		body.Close()
		return nil, fmt.Errorf("get %s: %w: [%d, %d) answered with %d bytes (%s)",
			key, ErrRange, off, off+n, info.Size, hdr.Get("Content-Range"))
	}
	return body, nil
}

// Stat implements ObjectStore.
func (s *S3) Stat(ctx context.Context, key string) (int64, error) {
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	info, err := s.core.Client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return 0, s3Err("stat", key, err)
	}
	return info.Size, nil
}

// Delete implements ObjectStore.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := s.core.Client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if errors.Is(s3Err("delete", key, err), ErrNotFound) {
			return nil
		}
		return s3Err("delete", key, err)
	}
	return nil
}

// Ping implements ObjectStore: the bucket must exist and answer.
func (s *S3) Ping(ctx context.Context) error {
	ok, err := s.core.Client.BucketExists(ctx, s.bucket)
	if err != nil {
		return s3Err("ping", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("ping: %w: bucket %s does not exist", ErrUnavailable, s.bucket)
	}
	return nil
}

// List implements ObjectStore with ListObjectsV2 (pages of up to 1000 keys, fetched as the
// callback consumes them). Keys that are not well formed (not written by this package) are
// skipped.
func (s *S3) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := CheckPrefix(prefix); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine when fn ends the listing early
	for o := range s.core.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return s3Err("list", prefix, o.Err)
		}
		if CheckKey(o.Key) != nil {
			continue
		}
		if err := fn(ObjectInfo{Key: o.Key, Size: o.Size, ModTime: o.LastModified, ETag: strings.Trim(o.ETag, `"`)}); err != nil {
			return err
		}
	}
	return nil
}

// s3Err translates a minio-go error: NoSuchKey → ErrNotFound, InvalidRange → ErrRange; the
// service or the network failing, throttling or refusing our credentials → ErrUnavailable; a
// cancelled or expired ctx is returned as such.
func s3Err(op, key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey", "NoSuchObject", "NoSuchVersion":
		return fmt.Errorf("%s %s: %w", op, key, ErrNotFound)
	case "InvalidRange":
		return fmt.Errorf("%s %s: %w", op, key, ErrRange)
	case "NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
		"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed",
		"XMinioServerNotInitialized", "XMinioStorageFull", "XMinioReadQuorum", "XMinioWriteQuorum":
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrUnavailable, err)
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrUnavailable, err)
	}
	if resp.StatusCode == http.StatusNotFound { // HEAD answers carry no error code
		return fmt.Errorf("%s %s: %w", op, key, ErrNotFound)
	}
	if resp.Code == "" && isNetErr(err) {
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrUnavailable, err)
	}
	if resp.Code != "" {
		return fmt.Errorf("%s %s: s3 %s (HTTP %s): %w", op, key, resp.Code, strconv.Itoa(resp.StatusCode), err)
	}
	return fmt.Errorf("%s %s: %w", op, key, err)
}

func isNetErr(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// guardedReader lets close cut a reader off: after close returns, no Read reaches r, even from
// a goroutine of the HTTP transport that still holds the request body.
type guardedReader struct {
	mu     sync.Mutex
	r      io.Reader
	closed bool
}

var errBodyClosed = errors.New("objstore: request body used after the request ended")

func (g *guardedReader) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, errBodyClosed
	}
	return g.r.Read(p)
}

func (g *guardedReader) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// ifMatchKey is the context key of the ETag a DELETE is conditional on (ifMatchTransport).
type ifMatchKey struct{}

// ifMatchTransport sends "If-Match: <etag>" with a DELETE whose context carries an ETag under
// ifMatchKey: minio-go's RemoveObject takes no header of the caller's. The header is added
// after signing, so it is not among the signed ones, which Signature V4 allows for it. A
// service without conditional deletes ignores it (MinIO does: S3.MoveMatch).
type ifMatchTransport struct{ next http.RoundTripper }

func (t ifMatchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if etag, ok := r.Context().Value(ifMatchKey{}).(string); ok && etag != "" && r.Method == http.MethodDelete {
		r = r.Clone(r.Context())
		r.Header.Set("If-Match", `"`+etag+`"`)
	}
	return t.next.RoundTrip(r)
}
