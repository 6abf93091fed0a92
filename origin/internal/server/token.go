package server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/hub"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/wire"
)

// hubToken: GET /api/{models|datasets|spaces}/{namespace}/{name}/xet-{read|write}-token/{rev}
// — the Hub-compatible token route (docs/protocol.md §3.1) that hf_xet's token_refresh_url and
// huggingface.js call. The bearer token must cover the access asked for in scope
// "{type}/{namespace}/{name}" and be a client token (read or write: never edge or admin);
// the answer is a short-lived CAS token for that scope:
// {"casUrl", "exp", "accessToken"}, casUrl being the origin for writes and the edge for reads.
func (s *Server) hubToken(w http.ResponseWriter, r *http.Request) error {
	typ := r.PathValue("type")
	switch typ {
	case "models", "datasets", "spaces":
	default:
		return fmt.Errorf("%w: repository type %q", httpapi.ErrNotFound, typ)
	}
	var need auth.Access
	casURL := s.cfg.EdgeURL
	switch r.PathValue("op") {
	case "xet-read-token":
		need = auth.Read
	case "xet-write-token":
		need, casURL = auth.Write, s.cfg.PublicURL
	default:
		// Every other /api/{type}/{ns}/{name}/{op}/... route is the Hub API's.
		return s.hubAPI(w, r)
	}
	scope := typ + "/" + r.PathValue("namespace") + "/" + r.PathValue("name")
	now := s.now()
	ttl := s.cfg.Auth.CASTokenTTL.D()
	known := false
	if s.hub != nil {
		// A repository of the Hub API, or an hf_ token: the hub decides (public repositories
		// are readable without a token; hf_ tokens carry grants over repository patterns).
		var err error
		if known, err = s.hub.TokenAccess(r, typ, r.PathValue("namespace"), r.PathValue("name"), need == auth.Write); err != nil {
			s.hub.WriteError(w, r, err)
			return nil
		}
		// A CAS token the hub accepted: the minted one still never outlives it.
		if bt := auth.BearerToken(r); known && bt != "" && !strings.HasPrefix(bt, hub.TokenPrefix) {
			if c, err := s.tokens.VerifyRequest(r); err == nil && c.ExpiresAt.Sub(now) < ttl {
				ttl = c.ExpiresAt.Sub(now)
			}
		}
	}
	if !known && (!s.cfg.DevNoAuth || auth.BearerToken(r) != "") {
		c, err := s.tokens.VerifyRequest(r)
		if err != nil {
			return err
		}
		// An edge token reads every scope on the internal API; it must not turn into a client
		// token for any scope here. Only a client's own token is exchanged.
		if !c.Access.Client() {
			return fmt.Errorf("%w: a %s token cannot obtain client tokens", auth.ErrInsufficient, c.Access)
		}
		if err := c.Allow(scope, need); err != nil {
			return err
		}
		// Never outlive the credential presented.
		if rest := c.ExpiresAt.Sub(now); rest < ttl {
			ttl = rest
		}
	}
	if ttl < time.Second {
		return fmt.Errorf("%w: presented token expires now", auth.ErrExpired)
	}
	tok, exp, err := s.keys.Signing.Mint(scope, need, now, ttl)
	if err != nil {
		return err
	}
	if need == auth.Read {
		casURL = s.readURL(r, scope) // edges.go: the caller's nearest healthy edge
	}
	// huggingface_hub reads the answer from these headers, hf_xet and huggingface.js from the
	// JSON body.
	w.Header().Set("X-Xet-Cas-Url", casURL)
	w.Header().Set("X-Xet-Access-Token", tok)
	w.Header().Set("X-Xet-Token-Expiration", strconv.FormatInt(exp.Unix(), 10))
	httpapi.WriteJSON(w, http.StatusOK, wire.Token{CasURL: casURL, Exp: exp.Unix(), AccessToken: tok})
	return nil
}

// hubAPI hands /api/... to the Hub API (it writes its own answers, in the Hub's error shape);
// 404 without one.
func (s *Server) hubAPI(w http.ResponseWriter, r *http.Request) error {
	if s.hub == nil {
		return fmt.Errorf("%w: %s", httpapi.ErrNotFound, r.URL.Path)
	}
	s.hub.ServeAPI(w, r)
	return nil
}
