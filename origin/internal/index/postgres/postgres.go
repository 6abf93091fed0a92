// Package postgres implements index.Index on PostgreSQL (pgx/v5, pgxpool), the production
// index of the origin. Several origin replicas may share one database.
//
// Every lookup is one statement and one round trip. Registrations are group-committed: a
// registrar goroutine takes every RegisterShard call waiting at that moment (up to
// Options.MaxBatch; helper registrars too while the queue is full) and commits them with ONE
// statement whose data-modifying CTEs insert the shard rows, file records, visibility rows and
// dedup entries from arrays (unnest), in an implicit transaction. Under load this turns many
// small commits, each waiting for a WAL flush, into a few larger ones; with a single caller a
// batch is just that call. Rows go in table by table in a fixed order and in ascending key order
// within a table, with ON CONFLICT DO NOTHING, so concurrent statements (of this process or of
// other replicas) that touch the same keys only ever wait on each other in one direction and
// cannot deadlock. When a batch fails for a reason other than the database being unavailable,
// its registrations are retried one by one, so one bad registration fails alone. Durability is
// Postgres's: with the default synchronous_commit a method returns after its commit is flushed.
//
// A statement that fails because its connection was lost (the server restarted or terminated
// it) resets the pool and runs once more; every statement so retried is idempotent.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

var (
	_ index.Index       = (*DB)(nil)
	_ index.Raw         = (*DB)(nil)
	_ index.ShardBodies = (*DB)(nil)
	_ index.DedupFilter = (*DB)(nil)
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configures Open. Zero values pick the defaults.
type Options struct {
	// DSN is a libpq-style URL or key=value string. Parameters pgx does not know are sent as
	// run-time parameters (e.g. search_path=myschema).
	DSN string
	// MaxConns bounds the pool (default Registrars + 8). Registrars use up to Registrars of
	// them; the rest serve lookups.
	MaxConns int32
	// Registrars is the number of registration statements in flight at once at most (default
	// 2, or 1 when only MaxConns is given and smaller than 4). One registrar takes every
	// registration; the others only help while the queue is full (MaxBatch registrations
	// waiting for a registrar), so a slow batch does not hold every registration and a load
	// one registrar cannot carry gets more. Fewer batches in flight make larger batches, and
	// concurrent batches that update the same dedup rows wait for each other's commit anyway:
	// at 64 concurrent callers, 4 instead of 8 cut the server's CPU per registration by about
	// a fifth, 2 instead of 4 by another fifth, and one busy registrar instead of two by
	// 20-27 % more on a small index and 12 % at 10^7 (perf/BENCHMARKS.md, "Shard registration" and "Shard registration on a
	// private Postgres"; 2026-12-02 "Shard registration: typed array parameters, one busy
	// registrar").
	Registrars int
	// MaxBatch bounds the registrations one statement commits (default 64).
	MaxBatch int
	// WriteTimeout bounds one registration statement (default 30s). It is not the callers'
	// context: a batch serves several callers and must not fail because one of them left.
	WriteTimeout time.Duration
	// DedupFilterReload is how often the dedup filter (dedupfilter.go) is rebuilt from the
	// table at the latest (default DefaultDedupFilterReload); negative: no filter.
	DedupFilterReload time.Duration
	// Log receives background errors (the dedup filter's listener); nil: discarded.
	Log *slog.Logger
}

// DB is an index.Index on PostgreSQL. It is safe for concurrent use; Close it once done.
type DB struct {
	pool         *pgxpool.Pool
	regs         chan *regOp
	spill        chan struct{} // a registration found regs full: wakes a helper registrar
	maxBatch     int
	writeTimeout time.Duration
	mu           sync.RWMutex // held for reading while enqueueing a registration, for writing by Close
	closed       atomic.Bool
	closing      chan struct{}
	registrars   sync.WaitGroup
	once         sync.Once
	lastReset    atomic.Int64 // unix nanoseconds of the last pool reset after a lost connection
	filter       *dedupFilter // nil: none (Options.DedupFilterReload < 0)
	channel      string       // the dedup filters' notification channel (dedupfilter.go)
	sender       string       // this process's prefix of its notifications
	logger       *slog.Logger
}

// regOp is one RegisterShard call waiting for a registrar.
type regOp struct {
	ctx  context.Context
	b    *index.Batch
	done chan regResult // buffered; receives exactly one result
}

type regResult struct {
	inserted bool
	err      error
}

// Lock keys of transaction-scoped advisory locks (pg_advisory_xact_lock).
const (
	lockMigrate int64 = 0x78657463646e0001 // "xetcdn" 1: schema migrations
	lockEvents  int64 = 0x78657463646e0002 // "xetcdn" 2: event sequence = commit order
)

// Open connects to the database, checks it answers and brings its schema up to date.
// Connection failures are reported wrapping index.ErrUnavailable.
func Open(ctx context.Context, o Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: %w", index.ErrInvalid, err)
	}
	switch {
	case o.Registrars > 0:
	case o.MaxConns > 0:
		// Leave at least half of a given pool to lookups.
		o.Registrars = int(min(2, max(1, o.MaxConns/2)))
	default:
		o.Registrars = 2
	}
	cfg.MaxConns = int32(o.Registrars) + 8
	cfg.AfterConnect = registerArrayCodecs // arrays.go
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 64
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", translate(err))
	}
	db := &DB{pool: pool, regs: make(chan *regOp, o.MaxBatch), spill: make(chan struct{}, 1), maxBatch: o.MaxBatch,
		writeTimeout: o.WriteTimeout, closing: make(chan struct{}), logger: o.Log}
	if db.logger == nil {
		db.logger = slog.New(slog.DiscardHandler)
	}
	db.sender = dedupSender()
	switch {
	case o.DedupFilterReload == 0:
		db.filter = newDedupFilter(db.sender, DefaultDedupFilterReload)
	case o.DedupFilterReload > 0:
		db.filter = newDedupFilter(db.sender, o.DedupFilterReload)
	}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", translate(err))
	}
	db.channel = dedupChannelOf(schema)
	for i := range o.Registrars {
		db.registrars.Add(1)
		go db.registrar(i > 0)
	}
	return db, nil
}

