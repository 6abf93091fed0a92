package originapi

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// Failover is a round tripper for an edge configured with several origin URLs (replicas of one
// origin behind no common balancer; docs/edge.md "Several origins"). Callers address the first
// URL (the Client's base, the fallback proxy's target); Failover sends each such request to the
// origin in use, and when that origin does not answer at all — the connection is refused, reset
// or times out before a response — it moves to the next origin and resends the request there,
// if the request can be resent (no body, or one it can get again). It stays on an origin that
// answers; any HTTP answer, even 5xx, counts as an answer. Requests to other hosts pass through.
type Failover struct {
	next    http.RoundTripper
	origins []*url.URL
	cur     atomic.Int64 // index into origins
	// Moves counts moves to another origin.
	Moves atomic.Int64
}

// ParseOrigins splits a comma-separated list of origin base URLs, each http(s) with a host.
func ParseOrigins(list string) ([]*url.URL, error) {
	var out []*url.URL
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("origin %q is not an http(s) URL", s)
		}
		out = append(out, u)
	}
	return out, nil
}

// NewFailover sends the requests addressed to origins[0] to the origin in use, through next.
func NewFailover(next http.RoundTripper, origins []*url.URL) *Failover {
	return &Failover{next: next, origins: origins}
}

// Current is the origin in use.
func (f *Failover) Current() *url.URL { return f.origins[f.cur.Load()] }

// CloseIdleConnections closes the idle connections of the wrapped transport.
func (f *Failover) CloseIdleConnections() {
	if c, ok := f.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (f *Failover) RoundTrip(r *http.Request) (*http.Response, error) {
	first := f.origins[0]
	if len(f.origins) == 1 || r.URL.Scheme != first.Scheme || r.URL.Host != first.Host {
		return f.next.RoundTrip(r)
	}
	var err error
	for tries := 0; tries < len(f.origins); tries++ {
		i := f.cur.Load()
		o := f.origins[i]
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host = o.Scheme, o.Host
		if out.Host == "" || out.Host == first.Host {
			out.Host = o.Host
		}
		if tries > 0 && r.Body != nil && r.Body != http.NoBody {
			if r.GetBody == nil {
				return nil, err // the body went with the failed attempt
			}
			if out.Body, err = r.GetBody(); err != nil {
				return nil, err
			}
		}
		var resp *http.Response
		resp, err = f.next.RoundTrip(out)
		if err == nil || !noAnswer(err) || r.Context().Err() != nil {
			return resp, err
		}
		// Move on from i, unless another request already did.
		if f.cur.CompareAndSwap(i, (i+1)%int64(len(f.origins))) {
			f.Moves.Add(1)
		}
	}
	return nil, err
}

// noAnswer reports whether err means the origin did not answer (rather than an answer that
// went wrong later, which the caller sees as a body error).
func noAnswer(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "EOF")
}
