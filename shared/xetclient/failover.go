package xetclient

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"
)

// Failover between edges (docs/architecture.md §7, docs/protocol.md §10): a Client built with a
// TokenURL and no Endpoint takes its CAS base URL from the token route's casUrl, the edge the
// origin chose for it. When that edge stops answering — a refused or reset connection, a
// timeout, a body cut off — the Client asks the token route again (at most once per
// renewInterval), and the next attempt of the failed request goes to the casUrl it then names;
// transfer URLs of the dead edge are replaced by re-requesting the block's reconstruction from
// the new one (only URLs may change). Bytes already fetched are kept: a download continues,
// it does not restart. While the route still names the dead edge (the origin notices a dead
// edge after its edge timeout, 6 s by default), it is asked again every second for up to
// failoverWait.

// renewInterval bounds how often a dead casUrl makes the token route be asked again, and
// failoverWait how long it is asked while it still names the dead server (then the failed
// request's retries go on, to whatever the route names: the same server if it came back).
const (
	renewInterval = time.Second
	failoverWait  = 15 * time.Second
)

// failoverMode reports whether the Client follows the token route's casUrl.
func (c *Client) failoverMode() bool {
	_, ok := c.tokens.(*HubTokenSource)
	return ok && c.endpoint == ""
}

// current is the CAS base URL to use now: the token route's latest casUrl in failover mode
// (if it has one), else base.
func (c *Client) current(ctx context.Context, base string) string {
	if !c.failoverMode() {
		return base
	}
	if u, err := c.base(ctx); err == nil {
		return u
	}
	return base
}

// failover is called after err from a request to u (a CAS or transfer URL). When err says the
// server did not answer and the token route still names it as casUrl, the token route is asked
// again.
func (c *Client) failover(ctx context.Context, u string, err error) {
	if !c.failoverMode() || !edgeGone(err) {
		return
	}
	hs := c.tokens.(*HubTokenSource)
	if hs.renew(ctx, u) {
		c.failovers.Add(1)
	}
}

// Failovers is how many times the Client asked the token route again because its edge stopped
// answering.
func (c *Client) Failovers() int64 { return c.failovers.Load() }

// edgeGone reports whether err means the server did not answer (or stopped mid-answer), as
// opposed to answering with a status.
func edgeGone(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return false
	}
	var ue *url.Error
	var te *transientError
	return errors.As(err, &ue) || errors.As(err, &te) || IsUnreachable(err)
}

// renew asks the token route again while its casUrl is still on the server of the dead URL
// (same scheme and host): once at once, then every renewInterval for up to failoverWait, the
// time the origin needs to stop naming a dead edge. It reports whether it fetched at all.
// Concurrent callers wait for the first; they find the casUrl moved and return.
func (s *HubTokenSource) renew(ctx context.Context, dead string) bool {
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	fetched := false
	deadline := time.Now().Add(failoverWait)
	for server(s.CasURL()) == server(dead) && time.Now().Before(deadline) {
		if wait := renewInterval - time.Since(s.lastRenew); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return fetched
			case <-t.C:
			}
		}
		s.lastRenew = time.Now()
		s.src.invalidate()
		if _, err := s.src.Token(ctx); err == nil {
			fetched = true
		}
	}
	return fetched
}

// server is the scheme and host of u ("" if u does not parse).
func server(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return ""
	}
	return strings.ToLower(p.Scheme + "://" + p.Host)
}
