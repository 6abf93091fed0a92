package auth

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// countingVerifier accepts the tokens in ok (with the given expiry) and counts verifications.
type countingVerifier struct {
	ok    map[string]time.Time
	calls atomic.Int64
}

func (c *countingVerifier) VerifyRequest(r *http.Request) (*Claims, error) {
	c.calls.Add(1)
	tok := BearerToken(r)
	if tok == "" {
		return nil, ErrMissing
	}
	exp, ok := c.ok[tok]
	if !ok {
		return nil, ErrBadSignature
	}
	return &Claims{Scope: "s", Access: Read, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(exp)}}, nil
}

func bearer(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return r
}

func TestCachingVerifier(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	type call struct {
		token string
		at    time.Duration // after t0
		ok    bool
		calls int64 // verifications so far
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
		{"default ttl is 10s", 0, 8, map[string]time.Duration{"a": time.Hour}, []call{
			{"a", 0, true, 1}, {"a", 9 * time.Second, true, 1}, {"a", 10 * time.Second, true, 2}}},
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
		{"disabled", -1, 8, map[string]time.Duration{"a": time.Hour}, []call{
			{"a", 0, true, 1}, {"a", 0, true, 2}}},
		{"full: room made", 10 * time.Second, 2, map[string]time.Duration{"a": time.Hour, "b": time.Hour, "c": time.Hour}, []call{
			{"a", 0, true, 1}, {"b", 0, true, 2}, {"c", 0, true, 3}, {"c", 0, true, 3}}},
		{"full: expired entries go first", 10 * time.Second, 2, map[string]time.Duration{"a": time.Second, "b": time.Hour, "c": time.Hour}, []call{
			{"a", 0, true, 1}, {"b", 0, true, 2}, {"c", 2 * time.Second, true, 3}, {"b", 3 * time.Second, true, 3}, {"c", 3 * time.Second, true, 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := &countingVerifier{ok: map[string]time.Time{}}
			for k, d := range tc.valid {
				v.ok[k] = t0.Add(d)
			}
			now := t0
			c := NewCachingVerifier(v, CacheOptions{TTL: tc.ttl, MaxEntries: tc.max, Now: func() time.Time { return now }})
			for i, cl := range tc.calls {
				now = t0.Add(cl.at)
				got, err := c.VerifyRequest(bearer(cl.token))
				if (err == nil) != cl.ok || (err == nil && got.Scope != "s") {
					t.Fatalf("call %d: claims %v, err %v; want ok=%v", i, got, err, cl.ok)
				}
				if err != nil && !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrMissing) {
					t.Fatalf("call %d: err %v is not the verifier's", i, err)
				}
				if n := v.calls.Load(); n != cl.calls {
					t.Fatalf("call %d: %d verifications, want %d", i, n, cl.calls)
				}
				if c.Len() > tc.max {
					t.Fatalf("call %d: %d entries, max %d", i, c.Len(), tc.max)
				}
			}
		})
	}
}

// TestCachingVerifierReal wraps a real Verifier: a cached token still stops working at its
// expiry, and a token differing in one byte (a forged signature) is checked, not served.
func TestCachingVerifierReal(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := t0
	k := seeded(t, 7)
	ks, err := NewKeySet(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return now }
	c := NewCachingVerifier(NewVerifier(ks, VerifierOptions{Now: clock}), CacheOptions{TTL: time.Minute, Now: clock})
	tok, _, err := k.Mint("models/a/b", Write, t0, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got, err := c.VerifyRequest(bearer(tok))
		if err != nil || got.Scope != "models/a/b" || got.Access != Write {
			t.Fatalf("VerifyRequest = %+v, %v", got, err)
		}
	}
	i := strings.LastIndexByte(tok, '.') + 1 // first character of the signature
	flip := "A"
	if tok[i] == 'A' {
		flip = "B"
	}
	forged := tok[:i] + flip + tok[i+1:]
	if _, err := c.VerifyRequest(bearer(forged)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("forged token: %v, want a signature error", err)
	}
	if c.Len() != 1 {
		t.Fatalf("%d entries, want only the good token", c.Len())
	}
	now = t0.Add(5 * time.Second)
	if _, err := c.VerifyRequest(bearer(tok)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired token: %v, want ErrExpired", err)
	}
}

// TestCachingVerifierConcurrent hammers one cache from many goroutines (run with -race).
func TestCachingVerifierConcurrent(t *testing.T) {
	v := &countingVerifier{ok: map[string]time.Time{}}
	for i := range 32 {
		v.ok[fmt.Sprint("t", i)] = time.Now().Add(time.Hour)
	}
	c := NewCachingVerifier(v, CacheOptions{MaxEntries: 16})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tok := fmt.Sprint("t", (g*7+i)%32)
				if got, err := c.VerifyRequest(bearer(tok)); err != nil || got.Scope != "s" {
					t.Errorf("VerifyRequest(%s) = %v, %v", tok, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if c.Len() > 16 {
		t.Fatalf("%d entries, max 16", c.Len())
	}
}

func BenchmarkCachingVerifier(b *testing.B) {
	k := seeded(b, 9)
	ks, _ := NewKeySet(k.Public())
	v := NewVerifier(ks, VerifierOptions{})
	tok, _, _ := k.Mint("models/a/b", Write, time.Now(), time.Hour)
	r := bearer(tok)
	for _, tc := range []struct {
		name string
		v    RequestVerifier
	}{{"uncached", v}, {"cached", NewCachingVerifier(v, CacheOptions{})}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := tc.v.VerifyRequest(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
