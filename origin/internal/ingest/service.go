package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// MaxXorbBody is the largest xorb upload body accepted: 64 MiB of raw chunk bytes (a
// compressed chunk is never larger than its raw form), a header per chunk, and a legacy v1
// footer with its length.
const MaxXorbBody = xorb.MaxRawBytes + xorb.HeaderSize*xorb.MaxChunks + 92 + 40*xorb.MaxChunks + 4

// DefaultMaxChunkRefs bounds the chunks all terms of one shard may cover together. Checking a
// term costs work per chunk (verification and file hashes), so a small body must not buy
// unbounded work; 1<<23 chunks is about 512 GiB of file content per shard.
const DefaultMaxChunkRefs = 1 << 23

// DefaultMaxInlineShard is the largest shard body kept inline in its index registration
// instead of in the object store. A typical upload shard is a few KB; keeping it in the
// registration's commit makes that commit its only durable write.
const DefaultMaxInlineShard = 1 << 20

// layoutBatch is how many layouts one index round trip asks for.
const layoutBatch = 256

// Options configure a Service.
type Options struct {
	Index   Index
	Objects Objects
	// Workers is the number of goroutines validating one xorb (xorb.ValidateOptions.Workers).
	Workers int
	// MaxChunkRefs bounds the chunks covered by a shard's terms; 0 = DefaultMaxChunkRefs.
	MaxChunkRefs int
	// AllowNoVerification accepts shards whose files lack verification entries (lenient mode
	// for old clients; the spec requires them).
	AllowNoVerification bool
	// MaxInlineShard is the largest shard body registered inline in the index (one commit with
	// the registration) rather than stored under ShardKey first; 0 = DefaultMaxInlineShard,
	// < 0 = always the object store.
	MaxInlineShard int
	// Registerer receives the ingest metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Registered, when set, is called after every successful shard registration (new or
	// already known) with the scope and the shard's files, before the upload is acknowledged;
	// its error fails the upload (the client retries, and registration is idempotent). The hub
	// uses it to map sha256 to Xet file hashes (origin/internal/hub).
	Registered func(ctx context.Context, scope string, files []*recon.FileRecord) error
}

// Service validates and stores uploads. It is safe for concurrent use.
type Service struct {
	idx          Index
	objs         Objects
	workers      int
	maxChunkRefs int
	maxInline    int
	lenient      bool
	registered   func(ctx context.Context, scope string, files []*recon.FileRecord) error
	stager       objstore.Stager // nil: the store takes whole objects only (stream.go)

	validation *prometheus.HistogramVec
	bytesIn    *prometheus.CounterVec
	xorbs      *prometheus.CounterVec
	shards     *prometheus.CounterVec
}

// New builds a Service.
func New(o Options) *Service {
	s := &Service{idx: o.Index, objs: o.Objects, workers: o.Workers, maxChunkRefs: o.MaxChunkRefs,
		maxInline: o.MaxInlineShard, lenient: o.AllowNoVerification, registered: o.Registered}
	s.stager, _ = objstore.StagerOf(o.Objects)
	if s.maxChunkRefs <= 0 {
		s.maxChunkRefs = DefaultMaxChunkRefs
	}
	if s.maxInline == 0 {
		s.maxInline = DefaultMaxInlineShard
	}
	s.validation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "xet_origin_ingest_validation_seconds",
		Help:    "Time spent validating uploads, by kind (xorb, shard).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"kind"})
	s.bytesIn = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xet_origin_ingest_bytes_total",
		Help: "Bytes of accepted uploads, by kind (xorb, shard).",
	}, []string{"kind"})
	s.xorbs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xet_origin_ingest_xorbs_total",
		Help: "Xorb uploads by result (inserted, existing, rejected, stored_corrupt).",
	}, []string{"result"})
	s.shards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xet_origin_shard_registrations_total",
		Help: "Shard uploads by result (inserted, existing, rejected).",
	}, []string{"result"})
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.validation, s.bytesIn, s.xorbs, s.shards)
	}
	return s
}

