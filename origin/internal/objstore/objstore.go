// Package objstore stores the origin's immutable objects — xorbs and shards — by key, in a local
// directory (the embedded default) or in an S3-compatible bucket (MinIO in production).
//
// Keys are slash-separated paths such as "xorbs/default/<hash>" and "shards/<hash>" (XorbKey,
// ShardKey). Every implementation passes the conformance suite in objstoretest and so has the
// same contract:
//
//   - Put is atomic and durable: after a nil return the object survives a crash of the process
//     or the machine; on any error nothing new is visible under the key (an object that was
//     there before stays intact). A Put that reads fewer or more than size bytes fails with
//     ErrSize. Concurrent Puts of one key are allowed; one of them wins whole.
//   - Create is Put that never replaces: when the key holds an object, or a concurrent Create
//     or Put of the key commits first, it fails with ErrExists and the stored object stays as
//     it was. Of concurrent Creates of one key exactly one succeeds. This holds across
//     processes and machines sharing the store (link(2) on local disk, a conditional
//     "If-None-Match: *" PUT on S3), so the origin's xorbs are create-only.
//   - A missing object is ErrNotFound, a range outside the object is ErrRange, a key that is
//     not well formed is ErrKey, and a store that cannot be reached or cannot write (network
//     down, disk full, bad credentials) is ErrUnavailable, which callers answer with 503 and
//     Retry-After. A cancelled context surfaces as the context's error.
//   - Delete of a missing key succeeds.
//   - List visits every object under a prefix, with its size and modification time, without
//     holding the whole listing in memory (garbage collection's orphan pass).
//
// All implementations are safe for concurrent use.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Errors of every implementation, tested with errors.Is.
var (
	ErrNotFound    = errors.New("objstore: not found")
	ErrUnavailable = errors.New("objstore: unavailable") // → 503 Retry-After
	ErrSize        = errors.New("objstore: body length does not match size")
	ErrRange       = errors.New("objstore: range outside object")
	ErrKey         = errors.New("objstore: malformed key")
	// ErrExists: Create found an object under the key (it was left as it was).
	ErrExists = errors.New("objstore: object exists")
)

// ObjectStore is what the origin needs from its object store.
type ObjectStore interface {
	// Put stores exactly size bytes from r under key, durably and atomically: after a nil return
	// the object survives a crash; on error nothing is visible under key. An existing object is
	// replaced whole. r is read at most to size+1 bytes and is not closed.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Create is Put that fails with ErrExists, replacing nothing, when key already holds an
	// object or another writer commits one first; of concurrent Creates of key exactly one
	// succeeds. r is read at most to size+1 bytes (not at all once the key is known to
	// exist) and is not closed.
	Create(ctx context.Context, key string, r io.Reader, size int64) error
	// Get returns the whole object and its size. The caller closes the reader.
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// GetRange returns the n bytes of the object that start at off; off+n must not pass the end
	// of the object (ErrRange). The caller closes the reader.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Stat returns the size of the object.
	Stat(ctx context.Context, key string) (int64, error)
	// Delete removes the object; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// Ping reports whether the store can serve reads and writes now (for readiness checks).
	Ping(ctx context.Context) error
	// List calls fn for each object whose key starts with prefix (CheckPrefix), streaming the
	// listing page by page. The order is unspecified; an object created or deleted while the
	// listing runs may or may not be seen. fn may call the store (even Delete the object it was
	// given). An error from fn stops the listing and is returned as it is.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
}

// ObjectInfo is one object as List reports it.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time // when the object was last written (Put, Create)
	// ETag identifies this write of the object on S3 (the service's entity tag, without
	// quotes), so that a later request can be made conditional on the object being still the
	// one listed (MatchMover); empty on local disk.
	ETag string
}

// CheckPrefix reports whether prefix is a List prefix, returning an error wrapping ErrKey if not:
// empty (every object), or well-formed key segments (CheckKey) followed by a slash, such as
// "xorbs/default/".
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	dir, ok := strings.CutSuffix(prefix, "/")
	if !ok {
		return fmt.Errorf("%w: prefix %q does not end with a slash", ErrKey, prefix)
	}
	return CheckKey(dir)
}

