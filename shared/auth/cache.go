package auth

import (
	"net/http"
	"sync"
	"time"
)

// Defaults of a CachingVerifier (CacheOptions).
const (
	DefaultCacheTTL     = 10 * time.Second
	DefaultCacheEntries = 4096
)

// RequestVerifier verifies the bearer token of a request; *Verifier implements it.
type RequestVerifier interface {
	VerifyRequest(r *http.Request) (*Claims, error)
}

// CacheOptions configure a CachingVerifier.
type CacheOptions struct {
	// TTL is how long a verified token is trusted without checking its signature again (never
	// past its expiry). 0 = DefaultCacheTTL; < 0 disables the cache.
	TTL time.Duration
	// MaxEntries bounds the tokens remembered; 0 = DefaultCacheEntries.
	MaxEntries int
	// Now is the clock; nil = time.Now.
	Now func() time.Time
}

// CachingVerifier remembers the claims of bearer tokens that verified, so that a client sending
// many requests with one token pays for one signature check (Ed25519, ~0.1 ms of CPU, the
// largest per-request cost of small requests such as shard registrations and reconstructions)
// per TTL instead of one per request. It is safe for concurrent use.
//
// Only successes are kept, each until the earlier of TTL after its verification and the
// token's own expiry; a token the wrapped verifier would now refuse (its key was withdrawn)
// keeps working for at most TTL. Keys are the whole token string, so a token differing in any
// byte is verified afresh. At most MaxEntries are held; when full, expired entries go first,
// then arbitrary ones. The cached *Claims are shared by the requests that present the token and
// must not be modified.
type CachingVerifier struct {
	v   RequestVerifier
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[string]cacheEntry
}

type cacheEntry struct {
	c     *Claims
	until time.Time
}

// NewCachingVerifier wraps v.
func NewCachingVerifier(v RequestVerifier, o CacheOptions) *CachingVerifier {
	if o.TTL == 0 {
		o.TTL = DefaultCacheTTL
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultCacheEntries
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &CachingVerifier{v: v, ttl: o.TTL, max: o.MaxEntries, now: o.Now, m: make(map[string]cacheEntry)}
}

// VerifyRequest returns the claims of r's bearer token: from the cache when the same token
// verified less than TTL ago and has not expired since, else from the wrapped verifier, whose
// errors are returned as they are.
func (c *CachingVerifier) VerifyRequest(r *http.Request) (*Claims, error) {
	if c.ttl < 0 {
		return c.v.VerifyRequest(r)
	}
	tok := BearerToken(r)
	if tok == "" || len(tok) > MaxTokenLen {
		return c.v.VerifyRequest(r)
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[tok]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.c, nil
	}
	claims, err := c.v.VerifyRequest(r)
	if err != nil {
		return nil, err
	}
	until := now.Add(c.ttl)
	if claims.ExpiresAt != nil && claims.ExpiresAt.Time.Before(until) {
		until = claims.ExpiresAt.Time
	}
	c.mu.Lock()
	if _, present := c.m[tok]; !present && len(c.m) >= c.max {
		c.makeRoomLocked(now)
	}
	c.m[tok] = cacheEntry{c: claims, until: until}
	c.mu.Unlock()
	return claims, nil
}

// makeRoomLocked drops expired entries, then arbitrary ones, until one more fits.
func (c *CachingVerifier) makeRoomLocked(now time.Time) {
	for k, e := range c.m {
		if !now.Before(e.until) {
			delete(c.m, k)
		}
	}
	for k := range c.m {
		if len(c.m) < c.max {
			return
		}
		delete(c.m, k)
	}
}

// Len returns the number of tokens remembered (expired ones included until they are evicted).
func (c *CachingVerifier) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
