// Package ingest accepts uploads at the origin: xorbs (validated in one pass, stored with a v1
// footer, then indexed) and shards (parsed, checked against the stored xorb layouts, then
// registered in one index transaction that also holds the shard body unless it is large).
//
// Ordering is the durability contract (ARCHITECTURE.md §5): object bytes are durable in the
// object store before the index commit, and the index commit is durable before a method
// returns nil. A shard body kept inline in its registration is durable with that commit. Nothing is written before validation succeeds, so a rejected upload leaves
// nothing behind.
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
)

// Prefix is the only xorb prefix the origin knows.
const Prefix = "default"

// XorbKey and ShardKey are the object store keys of xorbs and shards.
func XorbKey(h hash.Hash) string  { return "xorbs/" + Prefix + "/" + h.String() }
func ShardKey(h hash.Hash) string { return "shards/" + h.String() }

// Objects is the part of the object store ingest writes to.
type Objects interface {
	// Put stores exactly size bytes from r under key, durably and atomically.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// GetRange returns the n bytes of key from offset off. The caller closes the reader.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
}

// Index is the part of the index ingest uses.
type Index interface {
	PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error)
	XorbSize(ctx context.Context, xorb hash.Hash) (uint64, error)
	Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error)
	RegisterShard(ctx context.Context, r *index.Registration) (bool, error)
	RecordPossession(ctx context.Context, scope string, xorb hash.Hash) error
	Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error)
}

var _ Index = index.Index(nil)