// XorbKey is the key of the stored xorb h: "xorbs/default/<hash>".
func XorbKey(h hash.Hash) string { return "xorbs/default/" + h.String() }

// ShardKey is the key of the stored shard h: "shards/<hash>".
func ShardKey(h hash.Hash) string { return "shards/" + h.String() }

// MaxKeyLen bounds the length of a key in bytes.
const MaxKeyLen = 512

// CheckKey reports whether key is well formed, returning an error wrapping ErrKey if not.
// A key is 1 to MaxKeyLen bytes of slash-separated segments; each segment is non-empty, starts
// with a letter or digit and holds only letters, digits, '.', '_' and '-'. So no key is
// absolute, none climbs out with "..", and no segment can look like the store's own
// bookkeeping names (which start with '.' or '_').
func CheckKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: length %d", ErrKey, len(key))
	}
	segStart := true
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '/':
			if segStart {
				return fmt.Errorf("%w: empty segment in %q", ErrKey, key)
			}
			segStart = true
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == '-':
			if segStart {
				return fmt.Errorf("%w: segment starts with %q in %q", ErrKey, c, key)
			}
		default:
			return fmt.Errorf("%w: byte %#x in %q", ErrKey, c, key)
		}
		segStart = false
	}
	if segStart {
		return fmt.Errorf("%w: empty last segment in %q", ErrKey, key)
	}
	return nil
}

func checkRange(off, n int64) error {
	if off < 0 || n < 0 || off > (1<<62) || n > (1<<62) {
		return fmt.Errorf("%w: offset %d length %d", ErrRange, off, n)
	}
	return nil
}

// exactReader passes through exactly size bytes of r. It fails with ErrSize when r ends early,
// and — before handing out the last byte — when r has more than size bytes, so a consumer that
// stops after size bytes never commits a wrong-length body. It also stops at the first read
// after ctx is done. The first error is kept.
type exactReader struct {
	ctx        context.Context
	r          io.Reader
	remain     int64
	tailIsDone bool
	err        error
}

func newExactReader(ctx context.Context, r io.Reader, size int64) *exactReader {
	return &exactReader{ctx: ctx, r: r, remain: size}
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if err := e.ctx.Err(); err != nil {
		e.err = err
		return 0, err
	}
	if e.remain == 0 {
		if err := e.tail(); err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	if int64(len(p)) > e.remain {
		p = p[:e.remain]
	}
	n, err := e.r.Read(p)
	// A context cancelled while the bytes were being read must stop them here: with an unsigned
	// payload the transport may send the last bytes and finish the upload without reading again.
	if cerr := e.ctx.Err(); cerr != nil {
		e.err = cerr
		return 0, cerr
	}
	e.remain -= int64(n)
	switch {
	case e.remain == 0:
		// The last bytes are in p: make sure r has nothing more before passing them on.
		if err := e.tail(); err != nil {
			return 0, err
		}
		return n, nil
	case err == io.EOF:
		e.err = fmt.Errorf("%w: body ended %d bytes early", ErrSize, e.remain)
		return n, e.err
	case err != nil:
		e.err = err
		return n, err
	}
	return n, nil
}

// tail checks, once, that r has no byte beyond size.
func (e *exactReader) tail() error {
	if e.tailIsDone || e.err != nil {
		return e.err
	}
	e.tailIsDone = true
	var one [1]byte
	m, err := io.ReadFull(e.r, one[:])
	switch {
	case m > 0:
		e.err = fmt.Errorf("%w: body longer than declared", ErrSize)
	case err != io.EOF:
		e.err = err
	}
	return e.err
}

// done reports nil once exactly size bytes were read and r was found to end there; otherwise
// the reader's first error, or ErrSize if it was not read to the end. It reads the tail itself
// when the consumer stopped right at size bytes, so call it before committing the object.
func (e *exactReader) done() error {
	if e.err != nil {
		return e.err
	}
	if e.remain != 0 {
		return fmt.Errorf("%w: %d bytes not read", ErrSize, e.remain)
	}
	return e.tail()
}