// migrate applies the embedded migrations newer than schema_version, all in one transaction
// under an advisory lock, so that replicas starting together apply each migration once.
func (db *DB) migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockMigrate); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY)`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&have); err != nil {
			return err
		}
		return applyMigrations(ctx, tx, have, math.MaxInt)
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", translate(err))
	}
	return nil
}

// applyMigrations runs, in tx and in order, the embedded migrations with a version above have
// and at most upTo, recording each in schema_version.
func applyMigrations(ctx context.Context, tx pgx.Tx, have, upTo int) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s has no version prefix", base)
		}
		if v <= have || v > upTo {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return fmt.Errorf("%s: %w", base, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_version(version) VALUES ($1)`, v); err != nil {
			return fmt.Errorf("%s: %w", base, err)
		}
	}
	return nil
}

// translate maps driver errors to the index sentinels: pgx.ErrNoRows to ErrNotFound;
// connection failures, server shutdown, too many connections, lock and statement time-outs
// and serialization failures to ErrUnavailable. Context errors and others are returned as they
// are.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", index.ErrNotFound, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),       // insufficient resources (too many connections, disk full)
			strings.HasPrefix(pe.Code, "57P"),      // admin/crash shutdown, cannot connect now
			pe.Code == "40001", pe.Code == "40P01", // serialization failure, deadlock detected
			pe.Code == "55P03", pe.Code == "57014": // lock not available, statement timeout
			return fmt.Errorf("%w: %w", index.ErrUnavailable, err)
		}
		return err
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "closed pool") || strings.Contains(err.Error(), "conn closed") {
		return fmt.Errorf("%w: %w", index.ErrUnavailable, err)
	}
	return err
}

// lost reports whether err means the connection it came from is gone — the server restarted or
// terminated it, or the network dropped it — as opposed to a server that cannot be reached (a
// failed connect) or a statement that ran out of time.
func lost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.Timeout(err) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "conn closed")
}

// resetInterval is the least time between two pool resets.
const resetInterval = time.Second

// retry runs f, and once more when it failed because its connection was lost. A lost
// connection means the pooled connections opened before it (the server restarted, or a
// network path was cut) are most likely lost too: the pool is reset first (at most once per
// resetInterval), so that one request, not one per pooled connection, pays for the restart.
// f must be idempotent: every statement retried here is a read or an INSERT … ON CONFLICT DO
// NOTHING.
func (db *DB) retry(ctx context.Context, f func() error) error {
	err := f()
	if !lost(err) || ctx.Err() != nil || db.closed.Load() {
		return err
	}
	db.resetPool()
	return f()
}

// resetPool closes the pool's connections (those in use are closed when released), unless
// that was done less than resetInterval ago.
func (db *DB) resetPool() {
	now := time.Now().UnixNano()
	last := db.lastReset.Load()
	if now-last < int64(resetInterval) || !db.lastReset.CompareAndSwap(last, now) {
		return
	}
	db.pool.Reset()
}

var errClosed = fmt.Errorf("%w: postgres index closed", index.ErrUnavailable)

func (db *DB) check() error {
	if db.closed.Load() {
		return errClosed
	}
	return nil
}

