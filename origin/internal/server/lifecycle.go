package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/lifecycle"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Deletion and usage routes (docs/protocol.md §16.5, docs/decisions.md "Data lifecycle").
//
//	DELETE /v1/files/{file}   write token: delete the file from the token's scope
//	DELETE /v1/scope          write token: delete every file of the token's scope
//	POST   /admin/v1/delete   admin token: {"scope","files"} (no files: the whole scope)
//	GET    /admin/v1/usage    admin token: usage of every scope and totals (?scope=S: one)
//
// A deletion removes visibility rows and appends one event in one transaction (like a hide):
// the file is 404 here at once, at other replicas within their visibility TTL, at the edges
// as soon as they see the event; transfer URLs issued for it in that scope are refused from
// the same moment (transfer.go checks visibility). Its bytes stay until garbage collection
// finds nothing references them. Nothing visible to delete: 404, and nothing recorded.

// deleteAnswer is the answer of the deletion routes.
type deleteAnswer struct {
	Scope   string `json:"scope"`
	Deleted int    `json:"deleted"` // (scope, file) visibility rows removed
	All     bool   `json:"all"`     // the whole scope was deleted
}

func (s *Server) lifecycleRoutes(h func(pattern string, need auth.Access, fn handlerFunc)) {
	h("DELETE /v1/files/{file}", auth.Write, s.deleteFile)
	h("DELETE /v1/scope", auth.Write, s.deleteScope)
}

func (s *Server) adminLifecycleRoutes(m *http.ServeMux) {
	m.Handle("POST /admin/v1/delete", s.wrap("POST /admin/v1/delete", auth.Admin, s.adminDelete))
	m.Handle("GET /admin/v1/usage", s.wrap("GET /admin/v1/usage", auth.Admin, s.adminUsage))
}

// deleteFile: DELETE /v1/files/{file}.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error {
	h, err := pathHash(r, "file")
	if err != nil {
		return err
	}
	return s.delete(w, r, claims(r.Context()).Scope, []hash.Hash{h})
}

// deleteScope: DELETE /v1/scope.
func (s *Server) deleteScope(w http.ResponseWriter, r *http.Request) error {
	return s.delete(w, r, claims(r.Context()).Scope, nil)
}

// adminDelete: POST /admin/v1/delete, the body of POST /admin/v1/hide.
func (s *Server) adminDelete(w http.ResponseWriter, r *http.Request) error {
	body, err := httpapi.ReadBody(w, r, httpapi.BodyOptions{Limit: maxHideBody})
	if err != nil {
		return err
	}
	req, err := parseHide(body)
	if err != nil {
		return err
	}
	return s.delete(w, r, req.Scope, req.Files)
}

// ErrHubRepository: a CAS-level delete in the scope of a Hub repository (409). Its content is
// its commits: dropping the scope's visibility under them would break hf_xet downloads of every
// revision (docs/decisions.md, "CAS deletes of Hub repositories").
var ErrHubRepository = errors.New("the scope is a Hub repository")

// HubRepositoryError is the refusal of a CAS-level delete in scope, naming the routes to use.
func HubRepositoryError(scope string) error {
	return fmt.Errorf("%w: %q is a Hub repository: delete the repository with DELETE /api/repos/delete, "+
		"or its files with a commit (deletedFile); a CAS delete under its commits would break them", ErrHubRepository, scope)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, scope string, files []hash.Hash) error {
	if s.hub != nil {
		switch repo, err := s.hub.IsRepository(r.Context(), scope); {
		case err != nil:
			return fmt.Errorf("%w: %w", httpapi.ErrUnavailable, err)
		case repo:
			return HubRepositoryError(scope)
		}
	}
	n, err := s.idx.Delete(r.Context(), scope, files)
	if err != nil {
		if errors.Is(err, index.ErrInvalid) {
			return fmt.Errorf("%w: %w", httpapi.ErrBadRequest, err)
		}
		return err
	}
	s.log.InfoContext(r.Context(), "deleted", "scope", scope, "files", len(files), "removed", n,
		"request_id", httpapi.RequestID(r.Context()))
	httpapi.WriteJSON(w, http.StatusOK, deleteAnswer{Scope: scope, Deleted: n, All: len(files) == 0})
	return nil
}

// adminUsage: GET /admin/v1/usage[?scope=S] → lifecycle.Usage (with ?scope, only that scope
// in "scopes", a zero entry when it holds no visible file; the totals are the store's).
func (s *Server) adminUsage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	scope, one := q.Get("scope"), q.Has("scope")
	if one {
		if err := index.CheckScope(scope); err != nil {
			return fmt.Errorf("%w: %w", httpapi.ErrBadRequest, err)
		}
	}
	u, err := lifecycle.Compute(r.Context(), s.idx)
	if err != nil {
		return err
	}
	if one {
		u.Scopes = []lifecycle.ScopeUsage{u.Scope(scope)}
	}
	httpapi.WriteJSON(w, http.StatusOK, u)
	return nil
}
