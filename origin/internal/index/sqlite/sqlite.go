// Package sqlite implements index.Index on an embedded SQLite database (modernc.org/sqlite), the
// single-node default of the origin.
//
// The database runs in WAL mode with synchronous=FULL, so a commit is on disk before a method
// returns. Reads go through a pool of read-only connections. Writes go through ONE writer
// connection, fed by one goroutine that commits the writes waiting at that moment together
// (group commit): each write runs in its own savepoint inside a shared transaction, so a failing
// write rolls back alone, and every write is acknowledged only after the shared commit. This
// keeps registration throughput up although every commit waits for an fsync.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

var (
	_ index.Index       = (*DB)(nil)
	_ index.Raw         = (*DB)(nil)
	_ index.ShardBodies = (*DB)(nil)
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configures Open. The zero value of every field but Path picks a default.
type Options struct {
	// Path is the database file; it is created when absent, with its -wal and -shm files
	// beside it.
	Path string
	// Readers is the size of the read-only connection pool (default 4).
	Readers int
	// BusyTimeout bounds how long a connection waits for a lock held by another process
	// (default 5s). Writers of this process never wait on each other this way.
	BusyTimeout time.Duration
	// MaxBatch bounds how many writes one group commit takes (default 256).
	MaxBatch int
}

// DB is an index.Index on SQLite. It is safe for concurrent use; Close it once done.
type DB struct {
	r        *sql.DB // read-only pool
	w        *sql.DB // the one writer connection, used only by the writer goroutine
	ops      chan *writeOp
	maxBatch int
	mu       sync.RWMutex // held for reading while enqueueing a write, for writing by Close
	closed   atomic.Bool
	closing  chan struct{}
	done     chan struct{}
	once     sync.Once
	closeErr error
	path     string // Options.Path (the collector's lock file is beside it, lock_unix.go)

	// Statements prepared on the writer connection.
	insShard, insFile, insVis, insDedup, insXorb, insPossession *sql.Stmt
	// The same inserts of files, visibility and dedup rows, rowsPerInsert rows at a time
	// (RegisterShard): a shard of 2,000 small files is 6,000 rows, and each statement run
	// costs more than the row it inserts.
	insFiles, insVises, insDedups *sql.Stmt
	// keepDedup(s): a known shard registered again adds the dedup entries missing and takes
	// over none (index.Index.RegisterShard)
	keepDedup, keepDedups *sql.Stmt
	// Statements prepared on the read pool (each reader connection prepares them once, on first
	// use): the global-dedup query runs once per uploaded file with hf_xet, and parsing it anew
	// each time was half of its cost (issue 13, perf/BENCHMARKS.md "small-file uploads").
	selDedup *sql.Stmt

	filter *dedupFilter   // dedupfilter.go
	bg     sync.WaitGroup // background goroutines (the filter's builder), waited for by Close
}

// writeOp is one write waiting for the writer goroutine.
type writeOp struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *sql.Tx) error
	done chan error // buffered; receives exactly one result, after the commit
}

