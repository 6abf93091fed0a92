package hub

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// Garbage collection of inline-file blobs (docs/hub.md, "Garbage collection"; docs/decisions.md,
// "Hub blobs"). A blob (BlobKey) is referenced while a commit of an existing repository names
// its sha256 with no Xet hash; a repository's commits are deleted with it. A blob no commit
// names, written before the grace period began, is moved to the trash (TrashKey: a copy, then
// the blob deleted); a later run deletes a trashed copy once it is older than the grace period,
// or puts the blob back when a commit names it again. So a blob is never lost: a commit that
// reuses a blob checks that it is stored and writes it otherwise (Service.Commit), and one that
// checked just before the blob went to the trash is repaired from the trash by the same run's
// second walk of the commits or, at the latest, by the next run.

// BlobObjects is what blob collection needs of the object store.
type BlobObjects interface {
	List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	Delete(ctx context.Context, key string) error
}

// TrashKey is the key of the copy of a blob being collected.
func TrashKey(sha string) string { return "hub/trash/" + sha }

// BlobCollector collects the blobs no commit names; it implements lifecycle.ObjectCollector
// (the origin passes it to every collection, which runs it under the collector's lock).
type BlobCollector struct {
	Store   *Store
	Objects BlobObjects
	Log     *slog.Logger // nil: discard
}

// maxBlobCopy bounds a blob the collector copies (inline files are far smaller: InlineMax).
const maxBlobCopy = 1 << 30

// CollectObjects trashes the blobs no commit names written before cutoff and deletes the trashed
// copies older than cutoff (dry run: counts the blobs it would trash). It returns the objects
// deleted for good and their bytes (dry run: the blobs it would trash).
func (c *BlobCollector) CollectObjects(ctx context.Context, cutoff time.Time, dryRun bool) (int64, uint64, error) {
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	refs, err := c.Store.BlobRefs(ctx)
	if err != nil {
		return 0, 0, err
	}
	var n int64
	var bytesFreed uint64
	// The trash of earlier runs: put back what a commit names again, delete what is old enough.
	var trash []objstore.ObjectInfo
	if err := c.Objects.List(ctx, TrashKey(""), func(o objstore.ObjectInfo) error {
		trash = append(trash, o)
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("hub blobs: list trash: %w", err)
	}
	if !dryRun {
		for _, o := range trash {
			sha := strings.TrimPrefix(o.Key, TrashKey(""))
			switch {
			case refs[sha]:
				if err := c.restore(ctx, sha); err != nil {
					return n, bytesFreed, err
				}
				log.WarnContext(ctx, "hub blob named by a commit again: restored from the trash", "sha256", sha)
			case o.ModTime.Before(cutoff):
				if err := c.Objects.Delete(ctx, o.Key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
					return n, bytesFreed, fmt.Errorf("hub blobs: delete %s: %w", o.Key, err)
				}
				n++
				bytesFreed += uint64(o.Size)
			}
		}
	}
	// The blobs no commit names, old enough.
	var cands []objstore.ObjectInfo
	if err := c.Objects.List(ctx, BlobKey(""), func(o objstore.ObjectInfo) error {
		sha := strings.TrimPrefix(o.Key, BlobKey(""))
		if !isSHA256(sha) || refs[sha] || !o.ModTime.Before(cutoff) {
			return nil
		}
		cands = append(cands, o)
		return nil
	}); err != nil {
		return n, bytesFreed, fmt.Errorf("hub blobs: list: %w", err)
	}
	if dryRun {
		for _, o := range cands {
			n++
			bytesFreed += uint64(o.Size)
		}
		return n, bytesFreed, nil
	}
	var trashed []string
	for _, o := range cands {
		if o.Size > maxBlobCopy {
			continue
		}
		sha := strings.TrimPrefix(o.Key, BlobKey(""))
		if err := c.trash(ctx, o.Key, sha); err != nil {
			return n, bytesFreed, err
		}
		trashed = append(trashed, sha)
	}
	if len(trashed) == 0 {
		return n, bytesFreed, nil
	}
	// A commit that checked a blob just before it went to the trash: put it back now.
	if refs, err = c.Store.BlobRefs(ctx); err != nil {
		return n, bytesFreed, err
	}
	for _, sha := range trashed {
		if refs[sha] {
			if err := c.restore(ctx, sha); err != nil {
				return n, bytesFreed, err
			}
			log.WarnContext(ctx, "hub blob named by a commit during its collection: restored", "sha256", sha)
		}
	}
	return n, bytesFreed, nil
}

// trash copies the blob to its trash key, then deletes it.
func (c *BlobCollector) trash(ctx context.Context, key, sha string) error {
	rc, size, err := c.Objects.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hub blobs: read %s: %w", key, err)
	}
	body, err := io.ReadAll(io.LimitReader(rc, maxBlobCopy+1))
	rc.Close()
	if err == nil && int64(len(body)) != size {
		err = fmt.Errorf("read %d bytes of %d", len(body), size)
	}
	if err != nil {
		return fmt.Errorf("hub blobs: read %s: %w", key, err)
	}
	if err := c.Objects.Put(ctx, TrashKey(sha), bytes.NewReader(body), size); err != nil {
		return fmt.Errorf("hub blobs: trash %s: %w", key, err)
	}
	if err := c.Objects.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("hub blobs: delete %s: %w", key, err)
	}
	return nil
}

