// Package httpserver is the HTTP server skeleton both tiers share: error-returning route
// handlers with token checks, request metrics and error mapping (Wrapper), the response
// recorder, the verified claims in the request context, Alt-Svc, the admin listener's handler
// (metrics, and pprof behind an admin token) and the serve/drain lifecycle of a set of
// listeners. The tiers' server packages keep only their routes, their own middleware and the
// wiring.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// Handler is a route handler. It returns an error instead of writing one; Wrapper maps it.
// Once a handler has started its answer, a returned error is only logged and counted.
type Handler func(w http.ResponseWriter, r *http.Request) error

// Authorizer verifies a request for a route that needs access need (never ""): it returns the
// request's claims, or an error for httpapi.Errors (auth's sentinels map to 401 and 403).
type Authorizer func(r *http.Request, need auth.Access) (*auth.Claims, error)

// Verifier verifies a request's bearer token (*auth.CachingVerifier).
type Verifier interface {
	VerifyRequest(r *http.Request) (*auth.Claims, error)
}

// Verify verifies r's bearer token with v and checks that its access covers need.
func Verify(v Verifier, r *http.Request, need auth.Access) (*auth.Claims, error) {
	c, err := v.VerifyRequest(r)
	if err != nil {
		return nil, err
	}
	if !c.Access.Covers(need) {
		return nil, fmt.Errorf("%w: token grants %s, route needs %s", auth.ErrInsufficient, c.Access, need)
	}
	return c, nil
}

type claimsKey struct{}

// Claims returns the verified claims of the request (set by Wrapper.Wrap for routes that need
// a token), or nil.
func Claims(ctx context.Context) *auth.Claims {
	c, _ := ctx.Value(claimsKey{}).(*auth.Claims)
	return c
}

// WithClaims returns ctx carrying c (what Claims returns).
func WithClaims(ctx context.Context, c *auth.Claims) context.Context {
	return context.WithValue(ctx, claimsKey{}, c)
}

// Wrapper turns Handlers into http.Handlers. Errors, Log and Authorize are required; a nil
// metric is not recorded.
type Wrapper struct {
	Errors    *httpapi.Errors
	Log       *slog.Logger
	Authorize Authorizer
	// Requests counts requests by route and status code, Duration observes their handling time
	// by route (until the handler returns) and Served counts answer body bytes by protocol (h1,
	// h2, h3).
	Requests *prometheus.CounterVec
	Duration *prometheus.HistogramVec
	Served   *prometheus.CounterVec
}

// Wrap adds token verification (need "" = none; the claims go into the request context),
// metrics, byte counting and error mapping to fn. route is the metrics label and log field.
func (wr *Wrapper) Wrap(route string, need auth.Access, fn Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := NewRecorder(w)
		var err error
		if need != "" {
			var c *auth.Claims
			if c, err = wr.Authorize(r, need); err == nil {
				r = r.WithContext(WithClaims(r.Context(), c))
			}
		}
		if err == nil {
			err = fn(rec, r)
			rec.Release()
		}
		if err != nil && rec.Status() == 0 {
			wr.Errors.Write(rec, r, err)
		} else if err != nil && !errors.Is(err, context.Canceled) {
			wr.Log.WarnContext(r.Context(), "request failed after the answer started", "route", route,
				"request_id", httpapi.RequestID(r.Context()), "err", err)
		}
		status := rec.Status()
		if status == 0 {
			status = http.StatusOK
		}
		if wr.Requests != nil {
			wr.Requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
		}
		if wr.Duration != nil {
			wr.Duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}
		if wr.Served != nil {
			wr.Served.WithLabelValues(Proto(r)).Add(float64(rec.Bytes()))
		}
	})
}

// Proto is the metrics label of r's protocol: h1, h2 or h3.
func Proto(r *http.Request) string {
	switch r.ProtoMajor {
	case 3:
		return "h3"
	case 2:
		return "h2"
	}
	return "h1"
}

// AltSvc wraps a TCP listener's handler so every answer advertises HTTP/3 on udpPort.
func AltSvc(h http.Handler, udpPort int) http.Handler {
	v := `h3=":` + strconv.Itoa(udpPort) + `"; ma=86400`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", v)
		h.ServeHTTP(w, r)
	})
}
