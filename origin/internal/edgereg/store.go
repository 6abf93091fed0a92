package edgereg

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// The table, the same in both databases. Times are Unix nanoseconds of the writing replica's
// clock (replicas are expected to run NTP: skew adds to the timeout). CREATE TABLE IF NOT
// EXISTS, not an index migration: the registry is this package's alone.
const (
	createTable = `CREATE TABLE IF NOT EXISTS edges (
	url          TEXT PRIMARY KEY,
	region       TEXT NOT NULL,
	version      TEXT NOT NULL,
	permits      INTEGER NOT NULL,
	free_permits INTEGER NOT NULL,
	cache_fill   DOUBLE PRECISION NOT NULL,
	hit_ratio    DOUBLE PRECISION NOT NULL,
	ready        BOOLEAN NOT NULL,
	first_ns     BIGINT NOT NULL,
	seen_ns      BIGINT NOT NULL
)`
	upsert = `INSERT INTO edges(url, region, version, permits, free_permits, cache_fill, hit_ratio, ready, first_ns, seen_ns)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (url) DO UPDATE SET region = excluded.region, version = excluded.version,
	permits = excluded.permits, free_permits = excluded.free_permits, cache_fill = excluded.cache_fill,
	hit_ratio = excluded.hit_ratio, ready = excluded.ready, seen_ns = excluded.seen_ns`
	forget = `DELETE FROM edges WHERE seen_ns < $1`
	list   = `SELECT url, region, version, permits, free_permits, cache_fill, hit_ratio, ready, first_ns, seen_ns FROM edges`
)

func putArgs(r Record) []any {
	return []any{r.URL, r.Region, r.Version, r.Permits, r.FreePermits, r.CacheFill, r.HitRatio, r.Ready,
		r.First.UnixNano(), r.Seen.UnixNano()}
}

type scanner interface{ Scan(dest ...any) error }

// records reads every row of a list query (database/sql or pgx rows).
func records(rows interface {
	scanner
	Next() bool
	Err() error
}) ([]Record, error) {
	var out []Record
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return out, nil
}

func scan(s scanner) (Record, error) {
	var r Record
	var first, seen int64
	err := s.Scan(&r.URL, &r.Region, &r.Version, &r.Permits, &r.FreePermits, &r.CacheFill, &r.HitRatio, &r.Ready,
		&first, &seen)
	r.First, r.Seen = time.Unix(0, first), time.Unix(0, seen)
	return r, err
}

// SQLite is the registry in the SQLite index's file, on its own connections (WAL mode lets
// them share the file with the index; a write waits for the index's writer up to the busy
// timeout).
type SQLite struct{ db *sql.DB }

// OpenSQLite opens the registry in the SQLite database at path, creating its table.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)") // a lost heartbeat is replaced by the next one
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("%w: sqlite %s: %w", ErrUnavailable, path, err)
	}
	db.SetMaxOpenConns(2)
	if _, err := db.ExecContext(ctx, createTable); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: sqlite %s: %w", ErrUnavailable, path, err)
	}
	return &SQLite{db: db}, nil
}

func (s *SQLite) Put(ctx context.Context, r Record, forgetBefore time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, upsert, putArgs(r)...); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if _, err := tx.ExecContext(ctx, forget, forgetBefore.UnixNano()); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

func (s *SQLite) List(ctx context.Context) ([]Record, error) {
	rows, err := s.db.QueryContext(ctx, list)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	return records(rows)
}

func (s *SQLite) Close() error { return s.db.Close() }

// Postgres is the registry in the Postgres index's database, on a small pool of its own.
type Postgres struct{ pool *pgxpool.Pool }

// OpenPostgres connects with dsn and creates the registry's table.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: %w", ErrUnavailable, err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: %w", ErrUnavailable, err)
	}
	// Concurrent replicas starting at once may race on CREATE TABLE IF NOT EXISTS (a unique
	// violation on pg_type); the loser retries once and finds the table.
	for i := 0; ; i++ {
		_, err = pool.Exec(ctx, createTable)
		if err == nil || i == 1 {
			break
		}
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: postgres: %w", ErrUnavailable, err)
	}
	return &Postgres{pool: pool}, nil
}

func (p *Postgres) Put(ctx context.Context, r Record, forgetBefore time.Time) error {
	b := p.pool
	if _, err := b.Exec(ctx, upsert, putArgs(r)...); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if _, err := b.Exec(ctx, forget, forgetBefore.UnixNano()); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

func (p *Postgres) List(ctx context.Context) ([]Record, error) {
	rows, err := p.pool.Query(ctx, list)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	return records(rows)
}

func (p *Postgres) Close() error { p.pool.Close(); return nil }

var (
	_ Store = (*SQLite)(nil)
	_ Store = (*Postgres)(nil)
)
