package hub

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"
)

// Grant is one permission of a token: read or write over the repository scopes matching
// Pattern ("models/acme/*", "datasets/acme/corpus", "*/acme/*"; path.Match syntax, '*' does not
// cross '/').
type Grant struct {
	Pattern string `json:"pattern"`
	Write   bool   `json:"write"` // write implies read
}

// Store is the hub's durable state: one SQL database (the CAS index's SQLite file or Postgres
// database), its own tables (package comment). Every method returns after its commit is
// durable. Errors wrap ErrRepoNotFound, ErrRevisionNotFound, ErrExists, ErrConflict or
// ErrUnavailable. Safe for concurrent use.
type Store struct {
	db       *sql.DB
	postgres bool
}

// Open opens the store on the SQLite file path (driver "sqlite") or the Postgres DSN (driver
// "postgres") and creates its tables if needed.
func Open(ctx context.Context, driver, dsn string) (*Store, error) {
	s := &Store{}
	var err error
	switch driver {
	case "sqlite":
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "synchronous(FULL)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_txlock", "immediate")
		s.db, err = sql.Open("sqlite", "file:"+(&url.URL{Path: dsn}).EscapedPath()+"?"+q.Encode())
		if err == nil {
			// One connection: SQLite has one writer anyway, and this keeps the hub's
			// transactions from waiting on each other inside the driver.
			s.db.SetMaxOpenConns(1)
		}
	case "postgres":
		s.postgres = true
		s.db, err = sql.Open("pgx", dsn)
		if err == nil {
			s.db.SetMaxOpenConns(8)
		}
	default:
		return nil, fmt.Errorf("hub: unknown database driver %q", driver)
	}
	if err != nil {
		return nil, fmt.Errorf("hub: open: %w", err)
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database handle.
func (s *Store) Close() error { return s.db.Close() }

const schema = `
CREATE TABLE IF NOT EXISTS hub_users (name TEXT PRIMARY KEY, created BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS hub_tokens (hash TEXT PRIMARY KEY, username TEXT NOT NULL, grants TEXT NOT NULL, created BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS hub_repos (scope TEXT PRIMARY KEY, private INTEGER NOT NULL, created BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS hub_refs (scope TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, commit_id TEXT NOT NULL, PRIMARY KEY (scope, kind, name));
CREATE TABLE IF NOT EXISTS hub_commits (scope TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (scope, id));
CREATE TABLE IF NOT EXISTS hub_lfs (scope TEXT NOT NULL, sha256 TEXT NOT NULL, file TEXT NOT NULL, size BIGINT NOT NULL, at BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (scope, sha256));
`

// addLFSAt adds hub_lfs.at (unix seconds of the last registration of the file; a GC root for
// a grace period, Roots) to a table created before it existed; rows from then count as old.
const addLFSAt = `ALTER TABLE hub_lfs ADD COLUMN at BIGINT NOT NULL DEFAULT 0`

func (s *Store) migrate(ctx context.Context) error {
	for _, stmt := range strings.Split(schema, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("hub: create tables: %w", s.translate(err))
		}
	}
	if _, err := s.db.ExecContext(ctx, addLFSAt); err != nil && !strings.Contains(err.Error(), "duplicate column") &&
		!strings.Contains(err.Error(), "SQLSTATE 42701") {
		return fmt.Errorf("hub: add hub_lfs.at: %w", s.translate(err))
	}
	return nil
}

