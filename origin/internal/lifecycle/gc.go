package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// GCIndex is the part of the index garbage collection uses.
type GCIndex interface {
	Files(ctx context.Context, after hash.Hash, limit int) ([]index.FileEntry, error)
	Xorbs(ctx context.Context, after hash.Hash, limit int) ([]index.XorbEntry, error)
	Condemn(ctx context.Context, xs []hash.Hash, at time.Time) error
	Revive(ctx context.Context, xs []hash.Hash) error
	Sweep(ctx context.Context, cands []index.SweepCandidate, condemnedBefore time.Time) ([]hash.Hash, error)
	Swept(ctx context.Context, limit int) ([]hash.Hash, error)
	ObjectsDeleted(ctx context.Context, xs []hash.Hash) error
	LockCollector(ctx context.Context) (func(), error)
	Ping(ctx context.Context) error
	// The orphan pass's re-checks (orphans.go).
	XorbSize(ctx context.Context, xorb hash.Hash) (uint64, error)
	ShardBody(ctx context.Context, h hash.Hash) ([]byte, error)
	// Dead shards (shards.go).
	Shards(ctx context.Context, after hash.Hash, limit int) ([]index.ShardEntry, error)
	CondemnShards(ctx context.Context, condemn, revive []hash.Hash, at time.Time) error
	SweepShards(ctx context.Context, cands []index.ShardCandidate, condemnedBefore time.Time) ([]hash.Hash, error)
}

// GCObjects is the part of the object store garbage collection uses.
type GCObjects interface {
	Stat(ctx context.Context, key string) (int64, error)
	Delete(ctx context.Context, key string) error
	Ping(ctx context.Context) error
	// The orphan pass (orphans.go) lists the store and keeps a copy of what it deletes.
	List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
	Create(ctx context.Context, key string, r io.Reader, size int64) error
	// Put copies an orphan to the trash on a store with neither objstore.Mover nor
	// objstore.MatchMover.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
}

// Errors of GC and CheckGrace.
var (
	// ErrGrace: the grace period is out of range (see CheckGrace).
	ErrGrace = errors.New("gc: grace period out of range")
	// ErrDependency: the index or the object store did not answer the pre-flight check; the
	// collection did not start and changed nothing.
	ErrDependency = errors.New("gc: dependency unavailable")
)

// MinGrace is the shortest grace period accepted even with force.
const MinGrace = time.Second

// CheckGrace refuses a grace period shorter than MinGrace, and, unless force, shorter than
// dedupExpiry: a xorb condemned at C was offered by the dedup route at the latest at C, in an
// answer valid until C + dedupExpiry; a client may register a shard on that answer until then
// (the registration revives the xorb while it is only condemned). Sweeping sooner could refuse
// such a registration.
func CheckGrace(grace, dedupExpiry time.Duration, force bool) error {
	if grace < MinGrace {
		return fmt.Errorf("%w: %v is below the minimum %v", ErrGrace, grace, MinGrace)
	}
	if grace < dedupExpiry && !force {
		return fmt.Errorf("%w: %v is shorter than auth.dedup_expiry (%v), which it must cover; --force to run anyway", ErrGrace, grace, dedupExpiry)
	}
	return nil
}

// Roots is a source of GC roots besides visibility: files a later layer keeps alive (a
// repository's retained commits). Files calls fn for every such file; a file it names is live
// (its xorbs are kept, its record is never swept) whether or not a scope sees it. Contract:
// a root may only be added for a file visible at that moment, by a write that is serialised
// with Sweep the way registrations are (the index's collector lock), so that a sweep never
// removes a xorb a root added after the mark needs. docs/decisions.md, "Data lifecycle".
type Roots interface {
	Files(ctx context.Context, fn func(file hash.Hash) error) error
}

// ObjectCollector collects objects a layer above the index keeps in the store (the hub's
// inline blobs): it runs last in every collection, under the collector's lock, and deletes (dry
// run: only counts) the objects it owns that nothing references and that were written before
// cutoff (now - Grace), returning how many and their bytes.
type ObjectCollector interface {
	CollectObjects(ctx context.Context, cutoff time.Time, dryRun bool) (objects int64, bytes uint64, err error)
}

// collectBlobs runs o.Blobs.
func collectBlobs(ctx context.Context, cutoff time.Time, o GCOptions, rep *Report) error {
	for _, c := range o.Blobs {
		n, b, err := c.CollectObjects(ctx, cutoff, o.DryRun)
		rep.Blobs += n
		rep.BlobBytes += b
		if !o.DryRun {
			rep.ObjectsDeleted += n
			rep.BytesReclaimed += b
		}
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
	}
	return nil
}