// PutXorb validates body as the xorb h (docs/protocol.md §7.4) and stores it: the chunk area
// plus a v1 footer under XorbKey(h), then its layout in the index. It reports whether the
// xorb was new; a xorb the index already has is not rewritten unless its object is missing
// (storedIndexed).
//
// The object is created, not replaced (Objects.Create; the one exception is putting back the
// bytes the index row describes over an object it does not, ensureStored). When the key is
// taken — a concurrent upload of the same chunks, here or on another replica, perhaps in
// another encoding, or an object left by a crash before its index commit — the upload's own
// bytes are dropped and the layout indexed is that of the stored object, read back and
// validated against h. Every writer therefore indexes the layout of the one object under the
// key, so the index's first-insert-wins (index.PutXorb) keeps them consistent, in any order
// and without a lock. A stored object that does not validate is ErrStoredCorrupt.
//
// Once the xorb is stored (new or not), PutXorb records that scope holds it
// (index.Index.RecordPossession), which RegisterShard requires of scopes referencing
// single-chunk xorbs.
//
// Errors wrap ErrBadPrefix, the xorb package's sentinels (bad body, ErrHashMismatch,
// ErrTooLarge), ErrStoredCorrupt, or the store's and index's.
func (s *Service) PutXorb(ctx context.Context, scope, prefix string, h hash.Hash, body []byte) (inserted bool, err error) {
	defer func() { s.count(s.xorbs, inserted, err) }()
	// Runs first of the defers: only a validated, stored xorb earns a possession record.
	defer func() {
		if err == nil {
			err = s.recordPossession(ctx, scope, h)
		}
	}()
	if prefix != Prefix {
		return false, fmt.Errorf("%w: %q", ErrBadPrefix, prefix)
	}
	start := time.Now()
	l, area, err := xorb.Validate(body, xorb.ValidateOptions{Expect: &h, Workers: s.workers})
	s.validation.WithLabelValues("xorb").Observe(time.Since(start).Seconds())
	if err != nil {
		return false, fmt.Errorf("xorb %s: %w", h, err)
	}
	if done, err := s.storedIndexed(ctx, h); err != nil || done {
		return false, err
	}
	footer := xorb.AppendFooter(nil, l, 0)
	size := uint64(area + len(footer))
	obj := io.MultiReader(bytes.NewReader(body[:area]), bytes.NewReader(footer))
	err = s.objs.Create(ctx, XorbKey(h), obj, int64(size))
	ins, err := s.indexStored(ctx, h, l, size, err, func() error {
		obj := io.MultiReader(bytes.NewReader(body[:area]), bytes.NewReader(footer))
		return s.objs.Put(ctx, XorbKey(h), obj, int64(size))
	})
	if err != nil {
		return false, err
	}
	s.bytesIn.WithLabelValues("xorb").Add(float64(len(body)))
	return ins, nil
}

// indexStored indexes xorb h (layout l, stored size) after this upload's attempt to create its
// object, which ended with created (nil, objstore.ErrExists or a failure); rewrite stores this
// upload's bytes under the key, replacing any object there. Whether or not this call inserts
// the row, the upload is acknowledged only once the key holds the object the row describes
// (lifecycle.go's ensureStored). It reports whether this call inserted the row. Shared by the
// buffered and the streamed upload.
func (s *Service) indexStored(ctx context.Context, h hash.Hash, l *xorb.Layout, size uint64, created error, rewrite func() error) (bool, error) {
	err := created
	copies := []xorbCopy{{l, size, rewrite}}
	if errors.Is(err, objstore.ErrExists) {
		// Someone stored this xorb first. If they indexed it too, there is nothing left to do;
		// otherwise index what they stored, whoever commits the row first. The row then
		// describes the bytes read back, which are what is put back should the object go.
		if done, err := s.storedIndexed(ctx, h); err != nil || done {
			return false, err
		}
		var stored []byte
		l, stored, err = s.storedLayout(ctx, h)
		size = uint64(len(stored))
		copies = append([]xorbCopy{{l, size, func() error {
			return s.objs.Put(ctx, XorbKey(h), bytes.NewReader(stored), int64(len(stored)))
		}}}, copies...)
	}
	if err != nil {
		return false, fmt.Errorf("store xorb %s: %w", h, err)
	}
	ins, err := s.idx.PutXorb(ctx, l, size)
	if err != nil {
		return false, fmt.Errorf("index xorb %s: %w", h, err)
	}
	row, rowSize := l, size
	if !ins {
		// Another upload's row: perhaps of another encoding than the object now under the key
		// (this upload's, created after a collection deleted the row's).
		if row, rowSize, err = s.row(ctx, h); err == nil && row == nil {
			err = fmt.Errorf("%w: xorb %s: not indexed after its insert", index.ErrUnavailable, h)
		}
		if err != nil {
			return false, err
		}
	}
	if err := s.ensureStored(ctx, h, row, rowSize, copies...); err != nil { // lifecycle.go
		return false, err
	}
	return ins, nil
}