// restore puts the trashed copy of sha back under its blob key, then deletes the copy.
func (c *BlobCollector) restore(ctx context.Context, sha string) error {
	rc, size, err := c.Objects.Get(ctx, TrashKey(sha))
	if err != nil {
		return fmt.Errorf("hub blobs: read %s: %w", TrashKey(sha), err)
	}
	body, err := io.ReadAll(io.LimitReader(rc, maxBlobCopy+1))
	rc.Close()
	if err == nil && int64(len(body)) != size {
		err = fmt.Errorf("read %d bytes of %d", len(body), size)
	}
	if err != nil {
		return fmt.Errorf("hub blobs: read %s: %w", TrashKey(sha), err)
	}
	if err := c.Objects.Put(ctx, BlobKey(sha), bytes.NewReader(body), size); err != nil {
		return fmt.Errorf("hub blobs: restore %s: %w", BlobKey(sha), err)
	}
	if err := c.Objects.Delete(ctx, TrashKey(sha)); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("hub blobs: delete %s: %w", TrashKey(sha), err)
	}
	return nil
}

func isSHA256(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// BlobRefs returns the sha256 of every inline file a commit of an existing repository names (a
// repository's commits go with it), paging through hub_commits in key order, rootsPage rows a
// query.
func (s *Store) BlobRefs(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	var scope, id string
	for {
		rows, err := s.db.QueryContext(ctx, s.q(`SELECT scope, id, body FROM hub_commits WHERE (scope, id) > (?, ?)
ORDER BY scope, id LIMIT ?`), scope, id, rootsPage)
		if err != nil {
			return nil, fmt.Errorf("hub blob refs: %w", s.translate(err))
		}
		var bodies []string
		for rows.Next() {
			var b string
			if err := rows.Scan(&scope, &id, &b); err != nil {
				rows.Close()
				return nil, fmt.Errorf("hub blob refs: %w", s.translate(err))
			}
			bodies = append(bodies, b)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("hub blob refs: %w", s.translate(err))
		}
		for _, b := range bodies {
			var c Commit
			if err := json.Unmarshal([]byte(b), &c); err != nil {
				return nil, fmt.Errorf("hub blob refs: commit body: %w", err)
			}
			for _, e := range c.Tree {
				if e.Xet == "" {
					out[e.SHA256] = true
				}
			}
		}
		if len(bodies) < rootsPage {
			return out, nil
		}
	}
}

// IsRepository reports whether scope is the scope of an existing repository. The origin refuses
// CAS-level deletes there (docs/decisions.md, "CAS deletes of Hub repositories"): a
// repository's content is its commits.
func (s *Store) IsRepository(ctx context.Context, scope string) (bool, error) {
	var one int
	err := s.db.QueryRowContext(ctx, s.q(`SELECT 1 FROM hub_repos WHERE scope = ?`), scope).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("hub: repository of scope %q: %w", scope, s.translate(err))
	}
	return true, nil
}

// IsRepository is Store.IsRepository on the service's store.
func (h *Service) IsRepository(ctx context.Context, scope string) (bool, error) {
	return h.store.IsRepository(ctx, scope)
}