// Statements. Every lookup is a primary-key probe (TestQueryPlans checks the plans).
const (
	qPutXorb  = `INSERT INTO xorbs(hash, stored_size, layout) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	qLayouts  = `SELECT hash, layout FROM xorbs WHERE hash = ANY($1::bytea[])`
	qXorbSize = `SELECT stored_size FROM xorbs WHERE hash = $1`
	qFile     = `SELECT f.record FROM visibility v JOIN files f ON f.hash = v.file WHERE v.scope = $1 AND v.file = $2`
	// qDedup is DedupXorbs's lookup: the xorbs the entry's shard offers and, in the same
	// statement (one round trip, one snapshot), those of them condemned or swept (NULL: none).
	qDedup = `WITH e AS (
	SELECT s.xorbs, ARRAY(SELECT substring(s.xorbs FROM i * 32 + 1 FOR 32) FROM generate_series(0, length(s.xorbs) / 32 - 1) i) AS xs
	FROM dedup d JOIN shards s ON s.hash = d.shard WHERE d.chunk = $1
)
SELECT e.xorbs, (SELECT string_agg(g.xorb, ''::bytea) FROM (SELECT xorb FROM condemned WHERE xorb = ANY(e.xs)
	UNION SELECT xorb FROM swept WHERE xorb = ANY(e.xs)) g) FROM e`
	// DedupXorbsOf's statements: qDedupEntry for each chunk, all in one round trip, then, when
	// the entries offer xorbs, qCollectedOf for all of them at once: which are condemned or
	// swept. Each is a few primary-key probes with one cached generic plan. (One statement
	// taking an array of chunks and joining dedup to shards was planned anew at every call — a
	// custom plan for an array of known length always looks cheaper than the generic plan — and
	// planning it cost more than running it; forced onto a generic plan, the plan cached while
	// the tables were small kept scanning them as they grew.)
	qDedupEntry = `SELECT s.xorbs FROM dedup d JOIN shards s ON s.hash = d.shard WHERE d.chunk = $1`
	// qDedupEntries is qDedupEntry for many chunks at once: a registration batch's file starts
	// (at least dedupArrayMin of them). It is planned at every call, which for tens of chunks
	// costs less than one statement each (queueDedupEntries).
	qDedupEntries = `SELECT d.chunk, s.xorbs FROM dedup d JOIN shards s ON s.hash = d.shard WHERE d.chunk = ANY($1::bytea[])`
	qCollectedOf  = `SELECT xorb FROM condemned WHERE xorb = ANY($1::bytea[]) UNION ALL SELECT xorb FROM swept WHERE xorb = ANY($1::bytea[])`
	qEvents       = `SELECT seq, scope, files, at, xorbs FROM events WHERE seq > $1 ORDER BY seq LIMIT $2`
	qBody         = `SELECT body FROM shards WHERE hash = $1`

	qPutPossession = `INSERT INTO possession(scope, xorb) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	qPossessed     = `SELECT xorb FROM possession WHERE scope = $1 AND xorb = ANY($2::bytea[])`

	// qRegister commits a batch of registrations in one statement. The main query reads s, so
	// the shard rows are inserted first; the unreferenced CTEs f, v, d run to completion
	// afterwards, in an order fixed by the plan and so the same for every batch (this is the
	// only statement that inserts into these tables). It returns the shards that were new.
	//
	// A shard row records the chunks of its dedup entries (migration 0007), which is how the
	// collector finds the entries naming it: every registration of one shard computes the same
	// list (same body, same stored layouts), so a row already there keeps its own, except a row
	// from before the migration, whose list holds only the entries that named it then (or NULL:
	// written by an older replica), and takes the full one. That update does not count as new
	// (xmax is 0 only for an inserted row). A dedup entry already naming its shard is left as it
	// is (no new row version); one taken over changes only the unindexed shard column, a
	// heap-only update. A shard known before the statement (its row is in the statement's
	// snapshot: an old version uploaded again) takes over no entry, it only adds the missing
	// ones: its row keeps the xorbs it offered when it was new, and taking the entries of newer
	// shards back would shrink their answers. Visibility rows go in (scope, file) order, not in their primary key's
	// (file, scope) (migration 0008): one order for every batch is what keeps concurrent batches
	// from waiting on each other in a cycle, and this one is also that of replicas from before
	// the migration, which may run next to this one during an upgrade.
	qRegister = `WITH s AS (
	INSERT INTO shards(hash, scope, xorbs, body, files, chunks)
	SELECT h, sc, x, b, fs, cs FROM unnest($1::bytea[], $2::text[], $3::bytea[], $10::bytea[], $11::bytea[], $12::bytea[]) AS u(h, sc, x, b, fs, cs) ORDER BY h
	ON CONFLICT (hash) DO UPDATE SET chunks = EXCLUDED.chunks WHERE shards.chunks IS DISTINCT FROM EXCLUDED.chunks
	RETURNING hash, xmax = '0'::xid AS fresh
), f AS (
	INSERT INTO files(hash, record)
	SELECT h, r FROM unnest($4::bytea[], $5::bytea[]) AS u(h, r) ORDER BY h ON CONFLICT DO NOTHING
), v AS (
	INSERT INTO visibility(scope, file)
	SELECT sc, h FROM unnest($6::text[], $7::bytea[]) AS u(sc, h) ORDER BY sc COLLATE "C", h ON CONFLICT DO NOTHING
), d AS (
	INSERT INTO dedup(chunk, shard)
	SELECT c, sh FROM unnest($8::bytea[], $9::bytea[]) AS u(c, sh) ORDER BY c
	ON CONFLICT (chunk) DO UPDATE SET shard = EXCLUDED.shard WHERE dedup.shard <> EXCLUDED.shard
		AND NOT EXISTS (SELECT 1 FROM shards k WHERE k.hash = EXCLUDED.shard)
)
SELECT hash FROM s WHERE fresh`

	qHideFiles = `DELETE FROM visibility WHERE scope = $1 AND file = ANY($2::bytea[])`
	qHideScope = `DELETE FROM visibility WHERE scope = $1`
	qAddEvent  = `INSERT INTO events(scope, files) VALUES ($1, $2)`
)