func (s *Service) recordPossession(ctx context.Context, scope string, h hash.Hash) error {
	if err := s.idx.RecordPossession(ctx, scope, h); err != nil {
		return fmt.Errorf("xorb %s: %w", h, err)
	}
	return nil
}

// storedIndexed reports whether the index has the xorb h and the store the object its row
// describes (ensureStored's check): then an upload of h has nothing to store and is
// acknowledged. A row whose object is missing or another encoding (an upload that indexed it
// failed to put its bytes back after a collection deleted them, lifecycle.go) is not: the
// upload stores its bytes, and is acknowledged once the key holds the row's (indexStored).
// Cost per upload of a xorb already indexed: the row's layout (index, cached), a Stat and a read
// of the object's footer (on S3 a HEAD and a ranged GET; docs/decisions.md, 2026-12-02 "No
// acknowledged xorb without the indexed object").
func (s *Service) storedIndexed(ctx context.Context, h hash.Hash) (bool, error) {
	row, rowSize, err := s.row(ctx, h)
	if err != nil || row == nil {
		return false, err
	}
	ok, err := s.holds(ctx, h, row, rowSize)
	if err != nil {
		return false, fmt.Errorf("xorb %s: check stored object: %w", h, err)
	}
	return ok, nil
}

// row returns the index row of xorb h: its layout and stored size; nil when there is none.
func (s *Service) row(ctx context.Context, h hash.Hash) (*xorb.Layout, uint64, error) {
	size, err := s.idx.XorbSize(ctx, h)
	if errors.Is(err, index.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("xorb %s: %w", h, err)
	}
	ls, err := s.idx.Layouts(ctx, []hash.Hash{h})
	if err != nil {
		return nil, 0, fmt.Errorf("xorb %s: %w", h, err)
	}
	if ls[h] == nil {
		return nil, 0, fmt.Errorf("%w: xorb %s: indexed and gone", index.ErrUnavailable, h)
	}
	return ls[h], size, nil
}

// storedLayout reads the object stored under XorbKey(h) and returns its layout and its bytes
// after validating it as PutXorb validates an upload (every chunk decompressed and hashed, the
// hash compared with h) and checking that it ends with the footer every stored xorb has. It
// holds the object in memory: at most MaxXorbBody bytes, and only for an upload that lost a
// race or met an orphan, until that upload's row is in and its object checked (ensureStored). A
// missing object (removed since Create found it) is objstore.ErrUnavailable, for the client to
// retry; an invalid one is ErrStoredCorrupt (wrapping no xorb sentinel: the client's body was
// fine, so the answer must not be a 400).
func (s *Service) storedLayout(ctx context.Context, h hash.Hash) (*xorb.Layout, []byte, error) {
	key := XorbKey(h)
	rc, size, err := s.objs.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: %s exists and is gone: %w", objstore.ErrUnavailable, key, err)
	}
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	if size <= 0 || size > MaxXorbBody {
		return nil, nil, fmt.Errorf("%w: %s is %d bytes", ErrStoredCorrupt, key, size)
	}
	obj := make([]byte, size)
	if _, err := io.ReadFull(rc, obj); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", key, err)
	}
	start := time.Now()
	l, area, err := xorb.Validate(obj, xorb.ValidateOptions{Expect: &h, Workers: s.workers})
	s.validation.WithLabelValues("xorb").Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrStoredCorrupt, key, err)
	}
	if area == len(obj) {
		return nil, nil, fmt.Errorf("%w: %s has no footer", ErrStoredCorrupt, key)
	}
	return l, obj, nil
}

