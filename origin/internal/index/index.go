// Package index is the origin's metadata index: xorb layouts, file records, per-scope
// visibility, shard registrations, the global-dedup table and the log of visibility revocations
// that edges follow. Two implementations satisfy Index and pass one conformance suite
// (index/indextest): index/postgres for production and index/sqlite for the embedded single node.
// Decorators implement Index around an Index, every method explicitly (none embeds the index it
// wraps, so a method added to Index fails to compile until each decorator decides what to do
// with it; decorators_test.go checks this): LayoutCache and FileCache keep decoded xorb layouts
// and file records in memory, Timeouts bounds every call, Metrics counts and times them. The
// origin's stack is built in one place, origin/internal/backend.
//
// # Schema
//
// Every hash is stored as its 32 raw bytes (BLOB / bytea). Each file record and each xorb
// layout is ONE blob row, so that a file of 100,000 terms comes back in one round trip, and every
// lookup is a primary-key probe (no query scans a table).
//
//	schema_version  version PK
//
//	xorbs           hash PK ─── stored_size, layout blob          PutXorb, Layouts, XorbSize
//
//	files           hash PK ─── record blob                        first registration wins
//	                  ▲
//	visibility      (scope, file) PK (Postgres: (file, scope))     File(h, scope), Hide
//
//	shards          hash PK ─── scope, xorbs (n × 32 bytes, shard order),  ShardBody
//	                  ▲         body (the shard itself when kept inline; NULL = in the object store),
//	                  │         files (n × 32 bytes, sorted; NULL before it was recorded),
//	                  │         chunks (Postgres: its dedup entries' chunks, n × 32 bytes, sorted)
//	dedup           chunk PK ── shard                              DedupXorbs: chunk → shard → xorbs
//	dedup_shard     index on dedup(shard) (SQLite; Postgres probes  SweepShards
//	                dedup by the shard's chunks instead)
//
//	events          seq PK ──── scope, files (n × 32 bytes; NULL = whole scope), at,
//	                            xorbs (a sweep's: the xorbs it removed; NULL otherwise)
//
//	possession      (scope, xorb) PK                               RecordPossession, Possessed
//
//	condemned       xorb PK ─── at                                 Condemn, Revive (lifecycle.go)
//	swept           xorb PK ─── at, done (object deleted)          Sweep, Swept, ObjectsDeleted
//	visibility_file index on visibility(file) (SQLite; Postgres    Files, Sweep re-check,
//	                probes its visibility PK (file, scope))        VisibleFiles
//	visibility_scope index on visibility(scope) (Postgres)         Delete of a whole scope
//	condemned_shards shard PK ── at                                CondemnShards, SweepShards
//	possession_xorb index on possession(xorb)                      Sweep
//
// A shard body is kept inline in its shard row when the caller passes it in the Registration
// (ingest does so up to a size threshold, see docs/decisions.md): it is then durable with the
// registration's one commit, and no object store write is needed for it.
//
// There are no foreign keys: rows are content-addressed and written together in one
// transaction, so a reference can only ever point at a row committed with it or before it.
// Everything is immutable except visibility rows, which Hide and Delete remove (and RegisterShard
// of a shard under a scope adds again), and what garbage collection removes (Lifecycle: xorb
// rows, the records of files no scope sees, dedup entries of swept xorbs' chunks, possession
// rows of swept xorbs, dead shard rows and the dedup entries naming them).
//
// A possession row says that a writer of scope uploaded the xorb's bytes itself (a validated
// POST, new or already stored); ingest requires one where a hash alone would let a shard claim
// the bytes (docs/security.md, "What a hash grants"). Possession rows go with the scope (Delete
// of the whole scope) or with the bytes (Sweep of the xorb).
//
// # Concurrency
//
// Implementations are safe for concurrent use. Concurrent RegisterShard calls of the same or
// overlapping shards never fail or deadlock: every insert is ON CONFLICT DO NOTHING and rows are
// inserted table by table in one fixed order and, within a table, in ascending key order (see
// NewBatch). A method returns only after its commit is durable.
package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Errors returned by implementations wrap one of these sentinels; test with errors.Is.
var (
	// ErrNotFound: no such xorb, file (or not visible in the scope asked) or dedup entry.
	ErrNotFound = errors.New("index: not found")
	// ErrUnavailable: the database cannot be reached or refused the work for a transient reason
	// (connection failure, shutdown, lock time-out, closed index). The origin answers 503.
	ErrUnavailable = errors.New("index: unavailable")
	// ErrInvalid: the arguments are malformed (empty scope, missing record, ...). A caller bug.
	ErrInvalid = errors.New("index: invalid argument")
)

