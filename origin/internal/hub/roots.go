package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// rootsPage is how many rows one query of Roots reads (commits hold whole trees: keep pages
// small enough to hold in memory).
const rootsPage = 200

// Roots is the hub's source of garbage-collection roots (lifecycle.Roots, docs/hub.md,
// "Garbage collection"): every Xet file named by any commit of any existing repository (all
// commits, not only branch heads: every revision stays downloadable), and every Xet file a
// shard registered in a repository's scope (hub_lfs) within the last LFSWindow, so an upload
// whose commit is not posted yet survives at least that long without a commit.
type Roots struct {
	Store *Store
	// LFSWindow is how long an uncommitted upload stays a root; the origin passes the GC grace
	// period. <= 0: uncommitted uploads are no roots.
	LFSWindow time.Duration
	Now       func() time.Time // nil: time.Now
}

// Files implements lifecycle.Roots: it pages through hub_commits and the recent hub_lfs rows
// in primary-key order (each page one range query on the key, rootsPage rows) and calls fn for each Xet file, a file
// named by several commits once per commit.
func (r *Roots) Files(ctx context.Context, fn func(file hash.Hash) error) error {
	s := r.Store
	var scope, id string
	for {
		rows, err := s.db.QueryContext(ctx, s.q(`SELECT scope, id, body FROM hub_commits WHERE (scope, id) > (?, ?)
ORDER BY scope, id LIMIT ?`), scope, id, rootsPage)
		if err != nil {
			return fmt.Errorf("hub roots: commits: %w", s.translate(err))
		}
		var bodies []string
		var n int
		for rows.Next() {
			var b string
			if err := rows.Scan(&scope, &id, &b); err != nil {
				rows.Close()
				return fmt.Errorf("hub roots: commits: %w", s.translate(err))
			}
			bodies = append(bodies, b)
			n++
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("hub roots: commits: %w", s.translate(err))
		}
		for _, b := range bodies {
			var c Commit
			if err := json.Unmarshal([]byte(b), &c); err != nil {
				return fmt.Errorf("hub roots: commit body: %w", err)
			}
			for _, e := range c.Tree {
				if e.Xet == "" {
					continue
				}
				h, err := hash.Parse(e.Xet)
				if err != nil {
					return fmt.Errorf("hub roots: commit names Xet file %q: %w", e.Xet, err)
				}
				if err := fn(h); err != nil {
					return err
				}
			}
		}
		if n < rootsPage {
			break
		}
	}
	if r.LFSWindow <= 0 {
		return nil
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	since := now().Add(-r.LFSWindow).Unix()
	var sha string
	scope = ""
	for {
		rows, err := s.db.QueryContext(ctx, s.q(`SELECT scope, sha256, file FROM hub_lfs WHERE (scope, sha256) > (?, ?) AND at >= ?
ORDER BY scope, sha256 LIMIT ?`), scope, sha, since, rootsPage)
		if err != nil {
			return fmt.Errorf("hub roots: uploads: %w", s.translate(err))
		}
		var files []string
		for rows.Next() {
			var f string
			if err := rows.Scan(&scope, &sha, &f); err != nil {
				rows.Close()
				return fmt.Errorf("hub roots: uploads: %w", s.translate(err))
			}
			files = append(files, f)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("hub roots: uploads: %w", s.translate(err))
		}
		for _, f := range files {
			h, err := hash.Parse(f)
			if err != nil {
				return fmt.Errorf("hub roots: upload of Xet file %q: %w", f, err)
			}
			if err := fn(h); err != nil {
				return err
			}
		}
		if len(files) < rootsPage {
			return nil
		}
	}
}