// hashArgs returns the raw bytes of hs for a bytea[] parameter.
func hashArgs(hs []hash.Hash) byteaArray {
	out := make(byteaArray, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// PutXorb implements index.Index.
func (db *DB) PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error) {
	layout, err := index.EncodeLayout(l)
	if err != nil {
		return false, err
	}
	if storedSize > 1<<62 {
		return false, fmt.Errorf("%w: xorb %s stored size %d", index.ErrInvalid, l.Hash, storedSize)
	}
	if err := db.check(); err != nil {
		return false, err
	}
	var inserted bool
	err = db.retry(ctx, func() (err error) {
		inserted, err = db.putXorb(ctx, l.Hash, int64(storedSize), layout) // lifecycle.go
		return err
	})
	if err != nil {
		return false, fmt.Errorf("put xorb %s: %w", l.Hash, translate(err))
	}
	return inserted, nil
}

// RecordPossession implements index.Index.
func (db *DB) RecordPossession(ctx context.Context, scope string, x hash.Hash) error {
	if err := index.CheckScope(scope); err != nil {
		return err
	}
	if err := db.check(); err != nil {
		return err
	}
	err := db.retry(ctx, func() error {
		_, err := db.pool.Exec(ctx, qPutPossession, scope, x[:])
		return err
	})
	if err != nil {
		return fmt.Errorf("record possession of %s by %q: %w", x, scope, translate(err))
	}
	return nil
}

// hashSet runs query (retried once on a lost connection, so it must be idempotent) and returns
// the set of 32-byte hashes in its one column.
func (db *DB) hashSet(ctx context.Context, query string, args ...any) (map[hash.Hash]bool, error) {
	var out map[hash.Hash]bool
	err := db.retry(ctx, func() error {
		out = make(map[hash.Hash]bool)
		rows, err := db.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k []byte
			if err := rows.Scan(&k); err != nil {
				return err
			}
			h, err := index.HashFromBytes(k)
			if err != nil {
				return err
			}
			out[h] = true
		}
		return rows.Err()
	})
	return out, err
}

// Possessed implements index.Index.
func (db *DB) Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	keys := index.SortedUnique(hs)
	if len(keys) == 0 {
		return map[hash.Hash]bool{}, nil
	}
	out, err := db.hashSet(ctx, qPossessed, scope, hashArgs(keys))
	if err != nil {
		return nil, fmt.Errorf("possessed by %q: %w", scope, translate(err))
	}
	return out, nil
}

// Layouts implements index.Index.
func (db *DB) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	m, err := db.LayoutBytes(ctx, hs)
	if err != nil {
		return nil, err
	}
	return index.DecodeLayouts(m)
}

