package server

import (
	"net/http"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/shared/auth"
)

// Defaults of the verified-token cache (Options.TokenCacheTTL, tokenCacheEntries).
const (
	DefaultTokenCacheTTL = 10 * time.Second
	tokenCacheEntries    = 4096
)

// tokenCache remembers the claims of bearer tokens that verified, so that a client sending many
// requests with one token pays for one signature check (Ed25519, ~0.1 ms of CPU, the largest
// per-request cost of small reconstructions) per ttl instead of one per request.
//
// Only successes are kept, each until the earlier of ttl after its verification and the
// token's own expiry; a token the verifier would now refuse (its key left the origin's key set)
// keeps working for at most ttl, the same order as the visibility TTL. Keys are the whole token
// string, so a token differing in any byte is verified afresh. At most max entries are held;
// when full, expired entries go first, then arbitrary ones. The cached *auth.Claims are shared
// by the requests that use the token and must not be modified.
type tokenCache struct {
	v   Tokens
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[string]tokenEntry
}

type tokenEntry struct {
	c     *auth.Claims
	until time.Time
}

// newTokenCache wraps v; ttl <= 0 disables caching.
func newTokenCache(v Tokens, ttl time.Duration, max int, now func() time.Time) *tokenCache {
	return &tokenCache{v: v, ttl: ttl, max: max, now: now, m: make(map[string]tokenEntry)}
}

// VerifyRequest returns the claims of r's bearer token, from the cache when it verified less
// than ttl ago and has not expired since; errors are the verifier's.
func (t *tokenCache) VerifyRequest(r *http.Request) (*auth.Claims, error) {
	if t.ttl <= 0 {
		return t.v.VerifyRequest(r)
	}
	tok := auth.BearerToken(r)
	if tok == "" || len(tok) > auth.MaxTokenLen {
		return t.v.VerifyRequest(r)
	}
	now := t.now()
	t.mu.Lock()
	e, ok := t.m[tok]
	t.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.c, nil
	}
	c, err := t.v.VerifyRequest(r)
	if err != nil {
		return nil, err
	}
	until := now.Add(t.ttl)
	if c.ExpiresAt != nil && c.ExpiresAt.Time.Before(until) {
		until = c.ExpiresAt.Time
	}
	t.mu.Lock()
	if _, present := t.m[tok]; !present && len(t.m) >= t.max {
		t.makeRoomLocked(now)
	}
	t.m[tok] = tokenEntry{c: c, until: until}
	t.mu.Unlock()
	return c, nil
}

// makeRoomLocked drops expired entries, then arbitrary ones, until one more fits.
func (t *tokenCache) makeRoomLocked(now time.Time) {
	for k, e := range t.m {
		if !now.Before(e.until) {
			delete(t.m, k)
		}
	}
	for k := range t.m {
		if len(t.m) < t.max {
			return
		}
		delete(t.m, k)
	}
}
