package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/chunkbloom"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// The dedup filter (docs/decisions.md, "2026-12-02: the dedup filter"): a Bloom filter over
// the chunk column of the dedup table, so that the global-dedup query — one per uploaded file
// with hf_xet, nearly all of them misses on a small-file upload — answers a chunk the table
// cannot hold without a read (issue 13, perf/BENCHMARKS.md "small-file uploads").
//
// A "no" must be right whenever the table holds the chunk; a "maybe" is checked against the
// table as before. So every chunk is added before the transaction that inserts it commits
// (RegisterShard adds inside the writer's transaction), and a rebuild scans a snapshot taken
// after every transaction that added to the old filter only has committed (build). Rows the
// collector deletes stay in the filter until the next rebuild: "maybe", then a read. Should a
// chunk ever be missing (no path inserts dedup rows without adding them), the cost would be a
// missed dedup — the client uploads bytes the origin already has — never a wrong answer.
//
// The filter is built on the first global-dedup query (commands that open the index and
// never answer one do not scan the table), in the background: until it is ready every query
// reads the table. It is sized for 1.5 times the rows it was built from and rebuilt when more
// chunks were added than that. 16 bits and 8 probes per chunk it is sized for: about 1 false
// "maybe" in 1,700 when full, fewer before; 3 bytes per dedup entry after a build (30 MB at
// 10^7 entries).
type dedupFilter struct {
	seed chunkbloom.Seed // per process, so that probe positions cannot be chosen from outside

	start sync.Once
	kick  chan struct{} // a rebuild is wanted (buffered 1)

	mu      sync.Mutex                       // orders adds against a rebuild's switch to a new filter
	cur     atomic.Pointer[chunkbloom.Bloom] // nil until the first build completes: every query reads
	pending *chunkbloom.Bloom                // being built: adds go to it too
}

func newDedupFilter() *dedupFilter {
	return &dedupFilter{kick: make(chan struct{}, 1), seed: chunkbloom.NewSeed()}
}

// dedupAbsent reports whether the dedup table certainly does not hold c. Its first call asks
// for the first build.
func (db *DB) dedupAbsent(c *hash.Hash) bool {
	f := db.filter
	f.start.Do(f.rebuild) // the builder runs from Open
	b := f.cur.Load()
	if b == nil {
		return false
	}
	return !b.Has(f.seed.Probes(c))
}

// rebuild asks the builder for a build, unless one is asked for already.
func (f *dedupFilter) rebuild() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// add records chunks about to be inserted into the dedup table. It runs inside the writer's
// transaction, before the commit.
func (f *dedupFilter) add(chunks []hash.Hash) {
	if len(chunks) == 0 {
		return
	}
	f.mu.Lock()
	cur, pending := f.cur.Load(), f.pending
	f.seed.AddTo(chunks, cur, pending)
	full := cur != nil && pending == nil && cur.Full()
	f.mu.Unlock()
	if full {
		f.rebuild()
	}
}

// filterBuilder (started by Open, waited for by Close) builds the filter when kicked, until
// the database closes. A build that fails
// leaves the filter as it was (no filter: every query reads); the next growth or a restart
// tries again.
func (db *DB) filterBuilder() {
	defer db.bg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-db.closing
		cancel()
	}()
	for {
		select {
		case <-db.closing:
			return
		case <-db.filter.kick:
		}
		if err := db.buildFilter(ctx); err != nil {
			db.filter.mu.Lock()
			db.filter.pending = nil
			db.filter.mu.Unlock()
		}
	}
}

// buildFilter builds a filter from the dedup table and switches to it.
func (db *DB) buildFilter(ctx context.Context) error {
	f := db.filter
	var rows int64
	if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM dedup`).Scan(&rows); err != nil {
		return fmt.Errorf("dedup filter: count: %w", translate(err))
	}
	if cur := f.cur.Load(); cur != nil {
		rows = max(rows, cur.Len())
	}
	nb := chunkbloom.New(rows + rows/2)
	f.mu.Lock()
	f.pending = nb
	f.mu.Unlock()
	// Every transaction that added to the old filter alone has committed once this empty
	// write, queued after, has: the scan below sees all their rows.
	if err := db.write(ctx, func(context.Context, *sql.Tx) error { return nil }); err != nil {
		return fmt.Errorf("dedup filter: %w", err)
	}
	rs, err := db.r.QueryContext(ctx, `SELECT chunk FROM dedup`)
	if err != nil {
		return fmt.Errorf("dedup filter: scan: %w", translate(err))
	}
	defer rs.Close()
	var c hash.Hash
	for rs.Next() {
		var b sql.RawBytes
		if err := rs.Scan(&b); err != nil {
			return fmt.Errorf("dedup filter: scan: %w", translate(err))
		}
		if len(b) != len(c) {
			continue // not a chunk hash; no query can match it
		}
		copy(c[:], b)
		nb.Add(f.seed.Probes(&c))
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("dedup filter: scan: %w", translate(err))
	}
	f.mu.Lock()
	f.cur.Store(nb)
	f.pending = nil
	full := nb.Full() // outgrown while it was built
	f.mu.Unlock()
	if full {
		f.rebuild()
	}
	return nil
}

// dedupMiss is the answer to a chunk the filter rules out: index.ErrNotFound, like a read that
// found no row, formatted only when someone asks.
type dedupMiss hash.Hash

func (e dedupMiss) Error() string {
	return fmt.Sprintf("dedup %s: %v", hash.Hash(e), index.ErrNotFound)
}

func (dedupMiss) Unwrap() error { return index.ErrNotFound }

// DedupAbsent implements index.DedupFilter: true when the filter proves chunk has no dedup
// entry (what DedupXorbs answers with ErrNotFound without a read).
func (db *DB) DedupAbsent(chunk hash.Hash) bool {
	return db.read() == nil && db.dedupAbsent(&chunk)
}