// q rewrites '?' placeholders as $n for Postgres.
func (s *Store) q(query string) string {
	if !s.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// translate maps driver errors: a unique violation → ErrExists, anything else → ErrUnavailable
// (the database could not do the work; the caller answers 503).
func (s *Store) translate(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if strings.Contains(msg, "UNIQUE constraint") || strings.Contains(msg, "SQLSTATE 23505") ||
		strings.Contains(msg, "duplicate key") {
		return fmt.Errorf("%w: %v", ErrExists, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// AddUser creates a user; ErrExists if the name is taken.
func (s *Store) AddUser(ctx context.Context, name string) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO hub_users(name, created) VALUES (?, ?)`), name, time.Now().Unix())
	return s.translate(err)
}

// AddToken stores a token (by its hash) for an existing user.
func (s *Store) AddToken(ctx context.Context, user, hash string, grants []Grant) error {
	g, _ := json.Marshal(grants)
	return s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM hub_users WHERE name = ?`), user).Scan(&n); err != nil {
			return s.translate(err)
		}
		if n == 0 {
			return fmt.Errorf("%w: no user %q (add it with 'xet-origin users add')", ErrInvalid, user)
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO hub_tokens(hash, username, grants, created) VALUES (?, ?, ?, ?)`),
			hash, user, string(g), time.Now().Unix())
		return s.translate(err)
	})
}

// Token returns the user and grants of the token with this hash; ErrUnauthorized if unknown.
func (s *Store) Token(ctx context.Context, hash string) (string, []Grant, error) {
	var user, g string
	err := s.db.QueryRowContext(ctx, s.q(`SELECT username, grants FROM hub_tokens WHERE hash = ?`), hash).Scan(&user, &g)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, ErrUnauthorized
	}
	if err != nil {
		return "", nil, s.translate(err)
	}
	var grants []Grant
	if err := json.Unmarshal([]byte(g), &grants); err != nil {
		return "", nil, fmt.Errorf("%w: token grants: %v", ErrUnavailable, err)
	}
	return user, grants, nil
}

// CreateRepo creates a repository with its first commit on branch "main"; ErrExists if the
// scope is taken.
func (s *Store) CreateRepo(ctx context.Context, r Repo, first *Commit) error {
	body, err := json.Marshal(first)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO hub_repos(scope, private, created) VALUES (?, ?, ?)`),
			r.Scope(), boolInt(r.Private), r.Created.Unix()); err != nil {
			return s.translate(err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO hub_commits(scope, id, body) VALUES (?, ?, ?)`),
			r.Scope(), first.ID, string(body)); err != nil {
			return s.translate(err)
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO hub_refs(scope, kind, name, commit_id) VALUES (?, 'branch', 'main', ?)`),
			r.Scope(), first.ID)
		return s.translate(err)
	})
}

// DeleteRepo deletes a repository, its refs, commits and sha256 map; ErrRepoNotFound if absent.
// The Xet files and blobs stay in the CAS (garbage collection decides, docs/hub.md).
func (s *Store) DeleteRepo(ctx context.Context, scope string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM hub_repos WHERE scope = ?`), scope)
		if err != nil {
			return s.translate(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrRepoNotFound
		}
		for _, t := range []string{"hub_refs", "hub_commits", "hub_lfs"} {
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM `+t+` WHERE scope = ?`), scope); err != nil {
				return s.translate(err)
			}
		}
		return nil
	})
}

// Repo returns the repository of scope; ErrRepoNotFound if absent.
func (s *Store) Repo(ctx context.Context, typ, id string) (Repo, error) {
	r := Repo{Type: typ, ID: id}
	var private, created int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT private, created FROM hub_repos WHERE scope = ?`), r.Scope()).Scan(&private, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Repo{}, ErrRepoNotFound
	}
	if err != nil {
		return Repo{}, s.translate(err)
	}
	r.Private, r.Created = private != 0, time.Unix(created, 0).UTC()
	return r, nil
}

// Ref returns the commit a branch or tag points at; ErrRevisionNotFound if absent.
func (s *Store) Ref(ctx context.Context, scope, kind, name string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, s.q(`SELECT commit_id FROM hub_refs WHERE scope = ? AND kind = ? AND name = ?`),
		scope, kind, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrRevisionNotFound
	}
	return id, s.translate(err)
}

// Refs lists the refs of a kind: name → commit.
func (s *Store) Refs(ctx context.Context, scope, kind string) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT name, commit_id FROM hub_refs WHERE scope = ? AND kind = ?`), scope, kind)
	if err != nil {
		return nil, s.translate(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, c string
		if err := rows.Scan(&n, &c); err != nil {
			return nil, s.translate(err)
		}
		out[n] = c
	}
	return out, s.translate(rows.Err())
}

