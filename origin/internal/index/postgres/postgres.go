// Package postgres implements index.Index on PostgreSQL (pgx/v5, pgxpool), the production
// index of the origin. Several origin replicas may share one database.
//
// Every lookup is one statement and one round trip, and so is RegisterShard: one statement whose
// data-modifying CTEs insert the shard row, the file records, the visibility rows and the dedup
// entries from arrays (unnest), in an implicit transaction. Rows are inserted table by table in
// a fixed order and in ascending key order within a table (index.NewBatch sorts them), with ON
// CONFLICT DO NOTHING, so concurrent registrations of the same or overlapping shards only ever
// wait on each other in one direction and cannot deadlock. Durability is Postgres's: with the
// default synchronous_commit a method returns after its commit is flushed.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	_ index.Index = (*DB)(nil)
	_ index.Raw   = (*DB)(nil)
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configures Open.
type Options struct {
	// DSN is a libpq-style URL or key=value string. Parameters pgx does not know are sent as
	// run-time parameters (e.g. search_path=myschema).
	DSN string
	// MaxConns bounds the pool (default: pgxpool's, max(4, GOMAXPROCS)).
	MaxConns int32
}

// DB is an index.Index on PostgreSQL. It is safe for concurrent use; Close it once done.
type DB struct {
	pool   *pgxpool.Pool
	closed atomic.Bool
	once   sync.Once
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
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", translate(err))
	}
	db := &DB{pool: pool}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// migrate applies the embedded migrations newer than schema_version, all in one transaction
// under an advisory lock, so that replicas starting together apply each migration once.
func (db *DB) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	slices.Sort(names)
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
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
		for _, name := range names {
			base := strings.TrimPrefix(name, "migrations/")
			v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
			if err != nil {
				return fmt.Errorf("migration %s has no version prefix", base)
			}
			if v <= have {
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
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", translate(err))
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
	qDedup    = `SELECT s.xorbs FROM dedup d JOIN shards s ON s.hash = d.shard WHERE d.chunk = $1`
	qEvents   = `SELECT seq, scope, files, at FROM events WHERE seq > $1 ORDER BY seq LIMIT $2`

	// qRegister inserts a whole registration in one statement. The main query reads s, so the
	// shard row is inserted first; the unreferenced CTEs f, v, d run to completion afterwards,
	// in that order, the same for every registration.
	qRegister = `WITH s AS (
	INSERT INTO shards(hash, scope, xorbs) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1
), f AS (
	INSERT INTO files(hash, record)
	SELECT h, r FROM unnest($4::bytea[], $5::bytea[]) AS u(h, r) ORDER BY h ON CONFLICT DO NOTHING
), v AS (
	INSERT INTO visibility(scope, file)
	SELECT $2, h FROM unnest($4::bytea[]) AS u(h) ORDER BY h ON CONFLICT DO NOTHING
), d AS (
	INSERT INTO dedup(chunk, shard)
	SELECT c, $1 FROM unnest($6::bytea[]) AS u(c) ORDER BY c ON CONFLICT DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM s)`

	qHideFiles = `DELETE FROM visibility WHERE scope = $1 AND file = ANY($2::bytea[])`
	qHideScope = `DELETE FROM visibility WHERE scope = $1`
	qAddEvent  = `INSERT INTO events(scope, files) VALUES ($1, $2)`
)

// hashArgs returns the raw bytes of hs as a [][]byte for a bytea[] parameter.
func hashArgs(hs []hash.Hash) [][]byte {
	out := make([][]byte, len(hs))
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
	tag, err := db.pool.Exec(ctx, qPutXorb, l.Hash[:], int64(storedSize), layout)
	if err != nil {
		return false, fmt.Errorf("put xorb %s: %w", l.Hash, translate(err))
	}
	return tag.RowsAffected() == 1, nil
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
	out := make(map[hash.Hash][]byte, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := db.pool.Query(ctx, qLayouts, hashArgs(keys))
	if err != nil {
		return nil, fmt.Errorf("layouts: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("layouts: %w", translate(err))
		}
		h, err := index.HashFromBytes(k)
		if err != nil {
			return nil, fmt.Errorf("layouts: %w", err)
		}
		out[h] = v
	}
	if err := rows.Err(); err != nil {
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
	if err := db.pool.QueryRow(ctx, qXorbSize, h[:]).Scan(&n); err != nil {
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
	if err := db.check(); err != nil {
		return false, err
	}
	xorbs := b.Xorbs
	if xorbs == nil {
		xorbs = []byte{}
	}
	var inserted bool
	err = db.pool.QueryRow(ctx, qRegister, b.Shard[:], b.Scope, xorbs,
		hashArgs(b.FileHashes), b.Records, hashArgs(b.Dedup)).Scan(&inserted)
	if err != nil {
		return false, fmt.Errorf("register shard %s: %w", r.Shard, translate(err))
	}
	return inserted, nil
}

// File implements index.Index.
func (db *DB) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	b, err := db.FileBytes(ctx, h, scope)
	if err != nil {
		return nil, err
	}
	return index.DecodeFile(h, b)
}

// FileBytes implements index.Raw.
func (db *DB) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var rec []byte
	if err := db.pool.QueryRow(ctx, qFile, scope, h[:]).Scan(&rec); err != nil {
		return nil, fmt.Errorf("file %s in %q: %w", h, scope, translate(err))
	}
	return rec, nil
}

// DedupXorbs implements index.Index.
func (db *DB) DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var xs []byte
	if err := db.pool.QueryRow(ctx, qDedup, chunk[:]).Scan(&xs); err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, translate(err))
	}
	out, err := index.SplitHashes(xs)
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	return out, nil
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
	rows, err := db.pool.Query(ctx, qEvents, after, limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", translate(err))
	}
	defer rows.Close()
	var out []index.Event
	for rows.Next() {
		var (
			e     index.Event
			files []byte
			at    time.Time
		)
		if err := rows.Scan(&e.Seq, &e.Scope, &files, &at); err != nil {
			return nil, fmt.Errorf("events: %w", translate(err))
		}
		if e.Files, err = index.SplitHashes(files); err != nil {
			return nil, fmt.Errorf("events: seq %d: %w", e.Seq, err)
		}
		e.At = at.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
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

// Close closes the pool, waiting for connections in use to be released. It is idempotent.
func (db *DB) Close() error {
	db.once.Do(func() {
		db.closed.Store(true)
		db.pool.Close()
	})
	return nil
}
