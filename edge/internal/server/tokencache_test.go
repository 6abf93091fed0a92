package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/xetcdn/xetcdn/shared/auth"
)

// countingTokens accepts the tokens in ok (with the given expiry) and counts verifications.
type countingTokens struct {
	ok    map[string]time.Time
	calls int
}

func (c *countingTokens) VerifyRequest(r *http.Request) (*auth.Claims, error) {
	c.calls++
	exp, ok := c.ok[auth.BearerToken(r)]
	if !ok {
		return nil, auth.ErrBadSignature
	}
	return &auth.Claims{Scope: "s", Access: auth.Read,
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(exp)}}, nil
}

func TestTokenCache(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	type call struct {
		token string
		at    time.Duration // after t0
		ok    bool
		calls int // verifier calls so far
	}
	tests := []struct {
		name  string
		ttl   time.Duration
		max   int
		valid map[string]time.Duration // token -> expiry after t0
		calls []call
	}{
		{"repeat within ttl: one verification", 10 * time.Second, 8, map[string]time.Duration{"a": time.Hour}, []call{
			{"a", 0, true, 1}, {"a", time.Second, true, 1}, {"a", 9 * time.Second, true, 1}}},
		{"after ttl: verified again", 10 * time.Second, 8, map[string]time.Duration{"a": time.Hour}, []call{
			{"a", 0, true, 1}, {"a", 10 * time.Second, true, 2}, {"a", 11 * time.Second, true, 2}}},
		{"never past the token's expiry", 10 * time.Second, 8, map[string]time.Duration{"a": 3 * time.Second}, []call{
			{"a", 0, true, 1}, {"a", 2 * time.Second, true, 1}, {"a", 3 * time.Second, true, 2}}},
		{"failures are not cached", 10 * time.Second, 8, nil, []call{
			{"bad", 0, false, 1}, {"bad", time.Second, false, 2}}},
		{"no token goes to the verifier", 10 * time.Second, 8, nil, []call{
			{"", 0, false, 1}, {"", 0, false, 2}}},
		{"tokens are separate", 10 * time.Second, 8, map[string]time.Duration{"a": time.Hour, "b": time.Hour}, []call{
			{"a", 0, true, 1}, {"b", 0, true, 2}, {"a", 0, true, 2}, {"b", 0, true, 2}}},
		{"disabled", 0, 8, map[string]time.Duration{"a": time.Hour}, []call{
			{"a", 0, true, 1}, {"a", 0, true, 2}}},
		{"full: room made", 10 * time.Second, 2, map[string]time.Duration{"a": time.Hour, "b": time.Hour, "c": time.Hour}, []call{
			{"a", 0, true, 1}, {"b", 0, true, 2}, {"c", 0, true, 3}, {"c", 0, true, 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := &countingTokens{ok: map[string]time.Time{}}
			for k, d := range tc.valid {
				v.ok[k] = t0.Add(d)
			}
			now := t0
			c := newTokenCache(v, tc.ttl, tc.max, func() time.Time { return now })
			for i, cl := range tc.calls {
				now = t0.Add(cl.at)
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				if cl.token != "" {
					r.Header.Set("Authorization", "Bearer "+cl.token)
				}
				got, err := c.VerifyRequest(r)
				if (err == nil) != cl.ok || (err == nil && got.Scope != "s") {
					t.Fatalf("call %d: claims %v, err %v; want ok=%v", i, got, err, cl.ok)
				}
				if err != nil && !errors.Is(err, auth.ErrBadSignature) && !errors.Is(err, auth.ErrMissing) {
					t.Fatalf("call %d: err %v is not the verifier's", i, err)
				}
				if v.calls != cl.calls {
					t.Fatalf("call %d: %d verifications, want %d", i, v.calls, cl.calls)
				}
				if len(c.m) > tc.max {
					t.Fatalf("call %d: %d entries, max %d", i, len(c.m), tc.max)
				}
			}
		})
	}
}