// AddRef creates a branch or tag at commit; ErrExists if it exists.
func (s *Store) AddRef(ctx context.Context, scope, kind, name, commit string) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO hub_refs(scope, kind, name, commit_id) VALUES (?, ?, ?, ?)`),
		scope, kind, name, commit)
	return s.translate(err)
}

// Commit returns a commit of scope; ErrRevisionNotFound if absent.
func (s *Store) Commit(ctx context.Context, scope, id string) (*Commit, error) {
	var body string
	err := s.db.QueryRowContext(ctx, s.q(`SELECT body FROM hub_commits WHERE scope = ? AND id = ?`), scope, id).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrRevisionNotFound
	}
	if err != nil {
		return nil, s.translate(err)
	}
	c := &Commit{ID: id}
	if err := json.Unmarshal([]byte(body), c); err != nil {
		return nil, fmt.Errorf("%w: commit %s: %v", ErrUnavailable, id, err)
	}
	return c, nil
}

// PutCommit stores c and moves branch from c.Parent to c.ID in one transaction. ErrConflict if
// the branch no longer points at c.Parent; ErrRevisionNotFound if the branch is gone.
func (s *Store) PutCommit(ctx context.Context, scope, branch string, c *Commit) error {
	body, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE hub_refs SET commit_id = ? WHERE scope = ? AND kind = 'branch' AND name = ? AND commit_id = ?`),
			c.ID, scope, branch, c.Parent)
		if err != nil {
			return s.translate(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var cur string
			err := tx.QueryRowContext(ctx, s.q(`SELECT commit_id FROM hub_refs WHERE scope = ? AND kind = 'branch' AND name = ?`),
				scope, branch).Scan(&cur)
			if errors.Is(err, sql.ErrNoRows) {
				return ErrRevisionNotFound
			}
			if err != nil {
				return s.translate(err)
			}
			return ErrConflict
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO hub_commits(scope, id, body) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`),
			scope, c.ID, string(body))
		return s.translate(err)
	})
}

// LFSFile is one sha256 → Xet file mapping (PutLFS).
type LFSFile struct {
	SHA256, File string
	Size         int64
}

// PutLFS records, in one transaction, that a shard registered these Xet files under scope at
// time at; a sha256 already mapped keeps its first file and takes the new time (the row roots
// the file for garbage collection for a grace period from then, Roots). A sha256 listed twice
// keeps its first file. On Postgres the rows go as three array parameters of one statement
// (putLFSArrays); on SQLite lfsRowsPerInsert per statement: a shard of 2,000 small files was
// 2,000 statements.
func (s *Store) PutLFS(ctx context.Context, scope string, files []LFSFile, at time.Time) error {
	seen := make(map[string]bool, len(files))
	rows := make([]LFSFile, 0, len(files))
	for _, f := range files {
		if !seen[f.SHA256] { // one statement cannot update a row twice (Postgres)
			seen[f.SHA256] = true
			rows = append(rows, f)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if s.postgres {
		return s.putLFSArrays(ctx, scope, rows, at)
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		args := make([]any, 0, 5*min(len(rows), lfsRowsPerInsert))
		for len(rows) > 0 {
			n := min(len(rows), lfsRowsPerInsert)
			args = args[:0]
			for _, f := range rows[:n] {
				args = append(args, scope, f.SHA256, f.File, f.Size, at.Unix())
			}
			q := `INSERT INTO hub_lfs(scope, sha256, file, size, at) VALUES ` +
				strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?), `, n), `, `) +
				` ON CONFLICT (scope, sha256) DO UPDATE SET at = excluded.at`
			if _, err := tx.ExecContext(ctx, s.q(q), args...); err != nil {
				return s.translate(err)
			}
			rows = rows[n:]
		}
		return nil
	})
}

// lfsRowsPerInsert is how many hub_lfs rows one statement of PutLFS writes (500 parameters).
const lfsRowsPerInsert = 100

// putLFSArrays is PutLFS's write on Postgres: one statement (atomic by itself, so no
// transaction around it) whose rows come from unnest over text[] and bigint[] parameters.
// Twenty 500-parameter statements in a transaction cost the origin ~3 % of its CPU on a
// 2,000-file upload, three times the index's registration, in boxing and encoding each
// parameter (perf/BENCHMARKS.md, 2026-12-02, "Small-file uploads on Postgres + MinIO, third
// pass"); rows must be distinct by sha256 (one statement cannot update a row twice). They are
// written in sha256 order, so two uploads to one scope sharing files lock the shared rows in
// the same order and cannot deadlock.
func (s *Store) putLFSArrays(ctx context.Context, scope string, rows []LFSFile, at time.Time) error {
	shas, files, sizes := make([]string, len(rows)), make([]string, len(rows)), make([]int64, len(rows))
	for i, f := range rows {
		shas[i], files[i], sizes[i] = f.SHA256, f.File, f.Size
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO hub_lfs(scope, sha256, file, size, at)
		SELECT $1, u.sha256, u.file, u.size, $2 FROM unnest($3::text[], $4::text[], $5::bigint[]) AS u(sha256, file, size) ORDER BY u.sha256
		ON CONFLICT (scope, sha256) DO UPDATE SET at = excluded.at`, scope, at.Unix(), shas, files, sizes)
	return s.translate(err)
}

// LFS returns the Xet file and size registered under scope for a sha256; ErrEntryNotFound if
// none.
func (s *Store) LFS(ctx context.Context, scope, sha string) (string, int64, error) {
	var file string
	var size int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT file, size FROM hub_lfs WHERE scope = ? AND sha256 = ?`), scope, sha).Scan(&file, &size)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, ErrEntryNotFound
	}
	return file, size, s.translate(err)
}

// Ping checks the database.
func (s *Store) Ping(ctx context.Context) error { return s.translate(s.db.PingContext(ctx)) }

func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.translate(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return s.translate(tx.Commit())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