// MaxScopeLen bounds the length of a scope (a repository name).
const MaxScopeLen = 1024

// MaxEvents is the most events one Events call returns, whatever limit it is given.
const MaxEvents = 10000

// Registration is everything one accepted shard upload adds to the index.
type Registration struct {
	Shard hash.Hash           // hash of the shard body
	Scope string              // repository the uploading token was issued for
	Files []*recon.FileRecord // files of the shard; a file already registered keeps its first record
	Xorbs []hash.Hash         // xorbs its dedup entries offer, returned by DedupXorbs: those the shard describes, then (bounded) those its files reference; Inherit adds more
	Dedup []hash.Hash         // eligible chunk hashes (docs/protocol.md §8.6), computed by the caller
	// Body, when not empty, is the shard body, kept inline in the shard row and committed with
	// the rest (see ShardBodies); empty means the caller stored it elsewhere (the object store).
	// A known shard keeps its first body.
	Body []byte
	// Inherit lists chunks (the first chunks of the shard's files) whose current dedup entries
	// the registration takes over and whose offered xorbs it keeps offering: what
	// DedupXorbsOf(Inherit) returns when the registration is committed is appended to Xorbs,
	// skipping xorbs already there, at most InheritMax of them. The backend looks them up with
	// the registration (Postgres: one lookup for a whole registration batch) instead of the
	// caller making a round trip of its own per shard.
	Inherit    []hash.Hash
	InheritMax int
	// Require, when not empty, lists xorbs Scope must possess (Possessed) for the registration
	// to commit. The backend checks them with the registration (Postgres: one statement for a
	// whole batch, in its transaction); when one is missing nothing is registered and the error
	// wraps ErrNotPossessed. Ingest sends the xorbs a shard references in place of a Possessed
	// lookup of its own, and runs the full possession check when this fails.
	Require []hash.Hash
}

// ErrNotPossessed is returned by RegisterShard when the scope does not possess a xorb of
// Registration.Require.
var ErrNotPossessed = errors.New("index: scope does not possess a required xorb")

// Event is one visibility revocation, in the order edges must apply them.
type Event struct {
	Seq   int64       // strictly increasing; pass the last one seen to Events
	Scope string      // the scope that lost visibility
	Files []hash.Hash // the files hidden, sorted; nil means every file of the scope
	At    time.Time   // when it was recorded (informational)
	// Xorbs, in the events of a garbage collection's sweep (Scope SweepScope, Files nil), are
	// the xorbs it removed: edges evict their cached bytes.
	Xorbs []hash.Hash
}

