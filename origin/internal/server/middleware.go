package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpserver"
)

// handlerFunc is a route handler (httpserver.Handler): it returns an error instead of writing
// one, and the wrapper maps it.
type handlerFunc = httpserver.Handler

// DevScope is the scope of requests without a token when auth is disabled (--dev-no-auth).
const DevScope = "dev"

// claims returns the verified claims of the request (set by wrap for routes that need a token).
func claims(ctx context.Context) *auth.Claims { return httpserver.Claims(ctx) }

// newWrapper is the origin's httpserver.Wrapper: its authorize, its error rules and its
// request metrics.
func (s *Server) newWrapper() *httpserver.Wrapper {
	return &httpserver.Wrapper{Errors: s.errs, Log: s.log, Authorize: s.authorize,
		Requests: s.m.requests, Duration: s.m.duration}
}

// wrap adds authentication (need "" = none), metrics and error mapping to fn.
func (s *Server) wrap(route string, need auth.Access, fn handlerFunc) http.Handler {
	return s.wrapper.Wrap(route, need, fn)
}

// authorize verifies the bearer token and checks that its access covers need (never "").
// Scope checks are the handlers' (a file is looked up in the token's scope). With auth
// disabled, a request without a token acts with every access in DevScope; one with a token is
// still verified.
func (s *Server) authorize(r *http.Request, need auth.Access) (*auth.Claims, error) {
	if s.cfg.DevNoAuth && auth.BearerToken(r) == "" {
		c := &auth.Claims{Scope: DevScope, Access: auth.Write}
		if need == auth.Edge || need == auth.Admin {
			c.Access = need
		}
		if !c.Access.Covers(need) {
			return nil, fmt.Errorf("%w: token grants %s, route needs %s", auth.ErrInsufficient, c.Access, need)
		}
		return c, nil
	}
	return httpserver.Verify(s.tokens, r, need)
}