func (s *Service) count(c *prometheus.CounterVec, inserted bool, err error) {
	switch {
	case errors.Is(err, ErrStoredCorrupt):
		c.WithLabelValues("stored_corrupt").Inc()
	case err != nil:
		c.WithLabelValues("rejected").Inc()
	case inserted:
		c.WithLabelValues("inserted").Inc()
	default:
		c.WithLabelValues("existing").Inc()
	}
}

// Stage names reported through Progress, as the /v2/shards NDJSON frames name them.
const (
	StageValidating = "validating"
	StageUploading  = "uploading" // storing the shard object (only for bodies not kept inline)
	StageSyncing    = "syncing"   // committing the registration
)

// Progress is a step of a shard upload, reported while RegisterShard runs.
type Progress struct {
	Stage           string
	Verified, Total uint64 // terms checked so far / in all; only for StageValidating
}

// RegisterShard checks an uploaded shard (docs/protocol.md §8.5, checks 1–7) and registers its
// files as visible in scope: files, visibility, dedup entries and the shard row are committed
// in one index transaction. A body of up to MaxInlineShard bytes is part of that commit
// (index.Registration.Body); a larger one is first stored durably under ShardKey. It reports whether the
// shard was new. progress (may be nil) is called from this goroutine as the work advances.
//
// Errors wrap shard.ErrCorrupt/ErrTooLarge (body), ErrMissingXorb, ErrRejected, or the store's
// and index's sentinels. Nothing is registered when an error is returned.
func (s *Service) RegisterShard(ctx context.Context, scope string, body []byte, progress func(Progress)) (inserted bool, err error) {
	defer func() { s.count(s.shards, inserted, err) }()
	if progress == nil {
		progress = func(Progress) {}
	}
	start := time.Now()
	sh, err := shard.Parse(body)
	if err != nil {
		return false, err
	}
	// First as if scope possessed every xorb the shard references, which the registration then
	// requires (index.Registration.Require: checked in its transaction, no lookup of its own).
	// Should this check fail, or the registration find a xorb not possessed, the full check
	// (checkPossession first) runs and its answer is the one given; it reports no progress
	// (the client saw the validation through once).
	require := true
	files, layouts, err := s.check(ctx, scope, sh, progress, true)
	if err != nil {
		require = false
		files, layouts, err = s.check(ctx, scope, sh, func(Progress) {}, false)
	}
	s.validation.WithLabelValues("shard").Observe(time.Since(start).Seconds())
	if err != nil {
		return false, err
	}
	h := hash.Chunk(body)
	dedup, starts := dedupChunks(sh, layouts)
	reg := &index.Registration{Shard: h, Scope: scope, Files: files, Dedup: dedup}
	if len(body) <= s.maxInline {
		reg.Body = body
	} else {
		progress(Progress{Stage: StageUploading})
		if err := s.objs.Put(ctx, ShardKey(h), bytes.NewReader(body), int64(len(body))); err != nil {
			return false, fmt.Errorf("store shard %s: %w", h, err)
		}
	}
	progress(Progress{Stage: StageSyncing})
	// A file start this shard takes over keeps offering what its entry offered (the previous
	// version's xorbs, or the siblings of the shard that stored it): newest-wins loses nothing.
	// The index looks them up with the registration (index.Registration.Inherit).
	reg.Xorbs, reg.InheritMax = offeredXorbs(sh)
	reg.Inherit = starts
	if require {
		reg.Require = possessionRefs(sh)
	}
	ins, err := s.idx.RegisterShard(ctx, reg)
	if require && errors.Is(err, index.ErrNotPossessed) {
		// Not every xorb was uploaded to scope: the full check decides (public chunks, proofs).
		if _, _, err := s.check(ctx, scope, sh, func(Progress) {}, false); err != nil {
			return false, err
		}
		reg.Require = nil
		ins, err = s.idx.RegisterShard(ctx, reg)
	}
	if errors.Is(err, index.ErrXorbGone) {
		// Collected after the checks passed (docs/decisions.md, "Data lifecycle"): the client
		// must upload the xorb again. %v: not the index's not-found, which would be a 404.
		return false, fmt.Errorf("%w: shard %s: %v (upload it again)", ErrMissingXorb, h, err)
	}
	if err != nil {
		return false, fmt.Errorf("register shard %s: %w", h, err)
	}
	if s.registered != nil {
		if err := s.registered(ctx, scope, files); err != nil {
			return false, fmt.Errorf("after registering shard %s: %w", h, err)
		}
	}
	s.bytesIn.WithLabelValues("shard").Add(float64(len(body)))
	return ins, nil
}