// GCOptions configure GC.
type GCOptions struct {
	// Roots, when set, are walked before the mark (see Roots).
	Roots []Roots
	// Blobs are run last (see ObjectCollector).
	Blobs []ObjectCollector
	// Grace is how long a xorb stays condemned (offered by no dedup answer, revived by any
	// registration referencing it) before it is swept. Check it with CheckGrace.
	Grace  time.Duration
	DryRun bool // mark nothing, sweep nothing: report what a run would do
	Now    func() time.Time
	Log    *slog.Logger
	// Failpoint, when set, is called with each step's name after the step is done (tests).
	Failpoint func(step string)
}

// Steps, in order, as passed to GCOptions.Failpoint.
const (
	StepMarked        = "marked"         // condemnations and revivals written
	StepIndexSwept    = "index-swept"    // index rows removed, objects not yet deleted
	StepObjectBatch   = "object-batch"   // one batch of objects deleted, more may follow
	StepOrphanTrashed = "orphan-trashed" // one orphan moved to the trash, its fate not yet decided
	StepOrphan        = "orphan"         // one orphan object deleted, more may follow
	// StepShardObject (shards.go) comes between StepObjectBatch and StepOrphan.
)

// Report is what one collection found and did.
type Report struct {
	DryRun         bool   `json:"dry_run"`
	Files          int64  `json:"files"`           // file records scanned
	DeadFiles      int64  `json:"dead_files"`      // of which visible in no scope
	Xorbs          int64  `json:"xorbs"`           // indexed xorbs scanned
	LiveXorbs      int64  `json:"live_xorbs"`      // referenced by a visible file
	Condemned      int64  `json:"condemned"`       // newly condemned (dry run: would be)
	Revived        int64  `json:"revived"`         // condemned earlier, referenced again
	Sweepable      int64  `json:"sweepable"`       // condemned for longer than the grace period
	Swept          int64  `json:"swept"`           // removed from the index by this run
	SweptBytes     uint64 `json:"swept_bytes"`     // their stored size (dry run: of the sweepable)
	ObjectsDeleted int64  `json:"objects_deleted"` // objects deleted: swept xorbs' (this run's and earlier runs' leftovers) and orphans
	BytesReclaimed uint64 `json:"bytes_reclaimed"` // their size, measured before deletion
	// Orphans are objects under the xorb and shard keys with no index row, written before the
	// grace period (orphans.go); deleted unless dry run, and then also in ObjectsDeleted and
	// BytesReclaimed.
	Orphans     int64  `json:"orphans"`
	OrphanBytes uint64 `json:"orphan_bytes"`
	// OrphansRestored: orphans put back because an upload indexed them while they were being
	// deleted (not counted as deleted).
	OrphansRestored int64 `json:"orphans_restored"`
	// OrphansLeft: orphans left in place this run, found written again since they were listed
	// (objstore.MatchMover) or too large to copy safely; a later run looks at them afresh.
	OrphansLeft int64 `json:"orphans_left"`
	// TrashDeleted: trash entries (orphans a run that died had moved aside, orphans.go) older
	// than the grace period with no index row, deleted; their bytes are in ObjectsDeleted too.
	TrashDeleted int64  `json:"trash_deleted"`
	TrashBytes   uint64 `json:"trash_bytes"`
	// TempFiles: temporary files of writes a crash interrupted (a local store's ".put-*", see
	// objstore.TempRemover), last modified before the grace period; removed unless dry run.
	TempFiles int64  `json:"temp_files"`
	TempBytes uint64 `json:"temp_bytes"`
	// Dead shards (shards.go): rows scanned, newly condemned, condemned for longer than the
	// grace period, removed from the index by this run, and their objects deleted (also in
	// ObjectsDeleted and BytesReclaimed; an object left by a run killed before deleting it is
	// an orphan of the next run).
	Shards          int64 `json:"shards"`
	ShardsCondemned int64 `json:"shards_condemned"`
	ShardsSweepable int64 `json:"shards_sweepable"`
	ShardsSwept     int64 `json:"shards_swept"`
	ShardObjects    int64 `json:"shard_objects_deleted"`
	// Hub blobs (GCOptions.Blobs): inline files of no commit, deleted (dry run: found).
	Blobs     int64   `json:"hub_blobs"`
	BlobBytes uint64  `json:"hub_blob_bytes"`
	Seconds   float64 `json:"seconds"`
}

