package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Routes added after the first version (docs/hub.md): deleting branches and tags, and the
// commit history of a revision (HfApi.delete_branch, delete_tag, list_repo_commits).

// CommitsPageSize is the length of a page of the commit history.
const CommitsPageSize = 100

// serveHistory answers the routes of this file; handled is false for any other request.
func (h *Service) serveHistory(w http.ResponseWriter, r *http.Request, p *Principal, typ, id string, rest []string) (handled bool, err error) {
	if len(rest) != 2 {
		return false, nil
	}
	op, arg := rest[0], rest[1]
	switch {
	case r.Method == http.MethodDelete && (op == "branch" || op == "tag"):
		if err := h.DeleteRef(r.Context(), p, typ, id, op, arg); err != nil {
			return true, err
		}
		writeJSON(w, http.StatusOK, map[string]any{})
		return true, nil
	case r.Method == http.MethodGet && op == "commits":
		return true, h.apiCommits(w, r, p, typ, id, arg)
	}
	return false, nil
}

// DeleteRef deletes a branch or tag (write access needed). The default branch "main" cannot be
// deleted. The commits stay: they are reachable by id and remain garbage-collection roots.
func (h *Service) DeleteRef(ctx context.Context, p *Principal, typ, id, kind, name string) error {
	r, err := h.writableRepo(ctx, p, typ, id)
	if err != nil {
		return err
	}
	if err := CheckRefName(name); err != nil {
		return err
	}
	if kind == "branch" && name == "main" {
		return fmt.Errorf("%w: the default branch %q cannot be deleted", ErrForbidden, name)
	}
	if err := h.store.DeleteRef(ctx, r.Scope(), kind, name); err != nil {
		return fmt.Errorf("%w: %s %q", err, kind, name)
	}
	return nil
}

// apiCommits lists the commits reachable from rev, newest first, following parents, in pages of
// CommitsPageSize; the next page is a Link rel="next" with cursor = the next commit's id.
func (h *Service) apiCommits(w http.ResponseWriter, r *http.Request, p *Principal, typ, id, rev string) error {
	repo, err := h.visibleRepo(r.Context(), p, typ, id)
	if err != nil {
		return err
	}
	c, err := h.resolve(r.Context(), repo, rev)
	if err != nil {
		return err
	}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		if !IsCommitID(cur) {
			return fmt.Errorf("%w: cursor %q is not a commit id", ErrInvalid, cur)
		}
		// The cursor must be a commit of this repository: it only continues a listing.
		if c, err = h.store.Commit(r.Context(), repo.Scope(), cur); err != nil {
			return fmt.Errorf("%w: cursor %q", err, cur)
		}
	}
	out := make([]map[string]any, 0, CommitsPageSize)
	for c != nil && len(out) < CommitsPageSize {
		title, body := splitMessage(c.Message)
		authors := []map[string]any{}
		if c.Author != "" {
			authors = append(authors, map[string]any{"user": c.Author})
		}
		out = append(out, map[string]any{"id": c.ID, "title": title, "message": body, "authors": authors,
			"date": c.Time().Format(time.RFC3339)})
		if c.Parent == "" {
			c = nil
			break
		}
		parent, err := h.store.Commit(r.Context(), repo.Scope(), c.Parent)
		if err != nil {
			if errors.Is(err, ErrRevisionNotFound) {
				return fmt.Errorf("%w: commit %s names a missing parent %s", ErrUnavailable, c.ID, c.Parent)
			}
			return err
		}
		c = parent
	}
	if c != nil {
		next := *r.URL
		q := next.Query()
		q.Set("cursor", c.ID)
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf("<%s%s>; rel=\"next\"", h.public, next.RequestURI()))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// splitMessage splits a commit message into its title (the summary) and the rest (the
// description), as Commit joined them.
func splitMessage(m string) (title, body string) {
	for i := 0; i+1 < len(m); i++ {
		if m[i] == '\n' && m[i+1] == '\n' {
			return m[:i], m[i+2:]
		}
	}
	return m, ""
}

// DeleteRef deletes a branch or tag; ErrRevisionNotFound if absent.
func (s *Store) DeleteRef(ctx context.Context, scope, kind, name string) error {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM hub_refs WHERE scope = ? AND kind = ? AND name = ?`), scope, kind, name)
	if err != nil {
		return s.translate(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.translate(err)
	} else if n == 0 {
		return ErrRevisionNotFound
	}
	return nil
}