// Open opens (creating if needed) the database at o.Path and brings its schema up to date.
func Open(ctx context.Context, o Options) (*DB, error) {
	if o.Path == "" {
		return nil, fmt.Errorf("%w: sqlite: empty path", index.ErrInvalid)
	}
	if o.Readers <= 0 {
		o.Readers = 4
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	busy := strconv.FormatInt(o.BusyTimeout.Milliseconds(), 10)
	dsn := func(extra ...string) string {
		q := url.Values{}
		q.Add("_pragma", "busy_timeout("+busy+")")
		q.Add("_pragma", "synchronous(FULL)")
		q.Add("_pragma", "foreign_keys(0)")
		for i := 0; i+1 < len(extra); i += 2 {
			q.Add(extra[i], extra[i+1])
		}
		return "file:" + (&url.URL{Path: o.Path}).EscapedPath() + "?" + q.Encode()
	}
	w, err := sql.Open("sqlite", dsn("_pragma", "journal_mode(WAL)", "_txlock", "immediate"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", o.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	db := &DB{w: w, ops: make(chan *writeOp, o.MaxBatch), maxBatch: o.MaxBatch, path: o.Path,
		closing: make(chan struct{}), done: make(chan struct{}), filter: newDedupFilter()}
	if err := db.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}
	// Readers are opened after the writer has switched the file to WAL mode.
	r, err := sql.Open("sqlite", dsn("_pragma", "query_only(1)"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", o.Path, err)
	}
	r.SetMaxOpenConns(o.Readers)
	r.SetMaxIdleConns(o.Readers)
	db.r = r
	for _, p := range []struct {
		s   **sql.Stmt
		sql string
	}{
		{&db.insShard, `INSERT INTO shards(hash, scope, xorbs, at, body, files) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`},
		{&db.insFile, `INSERT INTO files(hash, record) VALUES (?, ?) ON CONFLICT DO NOTHING`},
		{&db.insVis, `INSERT INTO visibility(scope, file) VALUES (?, ?) ON CONFLICT DO NOTHING`},
		{&db.insDedup, `INSERT INTO dedup(chunk, shard) VALUES (?, ?) ON CONFLICT(chunk) DO UPDATE SET shard = excluded.shard`},
		{&db.insFiles, `INSERT INTO files(hash, record) VALUES ` + rowsOf(2) + ` ON CONFLICT DO NOTHING`},
		{&db.insVises, `INSERT INTO visibility(scope, file) VALUES ` + rowsOf(2) + ` ON CONFLICT DO NOTHING`},
		{&db.insDedups, `INSERT INTO dedup(chunk, shard) VALUES ` + rowsOf(2) + ` ON CONFLICT(chunk) DO UPDATE SET shard = excluded.shard`},
		{&db.keepDedup, `INSERT INTO dedup(chunk, shard) VALUES (?, ?) ON CONFLICT(chunk) DO NOTHING`},
		{&db.keepDedups, `INSERT INTO dedup(chunk, shard) VALUES ` + rowsOf(2) + ` ON CONFLICT(chunk) DO NOTHING`},
		{&db.insXorb, `INSERT INTO xorbs(hash, stored_size, layout) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`},
		{&db.insPossession, `INSERT INTO possession(scope, xorb) VALUES (?, ?) ON CONFLICT DO NOTHING`},
	} {
		if *p.s, err = w.PrepareContext(ctx, p.sql); err != nil {
			r.Close()
			w.Close()
			return nil, fmt.Errorf("sqlite: prepare: %w", translate(err))
		}
	}
	if db.selDedup, err = r.PrepareContext(ctx, qDedup); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite: prepare: %w", translate(err))
	}
	go db.writer()
	db.bg.Add(1)
	go db.filterBuilder() // dedupfilter.go
	return db, nil
}

// migrate applies, in order and each in its own transaction, the embedded migrations newer
// than the version recorded in schema_version.
func (db *DB) migrate(ctx context.Context) error {
	if _, err := db.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)`); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", translate(err))
	}
	var have int
	if err := db.w.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&have); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", translate(err))
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	slices.Sort(names)
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sqlite: migration %s has no version prefix", base)
		}
		if v <= have {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
		tx, err := db.w.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlite: migrate %s: %w", base, translate(err))
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: migrate %s: %w", base, translate(err))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version(version) VALUES (?)`, v); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: migrate %s: %w", base, translate(err))
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sqlite: migrate %s: %w", base, translate(err))
		}
	}
	return nil
}

// write hands fn to the writer goroutine and waits for the commit that includes it. fn runs
// inside a savepoint; when it fails, its changes are rolled back and its error returned.
func (db *DB) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	op := &writeOp{ctx: ctx, fn: fn, done: make(chan error, 1)}
	// The read lock orders every enqueue before Close closes db.closing, so the writer's final
	// drain sees every queued op.
	db.mu.RLock()
	if db.closed.Load() {
		db.mu.RUnlock()
		return errClosed
	}
	select {
	case db.ops <- op:
		db.mu.RUnlock()
	case <-ctx.Done():
		db.mu.RUnlock()
		return ctx.Err()
	}
	// Once queued, the op is always answered (possibly with ctx.Err() if it had not started),
	// and the caller must learn whether it was committed, so wait regardless of ctx.
	return <-op.done
}

var errClosed = fmt.Errorf("%w: sqlite index closed", index.ErrUnavailable)