// LayoutBytes implements index.Raw.
func (db *DB) LayoutBytes(ctx context.Context, hs []hash.Hash) (map[hash.Hash][]byte, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	keys := index.SortedUnique(hs)
	if len(keys) == 0 {
		return map[hash.Hash][]byte{}, nil
	}
	var out map[hash.Hash][]byte
	err := db.retry(ctx, func() error {
		out = make(map[hash.Hash][]byte, len(keys))
		rows, err := db.pool.Query(ctx, qLayouts, hashArgs(keys))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k, v []byte
			if err := rows.Scan(&k, &v); err != nil {
				return err
			}
			h, err := index.HashFromBytes(k)
			if err != nil {
				return err
			}
			out[h] = v
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("layouts: %w", translate(err))
	}
	return out, nil
}

// XorbSize implements index.Index.
func (db *DB) XorbSize(ctx context.Context, h hash.Hash) (uint64, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	var n int64
	if err := db.retry(ctx, func() error { return db.pool.QueryRow(ctx, qXorbSize, h[:]).Scan(&n) }); err != nil {
		return 0, fmt.Errorf("xorb size %s: %w", h, translate(err))
	}
	return uint64(n), nil
}

// RegisterShard implements index.Index. The call waits for the commit of the batch that
// carries it; when ctx ends before a registrar took it, it is not registered.
func (db *DB) RegisterShard(ctx context.Context, r *index.Registration) (bool, error) {
	b, err := index.NewBatch(r)
	if err != nil {
		return false, err
	}
	op := &regOp{ctx: ctx, b: b, done: make(chan regResult, 1)}
	// The read lock orders every enqueue before Close closes db.closing, so the registrars'
	// final drain sees every queued op.
	db.mu.RLock()
	if db.closed.Load() {
		db.mu.RUnlock()
		return false, errClosed
	}
	select {
	case db.regs <- op:
	default:
		// The queue is full: the busy registrar does not keep up (or is held by a slow
		// batch), so a helper takes the next batch.
		db.wakeHelper()
		select {
		case db.regs <- op:
		case <-ctx.Done():
			db.mu.RUnlock()
			return false, ctx.Err()
		}
	}
	if len(db.regs) == cap(db.regs) {
		db.wakeHelper() // every time the queue fills up, whoever filled it
	}
	db.mu.RUnlock()
	// Once queued, the op is always answered, and the caller must learn whether it was
	// committed, so wait regardless of ctx.
	res := <-op.done
	if res.err != nil {
		return false, fmt.Errorf("register shard %s: %w", r.Shard, res.err)
	}
	return res.inserted, nil
}

// wakeHelper wakes a helper registrar (at most one wake-up pending).
func (db *DB) wakeHelper() {
	select {
	case db.spill <- struct{}{}:
	default:
	}
}

// registrar commits batches of queued registrations until Close, then drains the queue. A
// helper registrar takes a batch only when a registration found the queue full (db.spill):
// one registrar carries the load it can carry in large batches, and batches in flight at
// once, which wait for each other's commit where they update the same dedup rows, are added
// only when it does not keep up (Options.Registrars).
func (db *DB) registrar(helper bool) {
	defer db.registrars.Done()
	batch := make([]*regOp, 0, db.maxBatch)
	for {
		if helper {
			select {
			case <-db.spill:
			case <-db.closing:
				return // the others drain the queue
			}
			select {
			case op := <-db.regs:
				batch = append(batch[:0], op)
			default:
				continue // the busy registrar took them
			}
		} else {
			select {
			case op := <-db.regs:
				batch = append(batch[:0], op)
			case <-db.closing:
				for {
					select {
					case op := <-db.regs:
						db.register([]*regOp{op})
					default:
						return
					}
				}
			}
		}
	fill:
		for len(batch) < db.maxBatch {
			select {
			case op := <-db.regs:
				batch = append(batch, op)
			default:
				break fill
			}
		}
		db.register(batch)
	}
}

// register commits ops in one statement and answers each of them.
func (db *DB) register(ops []*regOp) {
	live := ops[:0:0]
	for _, op := range ops {
		if err := op.ctx.Err(); err != nil {
			op.done <- regResult{err: err}
			continue
		}
		live = append(live, op)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), db.writeTimeout)
	defer cancel()
	var refs []hash.Hash
	for _, op := range live {
		refs = append(refs, op.b.Refs...)
	}
	refs = index.SortedUnique(refs)
	// The dedup filter learns the chunks before they can be committed: it never says
	// "absent" for an entry this origin registered (dedupfilter.go).
	for _, op := range live {
		defer db.filter.register(op.b.Dedup)()
	}
	var newShards map[hash.Hash]bool
	err := db.retry(ctx, func() (err error) {
		newShards, err = db.registerTx(ctx, refs, live) // lifecycle.go
		return err
	})
	if np := (*notPossessed)(nil); errors.As(err, &np) {
		// Those fail alone; the others are registered without them.
		bad := make(map[int]bool, len(np.ops))
		for _, i := range np.ops {
			bad[i] = true
		}
		var rest []*regOp
		for i, op := range live {
			if bad[i] {
				op.done <- regResult{err: fmt.Errorf("%w: in %q", index.ErrNotPossessed, op.b.Scope)}
			} else {
				rest = append(rest, op)
			}
		}
		if len(rest) > 0 {
			db.register(rest)
		}
		return
	}
	if err != nil {
		err = translate(err)
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: registration timed out after %v: %w", index.ErrUnavailable, db.writeTimeout, err)
		}
		if len(live) > 1 && !errors.Is(err, index.ErrUnavailable) {
			// Isolate the failure: whatever broke the batch fails only its own registration.
			for _, op := range live {
				db.register([]*regOp{op})
			}
			return
		}
		for _, op := range live {
			op.done <- regResult{err: err}
		}
		return
	}
	// The first op of a new shard reports it inserted; a duplicate in the same batch does not.
	for _, op := range live {
		op.done <- regResult{inserted: newShards[op.b.Shard]}
		delete(newShards, op.b.Shard)
	}
	// The other origins' filters learn the entries; the callers need not wait for it.
	var chunks []hash.Hash
	for _, op := range live {
		chunks = append(chunks, op.b.Dedup...)
	}
	db.notifyDedup(ctx, hashArgs(index.SortedUnique(chunks))) // qRegister's dedup chunks
}

