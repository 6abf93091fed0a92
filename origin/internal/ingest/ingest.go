// Package ingest accepts uploads at the origin: xorbs (validated in one pass, stored with a v1
// footer, then indexed) and shards (parsed, checked against the stored xorb layouts, then
// registered in one index transaction that also holds the shard body unless it is large).
//
// Ordering is the durability contract (docs/architecture.md §5): object bytes are durable in the
// object store before the index commit, and the index commit is durable before a method
// returns nil.
//
// A xorb object is created once and not replaced (but by the bytes its index row describes,
// after a collection raced the upload: lifecycle.go), and the layout indexed for it is always
// derived from the bytes that are stored: one xorb hash has many valid encodings (the hash
// covers the chunks, not their compression), so an upload that finds the key taken indexes
// the stored object's layout, not its own (Service.PutXorb). A shard body kept inline in its registration is durable with that commit. Nothing is written under a key before validation succeeds (a streamed upload,
// PutXorbStream, writes only a temporary file, removed when it fails, on the local disk, and
// holds the object in memory until it validated on S3), so a rejected upload leaves nothing
// behind.
package ingest

import (
	"context"
	"errors"
	"io"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Errors returned by the Service wrap one of these sentinels (besides the format packages'
// sentinels and the index's and object store's).
var (
	// ErrBadPrefix: the upload names a prefix other than "default".
	ErrBadPrefix = errors.New("ingest: unknown prefix")
	// ErrMissingXorb: a shard references or lists a xorb the origin does not have.
	ErrMissingXorb = errors.New("ingest: shard references a missing xorb")
	// ErrRejected: a shard's claims disagree with the stored xorbs (chunk ranges, sizes,
	// verification hashes, file hash, xorb blocks) or it lacks verification entries.
	ErrRejected = errors.New("ingest: shard rejected")
	// ErrStoredCorrupt: the object stored under a xorb's key, which no index row describes
	// yet, is not a valid object of that xorb. Storage damage: the origin does not replace it
	// (docs/origin.md, "Xorb objects are create-only"); the upload fails with 500.
	ErrStoredCorrupt = errors.New("ingest: stored xorb object is corrupt")
)

// Prefix is the only xorb prefix the origin knows.
const Prefix = "default"

// XorbKey and ShardKey are the object store keys of xorbs and shards.
func XorbKey(h hash.Hash) string  { return "xorbs/" + Prefix + "/" + h.String() }
func ShardKey(h hash.Hash) string { return "shards/" + h.String() }

// Objects is the part of the object store ingest writes to (objstore.ObjectStore's contract).
type Objects interface {
	// Put stores exactly size bytes from r under key, durably and atomically (shards).
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Create is Put that never replaces: when key holds an object, or another writer (of any
	// process sharing the store) commits one first, it fails with objstore.ErrExists and the
	// stored object stays (xorbs).
	Create(ctx context.Context, key string, r io.Reader, size int64) error
	// Get returns the whole object and its size. The caller closes the reader.
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// GetRange returns the n bytes of key from offset off. The caller closes the reader
	// (possession proofs read stored chunks).
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Stat returns the size of the object under key, or objstore.ErrNotFound (lifecycle.go).
	Stat(ctx context.Context, key string) (int64, error)
}

// Index is the part of the index ingest uses.
type Index interface {
	PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error)
	XorbSize(ctx context.Context, xorb hash.Hash) (uint64, error)
	Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error)
	RegisterShard(ctx context.Context, r *index.Registration) (bool, error)
	DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error)
	RecordPossession(ctx context.Context, scope string, xorb hash.Hash) error
	Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error)
}

var _ Index = index.Index(nil)
