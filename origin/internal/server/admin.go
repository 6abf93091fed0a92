package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httpserver"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Hider revokes visibility. Pass the backend's index (its caches included), so the origin's
// own cached visibility answers drop when Hide returns.
type Hider interface {
	// Hide revokes the visibility of files in scope (every file of the scope when files is
	// empty) and records one event for the edges.
	Hide(ctx context.Context, scope string, files []hash.Hash) error
}

// maxHideBody bounds the body of POST /admin/v1/hide (about 15,000 file hashes).
const maxHideBody = 1 << 20

// hideRequest is the body of POST /admin/v1/hide.
type hideRequest struct {
	Scope string      `json:"scope"`
	Files []hash.Hash `json:"files"` // absent or empty: every file of the scope
}

// hideAnswer is the answer of POST /admin/v1/hide.
type hideAnswer struct {
	Scope  string `json:"scope"`
	Hidden int    `json:"hidden"` // distinct files named; 0 with all = true
	All    bool   `json:"all"`    // the whole scope was hidden
}

// Admin is the admin listener's handler: GET /metrics from g for anyone who reaches the
// listener (scrapers), and, for a bearer token of access admin only (401 without one, 403 for
// any other token), /debug/pprof/ and POST /admin/v1/hide, which revokes visibility through h.
// The listener should still be private (loopback, or a network policy that admits only the
// monitoring namespace): the token guards against whatever else reaches it. See
// docs/security.md.
func (s *Server) Admin(g prometheus.Gatherer, h Hider) http.Handler {
	return httpserver.Admin(g, s.wrap, func(m *http.ServeMux) {
		m.Handle("POST /admin/v1/hide", s.wrap("POST /admin/v1/hide", auth.Admin,
			func(w http.ResponseWriter, r *http.Request) error { return s.adminHide(w, r, h) }))
		s.adminLifecycleRoutes(m)
	})
}

// adminHide: POST /admin/v1/hide {"scope":"…","files":["<hash>",…]} → {"scope":…,"hidden":N,
// "all":bool}. Edges drop the visibility when they see the event (within their long poll).
func (s *Server) adminHide(w http.ResponseWriter, r *http.Request, h Hider) error {
	body, err := httpapi.ReadBody(w, r, httpapi.BodyOptions{Limit: maxHideBody})
	if err != nil {
		return err
	}
	req, err := parseHide(body)
	if err != nil {
		return err
	}
	if err := h.Hide(r.Context(), req.Scope, req.Files); err != nil {
		if errors.Is(err, index.ErrInvalid) {
			return fmt.Errorf("%w: %w", httpapi.ErrBadRequest, err)
		}
		return err
	}
	s.log.InfoContext(r.Context(), "visibility revoked", "scope", req.Scope, "files", len(req.Files),
		"request_id", httpapi.RequestID(r.Context()))
	httpapi.WriteJSON(w, http.StatusOK, hideAnswer{Scope: req.Scope, Hidden: len(req.Files), All: len(req.Files) == 0})
	return nil
}

// parseHide decodes and validates a hide request; duplicate files are dropped. Errors wrap
// httpapi.ErrBadRequest.
func parseHide(body []byte) (*hideRequest, error) {
	var req hideRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("%w: hide body: %v", httpapi.ErrBadRequest, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: hide body: data after the JSON object", httpapi.ErrBadRequest)
	}
	if err := index.CheckScope(req.Scope); err != nil {
		return nil, fmt.Errorf("%w: %w", httpapi.ErrBadRequest, err)
	}
	seen := make(map[hash.Hash]struct{}, len(req.Files))
	files := req.Files[:0]
	for _, f := range req.Files {
		if _, dup := seen[f]; !dup {
			seen[f] = struct{}{}
			files = append(files, f)
		}
	}
	req.Files = files
	return &req, nil
}