// Index is the origin's metadata store. All methods are safe for concurrent use and return
// errors wrapping ErrNotFound, ErrUnavailable or ErrInvalid where those apply. Returned records
// and layouts may be shared with other callers (see LayoutCache): treat them as immutable.
type Index interface {
	// PutXorb records the layout of a stored xorb and its stored object size. It reports
	// whether the xorb was new; a second put of the same hash keeps the first layout and size
	// and returns false.
	PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (inserted bool, err error)
	// Layouts returns the layouts of the xorbs in hs that exist, in one round trip (for up to
	// a few hundred hashes). Missing xorbs are absent from the map; duplicates are allowed.
	Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error)
	// XorbSize returns the stored object size of a xorb, or ErrNotFound.
	XorbSize(ctx context.Context, xorb hash.Hash) (uint64, error)
	// RegisterShard commits a registration in ONE transaction: file records, visibility of
	// every file in r.Scope, dedup entries (replacing the shard of known ones) and the shard row. It reports whether the shard was
	// new. Registering a known shard again (under any scope) still grants r.Scope visibility of
	// its files and returns false; it adds the dedup entries missing and takes over none (its
	// Xorbs are those of its first registration, without what newer shards inherited).
	RegisterShard(ctx context.Context, r *Registration) (inserted bool, err error)
	// File returns the record of file h if it is visible in scope, in one round trip.
	// It returns ErrNotFound both when the file is unknown and when it is not visible there.
	File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error)
	// Visible returns nil if file h is visible in scope, and an error wrapping ErrNotFound
	// when it is unknown or not visible there, as File would, without reading the record
	// (the transfer route's and the edges' visibility checks).
	Visible(ctx context.Context, h hash.Hash, scope string) error
	// DedupXorbs returns the xorbs (Registration.Xorbs) of the shard that registered chunk as a
	// dedup entry last, in that shard's order, or ErrNotFound. The newest registration of a
	// chunk takes it over, so that a file's next version finds its latest one (§8.6 [xetcdn]).
	DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error)
	// DedupXorbsOf is DedupXorbs for several chunks in one round trip: what the entry of each
	// chunk offers, concatenated in the order of chunks; a chunk without an entry adds nothing
	// (no ErrNotFound). A registration inherits what the entries of its files' first chunks
	// offered through Registration.Inherit, which the implementations answer this way.
	DedupXorbsOf(ctx context.Context, chunks []hash.Hash) ([]hash.Hash, error)
	// RecordPossession records that a writer of scope uploaded xorb (validated, new or already
	// stored), so that scope may reference it where a hash alone is no proof of holding its
	// bytes. It is idempotent.
	RecordPossession(ctx context.Context, scope string, xorb hash.Hash) error
	// Possessed returns the xorbs of hs that scope has a possession record for, as a set, in
	// one round trip for up to a few hundred hashes (each a primary-key probe). Duplicates are
	// allowed.
	Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error)
	// Hide revokes the visibility of files in scope (all of the scope's files when files is
	// empty) and appends one Event, in one transaction. Hiding what is not visible is no error.
	Hide(ctx context.Context, scope string, files []hash.Hash) error
	// Events returns up to limit revocations with Seq > after, in Seq order. A limit <= 0 or
	// above MaxEvents means MaxEvents.
	Events(ctx context.Context, after int64, limit int) ([]Event, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close releases the database. Calls after Close fail with ErrUnavailable. Close is
	// idempotent.
	Close() error
	Raw
	ShardBodies
	Lifecycle
}

// Raw is part of Index: the same lookups as File and Layouts, answered with the stored
// encodings (recon.FileRecord.MarshalBinary, xorb.Layout.MarshalBinary) undecoded, for the
// origin's internal API that ships them to edges as they are. The bytes are not verified.
type Raw interface {
	// FileBytes is File's stored record, visibility checked in the same round trip.
	FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error)
	// LayoutBytes is Layouts' stored layouts.
	LayoutBytes(ctx context.Context, hs []hash.Hash) (map[hash.Hash][]byte, error)
}

// ShardBodies is part of Index: the shard bodies that registrations kept inline
// (Registration.Body).
type ShardBodies interface {
	// ShardBody returns the body registered inline with shard h. It returns nil and no error
	// when the shard is registered without one (its body is in the object store), and
	// ErrNotFound when the shard is unknown.
	ShardBody(ctx context.Context, h hash.Hash) ([]byte, error)
}

// DecodeFile decodes the stored record of file h. A record that does not decode, or names
// another file, is reported as a plain error (a corrupt row, not a caller mistake).
func DecodeFile(h hash.Hash, b []byte) (*recon.FileRecord, error) {
	rec, err := recon.UnmarshalFileRecord(b)
	if err != nil {
		return nil, fmt.Errorf("index: stored record of %s: %w", h, err)
	}
	if rec.Hash != h {
		return nil, fmt.Errorf("index: stored record of %s names file %s", h, rec.Hash)
	}
	return rec, nil
}

// DecodeLayouts decodes stored layouts, checking that each is keyed by the xorb it names. The
// index records a layout only after its xorb passed validation, so the merkle hash is not
// recomputed (xorb.UnmarshalLayoutTrusted); every structural check still applies.
func DecodeLayouts(m map[hash.Hash][]byte) (map[hash.Hash]*xorb.Layout, error) {
	out := make(map[hash.Hash]*xorb.Layout, len(m))
	for h, b := range m {
		l, err := xorb.UnmarshalLayoutTrusted(b)
		if err != nil {
			return nil, fmt.Errorf("index: stored layout of %s: %w", h, err)
		}
		if l.Hash != h {
			return nil, fmt.Errorf("index: stored layout of %s names xorb %s", h, l.Hash)
		}
		out[h] = l
	}
	return out, nil
}