// writer is the only user of the writer connection. It runs until Close, then answers every
// queued op before it returns.
func (db *DB) writer() {
	defer close(db.done)
	batch := make([]*writeOp, 0, db.maxBatch)
	for {
		var op *writeOp
		select {
		case op = <-db.ops:
		case <-db.closing:
			// Drain what was queued before Close.
			for {
				select {
				case op := <-db.ops:
					db.commit([]*writeOp{op})
				default:
					return
				}
			}
		}
		batch = append(batch[:0], op)
	fill:
		for len(batch) < db.maxBatch {
			select {
			case op := <-db.ops:
				batch = append(batch, op)
			default:
				break fill
			}
		}
		db.commit(batch)
	}
}

// commit runs a batch of writes in one transaction, each in its own savepoint, and answers
// each op after the commit.
func (db *DB) commit(batch []*writeOp) {
	errs := make([]error, len(batch))
	// The transaction is not bound to any one caller's context: a caller that gives up must
	// not abort the others' writes.
	ctx := context.Background()
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		for _, op := range batch {
			op.done <- fmt.Errorf("sqlite: begin: %w", translate(err))
		}
		return
	}
	ok := 0
	for i, op := range batch {
		if err := op.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if _, err := tx.ExecContext(ctx, `SAVEPOINT op`); err != nil {
			errs[i] = translate(err)
			continue
		}
		// fn runs under the batch's context, not the caller's: SQLite rolls back the whole
		// transaction when a statement inside it is interrupted, which would undo the others.
		if err := op.fn(ctx, tx); err != nil {
			errs[i] = err
			if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO op`); rerr != nil {
				// The transaction is unusable; fail everything in it.
				tx.Rollback()
				for j, op := range batch {
					op.done <- firstErr(errs[j], fmt.Errorf("sqlite: rollback to savepoint: %w", translate(rerr)))
				}
				return
			}
		} else {
			ok++
		}
		if _, err := tx.ExecContext(ctx, `RELEASE op`); err != nil {
			tx.Rollback()
			for j, op := range batch {
				op.done <- firstErr(errs[j], fmt.Errorf("sqlite: release savepoint: %w", translate(err)))
			}
			return
		}
	}
	var cerr error
	if ok == 0 {
		_ = tx.Rollback() // nothing to commit; every op already has its error
	} else if err := tx.Commit(); err != nil {
		cerr = fmt.Errorf("sqlite: commit: %w", translate(err))
	}
	for i, op := range batch {
		op.done <- firstErr(errs[i], cerr)
	}
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// translate maps driver errors to the index sentinels: sql.ErrNoRows to ErrNotFound; locking,
// I/O, full-disk and closed-database errors to ErrUnavailable. Others are returned unchanged.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", index.ErrNotFound, err)
	}
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, sql.ErrTxDone) ||
		strings.Contains(err.Error(), "sql: database is closed") {
		return fmt.Errorf("%w: %w", index.ErrUnavailable, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // primary result code
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
			sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL:
			return fmt.Errorf("%w: %w", index.ErrUnavailable, err)
		}
	}
	return err
}

// read guards read paths against use after Close.
func (db *DB) read() error {
	if db.closed.Load() {
		return errClosed
	}
	return nil
}

// PutXorb implements index.Index.
func (db *DB) PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error) {
	layout, err := index.EncodeLayout(l)
	if err != nil {
		return false, err
	}
	h := l.Hash
	if storedSize > 1<<62 {
		return false, fmt.Errorf("%w: xorb %s stored size %d", index.ErrInvalid, h, storedSize)
	}
	var inserted bool
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := putXorbGate(ctx, tx, h); err != nil { // lifecycle.go
			return err
		}
		res, err := tx.StmtContext(ctx, db.insXorb).ExecContext(ctx, h[:], int64(storedSize), layout)
		if err != nil {
			return translate(err)
		}
		n, err := res.RowsAffected()
		inserted = n == 1
		return translate(err)
	})
	if err != nil {
		return false, fmt.Errorf("put xorb %s: %w", h, err)
	}
	return inserted, nil
}

// Lookups, by name (ExplainLookups in the tests checks their plans).
const (
	qXorbSize      = `SELECT stored_size FROM xorbs WHERE hash = ?`
	qFile          = `SELECT f.record FROM visibility v JOIN files f ON f.hash = v.file WHERE v.scope = ? AND v.file = ?`
	qDedup         = `SELECT s.xorbs FROM dedup d JOIN shards s ON s.hash = d.shard WHERE d.chunk = ?`
	qEvents        = `SELECT seq, scope, files, at, xorbs FROM events WHERE seq > ? ORDER BY seq LIMIT ?`
	qBody          = `SELECT body FROM shards WHERE hash = ?`
	qHideScope     = `DELETE FROM visibility WHERE scope = ?`
	qHideFile      = `DELETE FROM visibility WHERE scope = ? AND file = ?`
	qLayoutsPrefix = `SELECT hash, layout FROM xorbs WHERE hash IN (?`
	qHasPossession = `SELECT 1 FROM possession WHERE scope = ? AND xorb = ?`
	qPossessedPre  = `SELECT xorb FROM possession WHERE scope = ? AND xorb IN (?`
)

// layoutsPerQuery bounds the IN list of one Layouts query.
const layoutsPerQuery = 500

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
	if err := db.read(); err != nil {
		return nil, err
	}
	keys := index.SortedUnique(hs)
	out := make(map[hash.Hash][]byte, len(keys))
	args := make([]any, 0, min(len(keys), layoutsPerQuery))
	for len(keys) > 0 {
		n := min(len(keys), layoutsPerQuery)
		args = args[:0]
		for i := range keys[:n] {
			args = append(args, keys[i][:])
		}
		keys = keys[n:]
		q := qLayoutsPrefix + strings.Repeat(`,?`, n-1) + `)`
		if err := db.layoutQuery(ctx, q, args, out); err != nil {
			return nil, fmt.Errorf("layouts: %w", err)
		}
	}
	return out, nil
}

func (db *DB) layoutQuery(ctx context.Context, q string, args []any, out map[hash.Hash][]byte) error {
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return translate(err)
		}
		h, err := index.HashFromBytes(k)
		if err != nil {
			return err
		}
		out[h] = v
	}
	return translate(rows.Err())
}

// XorbSize implements index.Index.
func (db *DB) XorbSize(ctx context.Context, h hash.Hash) (uint64, error) {
	if err := db.read(); err != nil {
		return 0, err
	}
	var n int64
	if err := db.r.QueryRowContext(ctx, qXorbSize, h[:]).Scan(&n); err != nil {
		return 0, fmt.Errorf("xorb size %s: %w", h, translate(err))
	}
	return uint64(n), nil
}

// RegisterShard implements index.Index.
func (db *DB) RegisterShard(ctx context.Context, r *index.Registration) (bool, error) {
	b, err := index.NewBatch(r)
	if err != nil {
		return false, err
	}
	if len(b.Require) > 0 {
		// Before the write transaction, as a caller's own Possessed would be.
		got, err := db.Possessed(ctx, b.Scope, b.Require)
		if err != nil {
			return false, fmt.Errorf("register shard %s: %w", r.Shard, err)
		}
		for _, x := range b.Require {
			if !got[x] {
				return false, fmt.Errorf("register shard %s: %w: %s in %q", r.Shard, index.ErrNotPossessed, x, b.Scope)
			}
		}
	}
	if len(b.Inherit) > 0 {
		// Before the write transaction, as a caller's own DedupXorbsOf would be: one writer,
		// and the lookup reads through the read pool.
		xs, err := db.DedupXorbsOf(ctx, b.Inherit)
		if err != nil {
			return false, fmt.Errorf("register shard %s: dedup entries of %d file starts: %w", r.Shard, len(b.Inherit), err)
		}
		b.AddInherited(xs)
	}
	var inserted bool
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		inserted = false // a retried closure must not keep a stale answer
		// Condemned references revive, swept ones refuse (lifecycle.go).
		if err := reviveRefs(ctx, tx, b.Refs); err != nil {
			return err
		}
		xorbs := b.Xorbs
		if xorbs == nil {
			xorbs = []byte{}
		}
		files := index.JoinHashes(b.FileHashes) // index.ShardEntry.Files
		if files == nil {
			files = []byte{}
		}
		res, err := tx.StmtContext(ctx, db.insShard).ExecContext(ctx, b.Shard[:], b.Scope, xorbs, time.Now().UnixNano(), b.Body, files)
		if err != nil {
			return translate(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return translate(err)
		}
		err = insertRows(ctx, tx, db.insFiles, db.insFile, len(b.FileHashes), func(i int, args []any) []any {
			return append(args, b.FileHashes[i][:], b.Records[i])
		})
		if err != nil {
			return err
		}
		err = insertRows(ctx, tx, db.insVises, db.insVis, len(b.FileHashes), func(i int, args []any) []any {
			return append(args, b.Scope, b.FileHashes[i][:])
		})
		if err != nil {
			return err
		}
		db.filter.add(b.Dedup) // before the commit that makes them visible (dedupfilter.go)
		many, one := db.insDedups, db.insDedup
		if n == 0 {
			// Known shard: its row keeps the xorbs it offered when it was new, so taking over
			// the entries of newer shards would shrink their answers.
			many, one = db.keepDedups, db.keepDedup
		}
		err = insertRows(ctx, tx, many, one, len(b.Dedup), func(i int, args []any) []any {
			return append(args, b.Dedup[i][:], b.Shard[:])
		})
		if err != nil {
			return err
		}
		inserted = n == 1
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("register shard %s: %w", r.Shard, err)
	}
	return inserted, nil
}

// rowsPerInsert is how many rows the multi-row inserts of RegisterShard write per statement
// (SQLite allows 32,766 parameters).
const rowsPerInsert = 64

// rowsOf returns the VALUES list of rowsPerInsert rows of cols parameters each.
func rowsOf(cols int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", rowsPerInsert), ", ")
}

// insertRows inserts n rows inside tx: rowsPerInsert at a time through many (a statement of
// that many rows), the rest one by one through one. args appends row i's parameters.
func insertRows(ctx context.Context, tx *sql.Tx, many, one *sql.Stmt, n int, args func(i int, args []any) []any) error {
	buf := make([]any, 0, 2*rowsPerInsert)
	i := 0
	if n >= rowsPerInsert {
		st := tx.StmtContext(ctx, many)
		for ; i+rowsPerInsert <= n; i += rowsPerInsert {
			buf = buf[:0]
			for j := i; j < i+rowsPerInsert; j++ {
				buf = args(j, buf)
			}
			if _, err := st.ExecContext(ctx, buf...); err != nil {
				return translate(err)
			}
		}
	}
	if i < n {
		st := tx.StmtContext(ctx, one)
		for ; i < n; i++ {
			if _, err := st.ExecContext(ctx, args(i, buf[:0])...); err != nil {
				return translate(err)
			}
		}
	}
	return nil
}

// RecordPossession implements index.Index.
func (db *DB) RecordPossession(ctx context.Context, scope string, x hash.Hash) error {
	if err := index.CheckScope(scope); err != nil {
		return err
	}
	if err := db.read(); err != nil {
		return err
	}
	// Most POSTs of a known xorb come from a scope that already holds it: a read spares them
	// a place in the group commit and its fsync.
	var one int
	switch err := db.r.QueryRowContext(ctx, qHasPossession, scope, x[:]).Scan(&one); {
	case err == nil:
		return nil
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("possession of %s by %q: %w", x, scope, translate(err))
	}
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.StmtContext(ctx, db.insPossession).ExecContext(ctx, scope, x[:])
		return translate(err)
	})
	if err != nil {
		return fmt.Errorf("record possession of %s by %q: %w", x, scope, err)
	}
	return nil
}

// Possessed implements index.Index.
func (db *DB) Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	keys := index.SortedUnique(hs)
	out := make(map[hash.Hash]bool)
	args := make([]any, 0, 1+min(len(keys), layoutsPerQuery))
	for len(keys) > 0 {
		n := min(len(keys), layoutsPerQuery)
		args = append(args[:0], scope)
		for i := range keys[:n] {
			args = append(args, keys[i][:])
		}
		keys = keys[n:]
		if err := db.hashesInto(ctx, qPossessedPre+strings.Repeat(`,?`, n-1)+`)`, args, out); err != nil {
			return nil, fmt.Errorf("possessed by %q: %w", scope, err)
		}
	}
	return out, nil
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
	if err := db.read(); err != nil {
		return err
	}
	var one int
	if err := db.r.QueryRowContext(ctx, qVisible, scope, h[:]).Scan(&one); err != nil {
		return fmt.Errorf("file %s in %q: %w", h, scope, translate(err))
	}
	return nil
}

// qVisible is Visible's lookup: qFile without the record.
const qVisible = `SELECT 1 FROM visibility v JOIN files f ON f.hash = v.file WHERE v.scope = ? AND v.file = ?`

// FileBytes implements index.Raw.
func (db *DB) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	var rec []byte
	err := db.r.QueryRowContext(ctx,
		qFile,
		scope, h[:]).Scan(&rec)
	if err != nil {
		return nil, fmt.Errorf("file %s in %q: %w", h, scope, translate(err))
	}
	return rec, nil
}

// ShardBody implements index.ShardBodies.
func (db *DB) ShardBody(ctx context.Context, h hash.Hash) ([]byte, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	var body []byte
	if err := db.r.QueryRowContext(ctx, qBody, h[:]).Scan(&body); err != nil {
		return nil, fmt.Errorf("shard body %s: %w", h, translate(err))
	}
	return body, nil
}

// DedupXorbs implements index.Index.
func (db *DB) DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	if db.dedupAbsent(&chunk) {
		return nil, dedupMiss(chunk)
	}
	var xs []byte
	err := db.selDedup.QueryRowContext(ctx, chunk[:]).Scan(&xs)
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, translate(err))
	}
	out, err := index.SplitHashes(xs)
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	if out, err = db.uncollected(ctx, out); err != nil { // lifecycle.go
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	return out, nil
}

// DedupXorbsOf implements index.Index: one DedupXorbs per chunk (an in-process lookup each).
func (db *DB) DedupXorbsOf(ctx context.Context, chunks []hash.Hash) ([]hash.Hash, error) {
	var out []hash.Hash
	for _, c := range chunks {
		xs, err := db.DedupXorbs(ctx, c)
		if err != nil && !errors.Is(err, index.ErrNotFound) {
			return nil, err
		}
		out = append(out, xs...)
	}
	return out, nil
}

// Hide implements index.Index.
func (db *DB) Hide(ctx context.Context, scope string, files []hash.Hash) error {
	if err := index.CheckScope(scope); err != nil {
		return err
	}
	keys := index.SortedUnique(files)
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if len(keys) == 0 {
			if _, err := tx.ExecContext(ctx, qHideScope, scope); err != nil {
				return translate(err)
			}
		} else {
			st, err := tx.PrepareContext(ctx, qHideFile)
			if err != nil {
				return translate(err)
			}
			defer st.Close()
			for _, h := range keys {
				if _, err := st.ExecContext(ctx, scope, h[:]); err != nil {
					return translate(err)
				}
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO events(scope, files, at) VALUES (?, ?, ?)`,
			scope, index.JoinHashes(keys), time.Now().UnixNano())
		return translate(err)
	})
	if err != nil {
		return fmt.Errorf("hide in %q: %w", scope, err)
	}
	return nil
}

