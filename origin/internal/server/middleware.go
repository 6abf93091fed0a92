package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// handlerFunc is a route handler. It returns an error instead of writing one; the wrapper maps
// it. A handler that already started its answer logs nothing and returns the error only for the
// record (the wrapper then just counts it).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// DevScope is the scope of requests without a token when auth is disabled (--dev-no-auth).
const DevScope = "dev"

type claimsKey struct{}

// claims returns the verified claims of the request (set by wrap for routes that need a token).
func claims(ctx context.Context) *auth.Claims {
	c, _ := ctx.Value(claimsKey{}).(*auth.Claims)
	return c
}

// wrap adds authentication (need "" = none), metrics and error mapping to fn.
func (s *Server) wrap(route string, need auth.Access, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		r, err := s.authorize(r, need)
		if err == nil {
			err = fn(rec, r)
		}
		if err != nil && rec.status == 0 {
			s.errs.Write(rec, r, err)
		} else if err != nil && !errors.Is(err, context.Canceled) {
			s.log.WarnContext(r.Context(), "request failed after the answer started", "route", route,
				"request_id", httpapi.RequestID(r.Context()), "err", err)
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		s.m.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
		s.m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// authorize verifies the bearer token when need is not "" and checks that its access covers
// need. The claims are stored in the request context. Scope checks are the handlers' (a file is
// looked up in the token's scope). With auth disabled, a request without a token acts with
// every access in DevScope; one with a token is still verified.
func (s *Server) authorize(r *http.Request, need auth.Access) (*http.Request, error) {
	if need == "" {
		return r, nil
	}
	var c *auth.Claims
	if s.cfg.DevNoAuth && auth.BearerToken(r) == "" {
		c = &auth.Claims{Scope: DevScope, Access: auth.Write}
		if need == auth.Edge || need == auth.Admin {
			c.Access = need
		}
	} else {
		var err error
		if c, err = s.tokens.VerifyRequest(r); err != nil {
			return r, err
		}
	}
	if !c.Access.Covers(need) {
		return r, fmt.Errorf("%w: token grants %s, route needs %s", auth.ErrInsufficient, c.Access, need)
	}
	return r.WithContext(context.WithValue(r.Context(), claimsKey{}, c)), nil
}

// statusRecorder remembers the status written. Unwrap lets http.ResponseController reach the
// connection (read deadlines of the pace floor, flushes of the NDJSON stream).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ReadFrom keeps the connection's sendfile path for io.Copy of stored objects.
func (w *statusRecorder) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return io.Copy(w.ResponseWriter, r)
}