// registerArgs builds the arrays of qRegister from a batch: per table, keys unique (the first
// op of the batch wins) and sorted.
func registerArgs(ops []*regOp) []any {
	type file struct {
		h   hash.Hash
		rec []byte
	}
	type vis struct {
		scope string
		h     hash.Hash
	}
	type chunk struct{ c, shard hash.Hash }
	nf, nc := 0, 0
	for _, op := range ops {
		nf, nc = nf+len(op.b.FileHashes), nc+len(op.b.Dedup)
	}
	// Sized for the batch at once: grown step by step, the maps and lists allocated about
	// twice what they end up holding, per batch.
	var (
		shards = make([]*index.Batch, 0, len(ops))
		files  = make([]file, 0, nf)
		viss   = make([]vis, 0, nf)
		chunks = make([]chunk, 0, nc)
		seenS  = make(map[hash.Hash]bool, len(ops))
		seenF  = make(map[hash.Hash]bool, nf)
		seenV  = make(map[vis]bool, nf)
		seenC  = make(map[hash.Hash]int, nc) // chunk → its index in chunks
	)
	for _, op := range ops {
		b := op.b
		if !seenS[b.Shard] {
			seenS[b.Shard] = true
			shards = append(shards, b)
		}
		for i, h := range b.FileHashes {
			if !seenF[h] {
				seenF[h] = true
				files = append(files, file{h, b.Records[i]})
			}
			if v := (vis{b.Scope, h}); !seenV[v] {
				seenV[v] = true
				viss = append(viss, v)
			}
		}
		for _, c := range b.Dedup {
			// The newest registration of a dedup chunk wins (index.Index.RegisterShard):
			// within a batch, the last op naming it.
			if i, ok := seenC[c]; ok {
				chunks[i].shard = b.Shard
			} else {
				seenC[c] = len(chunks)
				chunks = append(chunks, chunk{c, b.Shard})
			}
		}
	}
	// The statement sorts too; sorting here keeps the arrays canonical for any plan.
	slices.SortFunc(shards, func(a, b *index.Batch) int { return index.CompareHashes(a.Shard, b.Shard) })
	slices.SortFunc(files, func(a, b file) int { return index.CompareHashes(a.h, b.h) })
	slices.SortFunc(chunks, func(a, b chunk) int { return index.CompareHashes(a.c, b.c) })

	// The arrays' types encode without per-element reflection (arrays.go).
	sh, sc, sx := make(byteaArray, len(shards)), make(textArray, len(shards)), make(byteaArray, len(shards))
	sb := make(byteaArray, len(shards))  // nil elements are NULL: no inline body
	sf := make(byteaArray, len(shards))  // the shard's files (index.ShardEntry.Files)
	scs := make(byteaArray, len(shards)) // the chunks of its dedup entries, sorted (qRegister)
	// Every shard's files and chunks, one allocation.
	joined := make([]byte, 0, (nf+nc)*hash.Size)
	join := func(hs []hash.Hash) []byte {
		start := len(joined)
		for i := range hs {
			joined = append(joined, hs[i][:]...)
		}
		return joined[start:len(joined):len(joined)] // empty, not nil: no list is NULL
	}
	for i, b := range shards {
		sh[i], sc[i], sx[i], sb[i] = b.Shard[:], b.Scope, b.Xorbs, b.Body
		if sx[i] == nil {
			sx[i] = []byte{}
		}
		sf[i] = join(b.FileHashes)
		scs[i] = join(b.Dedup) // Batch.Dedup: sorted, unique
	}
	fh, fr := make(byteaArray, len(files)), make(byteaArray, len(files))
	for i := range files {
		fh[i], fr[i] = files[i].h[:], files[i].rec
	}
	vs, vh := make(textArray, len(viss)), make(byteaArray, len(viss))
	for i := range viss {
		vs[i], vh[i] = viss[i].scope, viss[i].h[:]
	}
	cc, cs := make(byteaArray, len(chunks)), make(byteaArray, len(chunks))
	for i := range chunks {
		cc[i], cs[i] = chunks[i].c[:], chunks[i].shard[:]
	}
	args := []any{sh, sc, sx, fh, fr, vs, vh, cc, cs, sb, sf, scs}
	args[0] = sizedArray{sh, paramsSize(args)}
	return args
}