// GC runs one garbage collection (docs/decisions.md, "Data lifecycle"):
//
//  0. lock (one collector across processes) and check that the index and the store answer;
//  1. finish the object deletions an earlier run left pending (crash between its steps);
//  2. mark: walk every file record; the xorbs of the visible ones are live. Walk every xorb:
//     condemn the unreferenced ones not condemned yet, revive the condemned live ones, and
//     pick those condemned since before now - Grace as sweep candidates;
//  3. sweep the index: remove the candidates' rows (with the dead records referencing them)
//     in batches, each serialised with registrations, re-checking under that serialisation;
//     Then the dead shards (shards.go): condemn, revive, and sweep those condemned before
//     now - Grace (rows, the dedup entries naming them, their dead files' records);
//  4. delete the swept xorbs' objects, then record them deleted; delete the swept shards'
//     objects (as orphans: a copy kept until the index is re-read);
//  5. delete the orphans: objects with no index row, written before now - Grace (orphans.go);
//  6. run the object collectors of the layers above (Blobs: the hub's inline files).
//
// Each step is idempotent and the state between steps is in the index, so a run killed at any
// point is finished by the next. The index first, then the objects: an object is deleted only
// once no index row can lead a reader to it.
func GC(ctx context.Context, ix GCIndex, objs GCObjects, o GCOptions) (*Report, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	fail := o.Failpoint
	if fail == nil {
		fail = func(string) {}
	}
	start := time.Now()
	rep := &Report{DryRun: o.DryRun}
	defer func() { rep.Seconds = time.Since(start).Seconds() }()
	if o.Grace <= 0 { // operators' values pass CheckGrace (>= MinGrace); tests go lower
		return rep, fmt.Errorf("%w: %v", ErrGrace, o.Grace)
	}
	if err := ix.Ping(ctx); err != nil {
		return rep, fmt.Errorf("%w: index: %w", ErrDependency, err)
	}
	if err := objs.Ping(ctx); err != nil {
		return rep, fmt.Errorf("%w: object store: %w", ErrDependency, err)
	}
	release, err := ix.LockCollector(ctx)
	if err != nil {
		return rep, err
	}
	defer release()

	if !o.DryRun {
		if err := deletePending(ctx, ix, objs, rep, fail); err != nil {
			return rep, err
		}
	}

	// Mark.
	now := o.Now()
	rooted := make(map[hash.Hash]bool)
	for _, r := range o.Roots {
		if err := r.Files(ctx, func(f hash.Hash) error { rooted[f] = true; return nil }); err != nil {
			return rep, fmt.Errorf("gc: roots: %w", err)
		}
	}
	live := make(map[hash.Hash]bool)
	dead := make(map[hash.Hash][]hash.Hash) // xorb -> dead files referencing it
	var visible visibleSet                  // visible or rooted files (shards.go)
	var after hash.Hash
	for {
		page, err := ix.Files(ctx, after, index.MaxScanPage)
		if err != nil {
			return rep, fmt.Errorf("gc: scan files: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, f := range page {
			rep.Files++
			rec, err := index.DecodeFile(f.Hash, f.Record)
			if err != nil {
				return rep, fmt.Errorf("gc: %w", err)
			}
			f.Visible = f.Visible || rooted[f.Hash]
			if !f.Visible {
				rep.DeadFiles++
			} else if p := prefix(f.Hash); len(visible) == 0 || visible[len(visible)-1] != p {
				visible = append(visible, p)
			}
			for _, t := range rec.Terms {
				if f.Visible {
					live[t.Xorb] = true
				} else if l := dead[t.Xorb]; len(l) == 0 || l[len(l)-1] != f.Hash {
					dead[t.Xorb] = append(l, f.Hash)
				}
			}
		}
		after = page[len(page)-1].Hash
	}
	var condemn, revive []hash.Hash
	var cands []index.SweepCandidate
	sizes := make(map[hash.Hash]uint64)
	cutoff := now.Add(-o.Grace)
	after = hash.Hash{}
	for {
		page, err := ix.Xorbs(ctx, after, index.MaxScanPage)
		if err != nil {
			return rep, fmt.Errorf("gc: scan xorbs: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, x := range page {
			rep.Xorbs++
			switch {
			case live[x.Hash]:
				rep.LiveXorbs++
				if !x.Condemned.IsZero() {
					revive = append(revive, x.Hash)
				}
			case x.Condemned.IsZero():
				condemn = append(condemn, x.Hash)
			case x.Condemned.Before(cutoff):
				cands = append(cands, index.SweepCandidate{Xorb: x.Hash, DeadFiles: dead[x.Hash]})
				sizes[x.Hash] = x.StoredSize
				rep.Sweepable++
			}
		}
		after = page[len(page)-1].Hash
	}
	rep.Condemned, rep.Revived = int64(len(condemn)), int64(len(revive))
	if o.DryRun {
		for _, c := range cands {
			rep.SweptBytes += sizes[c.Xorb]
		}
		if _, err := markShards(ctx, ix, objs, live, visible, rooted, now, cutoff, o, rep); err != nil {
			return rep, err
		}
		if err := collectOrphans(ctx, ix, objs, live, cutoff, o, rep, fail); err != nil {
			return rep, err
		}
		if err := collectBlobs(ctx, cutoff, o, rep); err != nil {
			return rep, err
		}
		return rep, nil
	}
	for _, part := range chunks(revive, index.MaxScanPage) {
		if err := ix.Revive(ctx, part); err != nil {
			return rep, fmt.Errorf("gc: revive: %w", err)
		}
	}
	for _, part := range chunks(condemn, index.MaxScanPage) {
		if err := ix.Condemn(ctx, part, now); err != nil {
			return rep, fmt.Errorf("gc: condemn: %w", err)
		}
	}
	fail(StepMarked)

	// Sweep the index.
	for len(cands) > 0 {
		n := min(len(cands), index.MaxSweep)
		swept, err := ix.Sweep(ctx, cands[:n], cutoff)
		if err != nil {
			return rep, fmt.Errorf("gc: sweep: %w", err)
		}
		cands = cands[n:]
		rep.Swept += int64(len(swept))
		for _, x := range swept {
			rep.SweptBytes += sizes[x]
		}
	}
	// Dead shards, after the xorb sweep (which dropped the dedup entries of the swept xorbs'
	// chunks, so a shard whose entries all went is found unnamed in this run).
	sm, err := markShards(ctx, ix, objs, live, visible, rooted, now, cutoff, o, rep)
	if err != nil {
		return rep, err
	}
	shardObjects, err := sweepShards(ctx, ix, sm, cutoff, rep)
	if err != nil {
		return rep, err
	}
	fail(StepIndexSwept)

	if err := deletePending(ctx, ix, objs, rep, fail); err != nil {
		return rep, err
	}
	if err := deleteShardObjects(ctx, ix, objs, shardObjects, o, rep, fail); err != nil {
		return rep, err
	}
	if err := collectOrphans(ctx, ix, objs, live, cutoff, o, rep, fail); err != nil {
		return rep, err
	}
	if err := collectBlobs(ctx, cutoff, o, rep); err != nil {
		return rep, err
	}
	o.Log.InfoContext(ctx, "garbage collection done", "condemned", rep.Condemned, "revived", rep.Revived,
		"swept", rep.Swept, "shards_swept", rep.ShardsSwept, "orphans", rep.Orphans, "temp_files", rep.TempFiles, "hub_blobs", rep.Blobs,
		"objects_deleted", rep.ObjectsDeleted,
		"bytes_reclaimed", rep.BytesReclaimed, "seconds", time.Since(start).Seconds())
	return rep, nil
}

// deletePending deletes the objects of every swept xorb whose deletion is pending, batch by
// batch, recording each batch done. An object already gone counts as deleted.
func deletePending(ctx context.Context, ix GCIndex, objs GCObjects, rep *Report, fail func(string)) error {
	for {
		xs, err := ix.Swept(ctx, 100)
		if err != nil {
			return fmt.Errorf("gc: pending deletions: %w", err)
		}
		if len(xs) == 0 {
			return nil
		}
		for _, x := range xs {
			key := objstore.XorbKey(x)
			size, err := objs.Stat(ctx, key)
			if errors.Is(err, objstore.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("gc: stat %s: %w", key, err)
			}
			if err := objs.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return fmt.Errorf("gc: delete %s: %w", key, err)
			}
			rep.ObjectsDeleted++
			rep.BytesReclaimed += uint64(size)
		}
		if err := ix.ObjectsDeleted(ctx, xs); err != nil {
			return fmt.Errorf("gc: record deletions: %w", err)
		}
		fail(StepObjectBatch)
	}
}

func chunks(xs []hash.Hash, n int) [][]hash.Hash {
	var out [][]hash.Hash
	for len(xs) > 0 {
		k := min(len(xs), n)
		out = append(out, xs[:k])
		xs = xs[k:]
	}
	return out
}

// FailpointFromEnv returns a Failpoint that kills the process (exit 137, like kill -9: no
// deferred cleanup, no lock release) when the step named by the environment variable
// XETCDN_GC_FAILPOINT is reached; nil when it is unset. Used by the crash tests.
func FailpointFromEnv(getenv func(string) string) func(string) {
	step := getenv("XETCDN_GC_FAILPOINT")
	if step == "" {
		return nil
	}
	return func(s string) {
		if s == step {
			fmt.Fprintf(os.Stderr, "gc failpoint %s: exiting\n", s)
			os.Exit(137)
		}
	}
}
