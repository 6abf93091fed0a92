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
	// VisibleFiles returns up to limit visibility rows after the key after, in (scope, file) order
	// (scopes compared bytewise), each with its file's stored record (recon.FileRecord's
	// encoding). Pass the last key returned to get the next page; the zero key starts at the
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
	// none of whose DeadFiles is visible: its xorb row, its condemnation and the records of
	// its DeadFiles, and records it as swept (object deletion pending: PutXorb of it fails
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

// VisibleKey is a position in the (scope, file) order of Visible.
type VisibleKey struct {
	Scope string
	File  hash.Hash
}

// VisibleFile is one visibility row and its file's stored record.
type VisibleFile struct {
	VisibleKey
	Record []byte
}
