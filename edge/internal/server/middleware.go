package server

import (
	"net/http"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpserver"
)

// handlerFunc is a route handler (httpserver.Handler): it returns an error instead of writing
// one, and the wrapper maps it.
type handlerFunc = httpserver.Handler

// authorize verifies the bearer token with the origin's keys and checks that its access covers
// need.
func (s *Server) authorize(r *http.Request, need auth.Access) (*auth.Claims, error) {
	return httpserver.Verify(s.tokens, r, need)
}

// newWrapper is the edge's httpserver.Wrapper: its error rules and its request metrics,
// answer bytes by protocol included.
func (s *Server) newWrapper() *httpserver.Wrapper {
	return &httpserver.Wrapper{Errors: s.errs, Log: s.log, Authorize: s.authorize,
		Requests: s.m.requests, Duration: s.m.duration, Served: s.m.served}
}

// wrap adds token verification (need "" = none), metrics, byte counting and error mapping.
func (s *Server) wrap(route string, need auth.Access, fn handlerFunc) http.Handler {
	return s.wrapper.Wrap(route, need, fn)
}