// Events implements index.Index.
func (db *DB) Events(ctx context.Context, after int64, limit int) ([]index.Event, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > index.MaxEvents {
		limit = index.MaxEvents
	}
	rows, err := db.r.QueryContext(ctx,
		qEvents, after, limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", translate(err))
	}
	defer rows.Close()
	var out []index.Event
	for rows.Next() {
		var (
			e     index.Event
			files []byte
			at    int64
			xorbs []byte
		)
		if err := rows.Scan(&e.Seq, &e.Scope, &files, &at, &xorbs); err != nil {
			return nil, fmt.Errorf("events: %w", translate(err))
		}
		if e.Files, err = index.SplitHashes(files); err != nil {
			return nil, fmt.Errorf("events: seq %d: %w", e.Seq, err)
		}
		if e.Xorbs, err = index.SplitHashes(xorbs); err != nil {
			return nil, fmt.Errorf("events: seq %d: %w", e.Seq, err)
		}
		e.At = time.Unix(0, at).UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("events: %w", translate(err))
	}
	return out, nil
}

// Ping implements index.Index.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.read(); err != nil {
		return err
	}
	var one int
	if err := db.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("ping: %w", translate(err))
	}
	return nil
}

// Close waits for queued writes to commit, then closes the database. It is idempotent.
func (db *DB) Close() error {
	db.once.Do(func() {
		db.mu.Lock()
		db.closed.Store(true)
		close(db.closing)
		db.mu.Unlock()
		<-db.done
		db.bg.Wait()
		db.closeErr = errors.Join(db.r.Close(), db.w.Close())
	})
	return db.closeErr
}