// File implements index.Index.
func (db *DB) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	b, err := db.FileBytes(ctx, h, scope)
	if err != nil {
		return nil, err
	}
	return index.DecodeFile(h, b)
}

// Visible implements index.Index: one primary-key probe of the visibility row (and of the
// file row it names), no record read.
func (db *DB) Visible(ctx context.Context, h hash.Hash, scope string) error {
	if err := db.check(); err != nil {
		return err
	}
	var one int32
	if err := db.retry(ctx, func() error { return db.pool.QueryRow(ctx, qVisible, scope, h[:]).Scan(&one) }); err != nil {
		return fmt.Errorf("file %s in %q: %w", h, scope, translate(err))
	}
	return nil
}

// qVisible is Visible's lookup: qFile without the record.
const qVisible = `SELECT 1 FROM visibility v JOIN files f ON f.hash = v.file WHERE v.scope = $1 AND v.file = $2`

// FileBytes implements index.Raw.
func (db *DB) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var rec []byte
	if err := db.retry(ctx, func() error { return db.pool.QueryRow(ctx, qFile, scope, h[:]).Scan(&rec) }); err != nil {
		return nil, fmt.Errorf("file %s in %q: %w", h, scope, translate(err))
	}
	return rec, nil
}

// DedupXorbs implements index.Index.
func (db *DB) DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var xs, collected []byte
	if err := db.retry(ctx, func() error { return db.pool.QueryRow(ctx, qDedup, chunk[:]).Scan(&xs, &collected) }); err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, translate(err))
	}
	out, err := index.SplitHashes(xs)
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	gone, err := index.SplitHashes(collected)
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	if len(gone) == 0 {
		return out, nil
	}
	// Without the condemned and swept xorbs, order kept.
	return slices.DeleteFunc(out, func(x hash.Hash) bool { return slices.Contains(gone, x) }), nil
}

// DedupXorbsOf implements index.Index.
func (db *DB) DedupXorbsOf(ctx context.Context, chunks []hash.Hash) ([]hash.Hash, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	keys := index.SortedUnique(chunks)
	if len(keys) == 0 {
		return nil, nil
	}
	var (
		offers map[hash.Hash][]hash.Hash
		gone   map[hash.Hash]bool
	)
	err := db.retry(ctx, func() (err error) {
		offers, gone, err = db.dedupOf(ctx, keys)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dedup of %d chunks: %w", len(keys), translate(err))
	}
	return offeredBy(chunks, offers, gone), nil
}

// offeredBy is what the entries of chunks offer (offers, from queueDedupEntries), in the order of
// chunks, without the condemned and swept xorbs (gone, from collectedOf).
func offeredBy(chunks []hash.Hash, offers map[hash.Hash][]hash.Hash, gone map[hash.Hash]bool) []hash.Hash {
	n := 0
	for _, c := range chunks {
		n += len(offers[c])
	}
	if n == 0 {
		return nil
	}
	out := make([]hash.Hash, 0, n)
	for _, c := range chunks {
		for _, x := range offers[c] {
			if !gone[x] {
				out = append(out, x)
			}
		}
	}
	return out
}

// dedupOf looks up the entries of chunks (sorted, unique) and which of the xorbs they offer are
// condemned or swept: two round trips when an entry offers xorbs, else one.
func (db *DB) dedupOf(ctx context.Context, chunks []hash.Hash) (map[hash.Hash][]hash.Hash, map[hash.Hash]bool, error) {
	batch := &pgx.Batch{}
	offers := queueDedupEntries(batch, chunks)
	if err := db.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, nil, err
	}
	gone, err := collectedOf(ctx, db.pool, offers)
	if err != nil {
		return nil, nil, err
	}
	return offers, gone, nil
}

// dedupArrayMin is the fewest chunks queueDedupEntries looks up with one qDedupEntries rather
// than one qDedupEntry each: planning the array form at every call costs about what four or
// five primary-key statements do (docs/decisions.md, 2026-12-02 "Shard registration ...").
const dedupArrayMin = 16