// EncodeLayout encodes l for PutXorb, wrapping encoding failures in ErrInvalid.
func EncodeLayout(l *xorb.Layout) ([]byte, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil layout", ErrInvalid)
	}
	b, err := l.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: layout of %s: %w", ErrInvalid, l.Hash, err)
	}
	return b, nil
}

// Batch is a Registration in the form the implementations write: every key list is sorted
// ascending and free of duplicates, so that concurrent registrations take row locks in one
// global order and never deadlock. Build it with NewBatch.
type Batch struct {
	Shard      hash.Hash
	Scope      string
	FileHashes []hash.Hash // sorted, unique
	Records    [][]byte    // Records[i] is the encoded record of FileHashes[i]
	Dedup      []hash.Hash // sorted, unique
	Xorbs      []byte      // the shard's xorbs, unique, in shard order, 32 bytes each
	Body       []byte      // the shard body to keep inline; nil = none (never empty)
	// Refs are the xorbs the files' terms reference, sorted, unique: the registration revives
	// the condemned ones and is refused if one was swept (index.Lifecycle).
	Refs []hash.Hash
	// Inherit and InheritMax are Registration's: the implementation looks up
	// DedupXorbsOf(Inherit) and passes the answer to AddInherited before writing Xorbs.
	Inherit    []hash.Hash
	InheritMax int
	Require    []hash.Hash // Registration.Require, sorted, unique
	own        int         // len(Xorbs) before AddInherited
}

// AddInherited appends to b.Xorbs the xorbs of inherited (DedupXorbsOf(b.Inherit)) it does
// not hold yet, in order, at most b.InheritMax of them (Registration.Inherit). Called again
// (a retried batch), it replaces what the previous call added.
func (b *Batch) AddInherited(inherited []hash.Hash) {
	b.Xorbs = b.Xorbs[:b.own]
	if len(inherited) == 0 || b.InheritMax <= 0 {
		return
	}
	most := min(len(inherited), b.InheritMax)
	b.Xorbs = slices.Grow(b.Xorbs, most*hash.Size)
	held := len(b.Xorbs)/hash.Size + most
	if held*most <= linearInherit {
		// A few dozen xorbs (a registration's usual share): comparing them costs less than
		// a map sized for them (allocations the collector pays for again, per registration).
		added := 0
		for _, x := range inherited {
			if added == most {
				return
			}
			if !containsHash(b.Xorbs, x) {
				b.Xorbs = append(b.Xorbs, x[:]...)
				added++
			}
		}
		return
	}
	seen := make(map[hash.Hash]bool, held)
	for i := 0; i+hash.Size <= len(b.Xorbs); i += hash.Size {
		seen[hash.Hash(b.Xorbs[i:i+hash.Size])] = true
	}
	added := 0
	for _, x := range inherited {
		if added == most {
			return
		}
		if !seen[x] {
			seen[x] = true
			b.Xorbs = append(b.Xorbs, x[:]...)
			added++
		}
	}
}

// linearInherit bounds the comparisons AddInherited makes without a map (held xorbs × added).
const linearInherit = 2048

// containsHash reports whether the concatenated hashes of joined include h.
func containsHash(joined []byte, h hash.Hash) bool {
	for i := 0; i+hash.Size <= len(joined); i += hash.Size {
		if hash.Hash(joined[i:i+hash.Size]) == h {
			return true
		}
	}
	return false
}

