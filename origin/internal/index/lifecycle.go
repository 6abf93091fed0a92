package index

import (
	"context"
	"errors"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Lifecycle is part of Index: deleting files and scopes, and the paged scans that usage
// accounting (and garbage collection) read the index with. See docs/decisions.md, "Data
// lifecycle".
//
// Reachability model: a file record is live while at least one (scope, file) visibility row
// names it; a xorb is live while a live file record's terms reference it. A later layer that
// keeps files alive by other means (repository commits, retained history) adds its roots to
// the same walk rather than changing this one: whatever walks Visible also walks its roots.
type Lifecycle interface {
	// Delete removes the visibility of files in scope (every file of the scope when files is
	// empty; then also the scope's possession rows) and appends one Event, in one
	// transaction, like Hide. It returns how many (scope, file) rows it removed. When none of
	// the files (or no file of the scope) was visible, it records nothing and returns an
	// error wrapping ErrNotFound.
	Delete(ctx context.Context, scope string, files []hash.Hash) (int, error)
	// VisibleFiles returns up to limit visibility rows after the key after, in (file, scope) order
	// (scopes compared bytewise; the order of Postgres's primary key, docs/decisions.md,
	// "Visibility keyed by (file, scope)"), each with its file's stored record
	// (recon.FileRecord's encoding). Pass the last key returned to get the next page; the zero key starts at the
	// beginning. A limit <= 0 or above MaxVisiblePage means MaxVisiblePage.
	VisibleFiles(ctx context.Context, after VisibleKey, limit int) ([]VisibleFile, error)

	// Garbage collection (origin/internal/lifecycle.GC drives these; docs/decisions.md, "Data
	// lifecycle", has the protocol and why it never loses a live byte).

	// Files returns up to limit file records with hash > after, in hash order, each with
	// whether any scope sees it. A limit <= 0 or above MaxScanPage means MaxScanPage.
	Files(ctx context.Context, after hash.Hash, limit int) ([]FileEntry, error)
	// Xorbs returns up to limit indexed xorbs with hash > after, in hash order, with their
	// stored size and, when condemned, since when. Limits as Files.
	Xorbs(ctx context.Context, after hash.Hash, limit int) ([]XorbEntry, error)
	// Condemn marks the indexed xorbs of xs that are not condemned yet as condemned since at.
	// From then on DedupXorbs leaves them out; a registration referencing one revives it.
	Condemn(ctx context.Context, xs []hash.Hash, at time.Time) error
	// Revive removes the condemnation of xs (a no-op for those not condemned).
	Revive(ctx context.Context, xs []hash.Hash) error
	// Sweep removes from the index, in one transaction serialised with every registration
	// and PutXorb, each candidate that is still condemned since before condemnedBefore and
	// none of whose DeadFiles is visible: its xorb row, its condemnation, the possession rows
	// naming it (every scope's) and the records of its DeadFiles, and records it as swept (object deletion pending: PutXorb of it fails
	// with ErrUnavailable until ObjectsDeleted). It returns the xorbs swept.
	Sweep(ctx context.Context, cands []SweepCandidate, condemnedBefore time.Time) ([]hash.Hash, error)
	// Swept returns up to limit swept xorbs whose objects may still exist, in hash order.
	Swept(ctx context.Context, limit int) ([]hash.Hash, error)
	// ObjectsDeleted records that the objects of the swept xorbs xs are gone: PutXorb may
	// store them again.
	ObjectsDeleted(ctx context.Context, xs []hash.Hash) error
	// LockCollector takes the collector's lock, one holder across every process using this
	// index (Postgres: a session advisory lock; SQLite: a lock file beside the database), or
	// fails at once with an error wrapping ErrCollectorBusy. The caller calls release once.
	LockCollector(ctx context.Context) (release func(), err error)
	ShardLifecycle
}

// ErrCollectorBusy: another garbage collection holds the collector's lock.
var ErrCollectorBusy = errors.New("index: another garbage collection is running")

// SweepScope is the scope of the events Sweep appends. A sweep event names no file, so an edge
// that only knows visibility events drops nothing that matters (scope "(gc)", every file).
const SweepScope = "(gc)"

// MaxScanPage is the most rows one Files or Xorbs call returns.
const MaxScanPage = 1000

// MaxSweep is the most candidates one Sweep call takes.
const MaxSweep = 500

// FileEntry is one file record and whether any scope sees it.
type FileEntry struct {
	Hash    hash.Hash
	Record  []byte // recon.FileRecord's encoding
	Visible bool
}

// XorbEntry is one indexed xorb.
type XorbEntry struct {
	Hash       hash.Hash
	StoredSize uint64
	Condemned  time.Time // zero: not condemned
}

// SweepCandidate is a condemned xorb and the file records (not visible when the collector
// looked) that reference it.
type SweepCandidate struct {
	Xorb      hash.Hash
	DeadFiles []hash.Hash
}

// ErrXorbGone is wrapped (with ErrNotFound) by RegisterShard when a file references a xorb
// that garbage collection removed after the shard was checked: the client must upload it again.
var ErrXorbGone = errors.New("index: xorb was garbage-collected")

// MaxVisiblePage is the most rows one Visible call returns.
const MaxVisiblePage = 1000

// VisibleKey is a position in the (file, scope) order of VisibleFiles.
type VisibleKey struct {
	Scope string
	File  hash.Hash
}

// VisibleFile is one visibility row and its file's stored record.
type VisibleFile struct {
	VisibleKey
	Record []byte
}

// ShardLifecycle is part of Lifecycle: collecting dead shard rows (docs/decisions.md, "Dead
// shards"). A shard row is only reached through the dedup entries naming it; its files' records
// and visibility are rows of their own. A shard is dead when none of its files is visible (nor a
// root), it was registered before the grace period, and its entries answer nothing: no dedup
// entry names it any more (newer registrations took them over), or every xorb it offers is
// condemned or gone. Collecting it removes its row, the dedup entries naming it
// (SQLite: index dedup_shard; Postgres: probes of its recorded chunks) and the records of its files no scope sees; its object, when its body is
// not inline, is then deleted by the collector. The same condemn → grace → sweep discipline as
// for xorbs: a shard is swept only when it was condemned before the grace period began.
type ShardLifecycle interface {
	// Shards returns up to limit shard rows with hash > after, in hash order. Limits as Files.
	Shards(ctx context.Context, after hash.Hash, limit int) ([]ShardEntry, error)
	// CondemnShards marks the shards of condemn not condemned yet as condemned since at, and
	// removes the condemnation of those of revive, in one transaction.
	CondemnShards(ctx context.Context, condemn, revive []hash.Hash, at time.Time) error
	// SweepShards removes, in one transaction serialised with every registration, each
	// candidate still condemned since before condemnedBefore none of whose Files is visible:
	// its shard row, its condemnation, the dedup entries naming it and the records of its Files
	// (none visible). It returns the shards swept. At most MaxSweep candidates.
	SweepShards(ctx context.Context, cands []ShardCandidate, condemnedBefore time.Time) ([]hash.Hash, error)
}

// ShardEntry is one shard row.
type ShardEntry struct {
	Hash  hash.Hash
	Xorbs []hash.Hash // what its dedup entries offer (Registration.Xorbs)
	// Files are its files, sorted; nil with FilesKnown false for a shard registered before the
	// index recorded them (its body has them).
	Files      []hash.Hash
	FilesKnown bool
	Named      bool      // a dedup entry names it
	Registered time.Time // first registration
	Inline     bool      // its body is in the row (else in the object store, under its key)
	Condemned  time.Time // zero: not condemned
}

// ShardCandidate is a condemned shard and its files (from its body).
type ShardCandidate struct {
	Shard hash.Hash
	Files []hash.Hash
}