// queueDedupEntries queues the lookup of the entry of each of chunks (sorted, unique) in batch;
// once the batch has run, the returned map holds what each entry found offers.
func queueDedupEntries(batch *pgx.Batch, chunks []hash.Hash) map[hash.Hash][]hash.Hash {
	offers := make(map[hash.Hash][]hash.Hash, len(chunks))
	if len(chunks) >= dedupArrayMin {
		batch.Queue(qDedupEntries, hashArgs(chunks)).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k, xs []byte
				if err := rows.Scan(&k, &xs); err != nil {
					return err
				}
				c, err := index.HashFromBytes(k)
				if err != nil {
					return err
				}
				if offers[c], err = index.SplitHashes(xs); err != nil {
					return fmt.Errorf("dedup %s: %w", c, err)
				}
			}
			return rows.Err()
		})
		return offers
	}
	for _, c := range chunks {
		batch.Queue(qDedupEntry, c[:]).QueryRow(func(row pgx.Row) error {
			var xs []byte
			switch err := row.Scan(&xs); {
			case errors.Is(err, pgx.ErrNoRows):
				return nil
			case err != nil:
				return err
			}
			var err error
			if offers[c], err = index.SplitHashes(xs); err != nil {
				return fmt.Errorf("dedup %s: %w", c, err)
			}
			return nil
		})
	}
	return offers
}

// querier is what collectedOf needs of a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// collectedOf returns which of the xorbs offers offer are condemned or swept: one round trip,
// none when they offer nothing.
func collectedOf(ctx context.Context, q querier, offers map[hash.Hash][]hash.Hash) (map[hash.Hash]bool, error) {
	// The entries of a batch offer mostly the same xorbs: collected once each, not all of
	// every list (thousands of hashes per batch) cloned and sorted.
	var all []hash.Hash
	seen := make(map[hash.Hash]struct{})
	for _, xs := range offers {
		for _, x := range xs {
			if _, dup := seen[x]; !dup {
				seen[x] = struct{}{}
				all = append(all, x)
			}
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	slices.SortFunc(all, index.CompareHashes)
	rows, err := q.Query(ctx, qCollectedOf, hashArgs(all))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	hs, err := scanHashes(rows)
	if err != nil {
		return nil, err
	}
	gone := make(map[hash.Hash]bool, len(hs))
	for _, h := range hs {
		gone[h] = true
	}
	return gone, nil
}

// ShardBody implements index.ShardBodies.
func (db *DB) ShardBody(ctx context.Context, h hash.Hash) ([]byte, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var body []byte
	if err := db.retry(ctx, func() error { return db.pool.QueryRow(ctx, qBody, h[:]).Scan(&body) }); err != nil {
		return nil, fmt.Errorf("shard body %s: %w", h, translate(err))
	}
	return body, nil
}

// Hide implements index.Index. Hides are serialised by an advisory lock held to the commit, so
// that event sequence numbers are handed out in commit order.
func (db *DB) Hide(ctx context.Context, scope string, files []hash.Hash) error {
	if err := index.CheckScope(scope); err != nil {
		return err
	}
	if err := db.check(); err != nil {
		return err
	}
	keys := index.SortedUnique(files)
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		batch.Queue(`SELECT pg_advisory_xact_lock($1)`, lockEvents)
		if len(keys) == 0 {
			batch.Queue(qHideScope, scope)
		} else {
			batch.Queue(qHideFiles, scope, hashArgs(keys))
		}
		batch.Queue(qAddEvent, scope, index.JoinHashes(keys))
		return tx.SendBatch(ctx, batch).Close()
	})
	if err != nil {
		return fmt.Errorf("hide in %q: %w", scope, translate(err))
	}
	return nil
}

// Events implements index.Index.
func (db *DB) Events(ctx context.Context, after int64, limit int) ([]index.Event, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > index.MaxEvents {
		limit = index.MaxEvents
	}
	var out []index.Event
	err := db.retry(ctx, func() error {
		out = nil
		rows, err := db.pool.Query(ctx, qEvents, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e     index.Event
				files []byte
				at    time.Time
				xorbs []byte
			)
			if err := rows.Scan(&e.Seq, &e.Scope, &files, &at, &xorbs); err != nil {
				return err
			}
			if e.Files, err = index.SplitHashes(files); err != nil {
				return fmt.Errorf("seq %d: %w", e.Seq, err)
			}
			if e.Xorbs, err = index.SplitHashes(xorbs); err != nil {
				return fmt.Errorf("seq %d: %w", e.Seq, err)
			}
			e.At = at.UTC()
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("events: %w", translate(err))
	}
	return out, nil
}

// Ping implements index.Index.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.check(); err != nil {
		return err
	}
	if err := db.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", translate(err))
	}
	return nil
}

// Close waits for queued registrations to commit, then closes the pool (waiting for
// connections in use to be released). It is idempotent.
func (db *DB) Close() error {
	db.once.Do(func() {
		db.mu.Lock()
		db.closed.Store(true)
		close(db.closing)
		db.mu.Unlock()
		db.registrars.Wait()
		if f := db.filter; f != nil {
			f.start.Do(func() { close(f.done) }) // never started: nothing to wait for
			<-f.done
		}
		db.pool.Close()
	})
	return nil
}