// MaxOfferedReferenced bounds how many xorbs that a shard does not describe (its files reference
// them, or the entries it takes over offered them) a registration adds to what its dedup entries
// offer (offeredXorbs): 256 full xorbs are 16 GiB of data, more than a safetensors shard.
const MaxOfferedReferenced = 256

// MaxAnchoredFiles bounds the files of one shard whose first chunk and anchors are indexed
// beyond the stock rules (dedupChunks), and so the index lookups a registration makes for them.
const MaxAnchoredFiles = 64

// dedupChunks lists the chunks a registration indexes for global dedup (docs/protocol.md §8.6):
// the eligible chunks of the shard (shard.EligibleChunks) and, for every file, the first chunk
// of its first term also when that xorb is described by an earlier shard, and the file's
// anchor chunks (shard.AnchorPicker). The first chunk is what a fresh client asks about first when
// it uploads the next version of the file, and the answer must then offer this shard (the
// newest version) rather than the one that first stored the chunk (docs/decisions.md,
// 2026-12-01 "Dedup answers follow file versions").
//
// It also returns the distinct first chunks of the files (starts), whose current entries the
// registration inherits. Only the first MaxAnchoredFiles files get the additions.
func dedupChunks(sh *shard.Shard, layouts map[hash.Hash]*xorb.Layout) (out, starts []hash.Hash) {
	out = shard.EligibleChunks(sh)
	seen := make(map[hash.Hash]bool, len(out)+len(sh.Files))
	for _, c := range out {
		seen[c] = true
	}
	isStart := make(map[hash.Hash]bool)
	for i := range sh.Files[:min(len(sh.Files), MaxAnchoredFiles)] {
		f := &sh.Files[i]
		if len(f.Terms) == 0 {
			continue
		}
		t := f.Terms[0]
		l := layouts[t.Xorb]
		if l == nil || int(t.Start) >= l.NumChunks() {
			continue // check refused such a shard already
		}
		c := l.ChunkHashes[t.Start]
		if !isStart[c] {
			isStart[c] = true
			starts = append(starts, c)
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
		// The file's anchors (shard.AnchorPicker: its first ones and the stride anchors, about
		// one per 4 MiB up to ~256 MiB), for a next version whose first chunks changed.
		var pick shard.AnchorPicker
	terms:
		for _, t := range f.Terms {
			l := layouts[t.Xorb]
			if l == nil || t.End > uint32(l.NumChunks()) {
				break
			}
			for i := t.Start; i < t.End; i++ {
				if c := l.ChunkHashes[i]; pick.Next(c) && !seen[c] {
					seen[c] = true
					out = append(out, c)
				}
				if pick.Done() {
					break terms
				}
			}
		}
	}
	return out, starts
}

// offeredXorbs lists the xorbs the dedup entries of a registration offer (index.Registration.Xorbs):
// the xorbs the shard describes, in its order, then up to MaxOfferedReferenced more: those its
// files reference without describing them, in the order the files first name them, then the
// inherited ones (index.Registration.Inherit; room is how many of those still fit). A new
// version of a file that changed a few blocks describes only the xorb of those blocks; the rest
// of it lives in the xorbs of earlier versions, and a client uploading the next version needs
// both.
func offeredXorbs(sh *shard.Shard) (out []hash.Hash, room int) {
	out = make([]hash.Hash, 0, len(sh.Xorbs))
	seen := make(map[hash.Hash]bool, len(sh.Xorbs))
	for i := range sh.Xorbs {
		if h := sh.Xorbs[i].Hash; !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	extra := 0
	for i := range sh.Files {
		for _, t := range sh.Files[i].Terms {
			if extra == MaxOfferedReferenced {
				return out, 0
			}
			if !seen[t.Xorb] {
				seen[t.Xorb] = true
				out = append(out, t.Xorb)
				extra++
			}
		}
	}
	return out, MaxOfferedReferenced - extra
}