// NewBatch validates r and brings it into Batch form. When r lists a file twice, the first
// record wins.
func NewBatch(r *Registration) (*Batch, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil registration", ErrInvalid)
	}
	if err := CheckScope(r.Scope); err != nil {
		return nil, err
	}
	files := slices.Clone(r.Files)
	for i, f := range files {
		if f == nil {
			return nil, fmt.Errorf("%w: file %d of shard %s is nil", ErrInvalid, i, r.Shard)
		}
	}
	// Stable sort keeps the first of equal hashes first; CompactFunc keeps the first of a run.
	slices.SortStableFunc(files, func(a, b *recon.FileRecord) int { return bytes.Compare(a.Hash[:], b.Hash[:]) })
	files = slices.CompactFunc(files, func(a, b *recon.FileRecord) bool { return a.Hash == b.Hash })
	b := &Batch{
		Shard:      r.Shard,
		Scope:      r.Scope,
		FileHashes: make([]hash.Hash, len(files)),
		Records:    make([][]byte, len(files)),
		Dedup:      SortedUnique(r.Dedup),
		Xorbs:      make([]byte, 0, len(r.Xorbs)*hash.Size),
		Inherit:    r.Inherit,
		InheritMax: r.InheritMax,
		Require:    SortedUnique(r.Require),
	}
	if len(r.Body) > 0 {
		b.Body = r.Body
	}
	var refs []hash.Hash
	for _, f := range files {
		for _, t := range f.Terms {
			refs = append(refs, t.Xorb)
		}
	}
	b.Refs = SortedUnique(refs)
	for i, f := range files {
		rec, err := f.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("%w: file %s of shard %s: %w", ErrInvalid, f.Hash, r.Shard, err)
		}
		b.FileHashes[i], b.Records[i] = f.Hash, rec
	}
	seen := make(map[hash.Hash]struct{}, len(r.Xorbs))
	for _, x := range r.Xorbs {
		if _, dup := seen[x]; dup {
			continue
		}
		seen[x] = struct{}{}
		b.Xorbs = append(b.Xorbs, x[:]...)
	}
	b.own = len(b.Xorbs)
	return b, nil
}

// CheckScope reports, wrapping ErrInvalid, whether scope is unusable: empty, longer than
// MaxScopeLen, not UTF-8 or holding a NUL byte (which no SQL text column accepts).
func CheckScope(scope string) error {
	if scope == "" || len(scope) > MaxScopeLen {
		return fmt.Errorf("%w: scope of %d bytes", ErrInvalid, len(scope))
	}
	if !utf8.ValidString(scope) || strings.IndexByte(scope, 0) >= 0 {
		return fmt.Errorf("%w: scope %q is not NUL-free UTF-8", ErrInvalid, scope)
	}
	return nil
}

// SortedUnique returns a sorted copy of hs without duplicates.
func SortedUnique(hs []hash.Hash) []hash.Hash {
	out := slices.Clone(hs)
	slices.SortFunc(out, CompareHashes)
	return slices.Compact(out)
}

// CompareHashes orders hashes as bytes.Compare orders their bytes, eight bytes at a time (a
// registration sorts a few hundred hashes several times; bytes.Compare's call per pair was
// most of it).
func CompareHashes(a, b hash.Hash) int {
	for i := 0; i < hash.Size; i += 8 {
		x, y := binary.BigEndian.Uint64(a[i:]), binary.BigEndian.Uint64(b[i:])
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// JoinHashes concatenates the raw bytes of hs; nil for an empty list.
func JoinHashes(hs []hash.Hash) []byte {
	if len(hs) == 0 {
		return nil
	}
	out := make([]byte, 0, len(hs)*hash.Size)
	for _, h := range hs {
		out = append(out, h[:]...)
	}
	return out
}

// SplitHashes is the inverse of JoinHashes. It fails with a plain error when b is not a whole
// number of hashes (a corrupt row).
func SplitHashes(b []byte) ([]hash.Hash, error) {
	if len(b)%hash.Size != 0 {
		return nil, fmt.Errorf("index: hash list of %d bytes is not a multiple of %d", len(b), hash.Size)
	}
	if len(b) == 0 {
		return nil, nil
	}
	out := make([]hash.Hash, len(b)/hash.Size)
	for i := range out {
		copy(out[i][:], b[i*hash.Size:])
	}
	return out, nil
}

// HashFromBytes converts a 32-byte key column to a Hash, failing on any other length.
func HashFromBytes(b []byte) (hash.Hash, error) {
	var h hash.Hash
	if len(b) != hash.Size {
		return h, fmt.Errorf("index: hash column of %d bytes", len(b))
	}
	copy(h[:], b)
	return h, nil
}
