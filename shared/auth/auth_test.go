package auth

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// seeded returns a deterministic key so tests do not depend on crypto/rand.
func seeded(t testing.TB, b byte) *SigningKey {
	t.Helper()
	k, err := NewSigningKey(bytes.NewReader(bytes.Repeat([]byte{b}, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func verifierFor(t testing.TB, now time.Time, keys ...*SigningKey) *Verifier {
	t.Helper()
	pubs := make([]PublicKey, len(keys))
	for i, k := range keys {
		pubs[i] = k.Public()
	}
	ks, err := NewKeySet(pubs...)
	if err != nil {
		t.Fatal(err)
	}
	return NewVerifier(ks, VerifierOptions{Now: func() time.Time { return now }})
}

func TestCovers(t *testing.T) {
	tests := []struct {
		have, need Access
		want       bool
	}{
		{Read, Read, true}, {Read, Write, false}, {Read, Edge, false},
		{Write, Read, true}, {Write, Write, true}, {Write, Edge, false},
		{Edge, Read, true}, {Edge, Write, false}, {Edge, Edge, true}, {Edge, Admin, false},
		{Admin, Read, false}, {Admin, Write, false}, {Admin, Edge, false}, {Admin, Admin, true},
		{Read, Admin, false}, {Write, Admin, false},
		{"", Read, false}, {"", Admin, false}, {"root", Admin, false},
	}
	for _, tc := range tests {
		if got := tc.have.Covers(tc.need); got != tc.want {
			t.Errorf("%q.Covers(%q) = %v, want %v", tc.have, tc.need, got, tc.want)
		}
	}
}

func TestClientAccess(t *testing.T) {
	for a, want := range map[Access]bool{Read: true, Write: true, Edge: false, Admin: false, "": false} {
		if a.Client() != want {
			t.Errorf("%q.Client() = %v", a, !want)
		}
	}
	for _, s := range []string{"read", "write", "edge", "admin"} {
		if a, err := ParseAccess(s); err != nil || string(a) != s {
			t.Errorf("ParseAccess(%q) = %q, %v", s, a, err)
		}
	}
}

func TestAllow(t *testing.T) {
	tests := []struct {
		name   string
		claims Claims
		scope  string
		need   Access
		ok     bool
	}{
		{"read own scope", Claims{Scope: "a", Access: Read}, "a", Read, true},
		{"read other scope", Claims{Scope: "a", Access: Read}, "b", Read, false},
		{"read token writes", Claims{Scope: "a", Access: Read}, "a", Write, false},
		{"write token reads", Claims{Scope: "a", Access: Write}, "a", Read, true},
		{"write other scope", Claims{Scope: "a", Access: Write}, "b", Write, false},
		{"edge reads any scope", Claims{Scope: "", Access: Edge}, "b", Read, true},
		{"edge cannot write", Claims{Scope: "b", Access: Edge}, "b", Write, false},
		{"admin reads nothing", Claims{Scope: "b", Access: Admin}, "b", Read, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.claims.Allow(tc.scope, tc.need)
			if tc.ok != (err == nil) {
				t.Fatalf("Allow = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInsufficient) {
				t.Fatalf("error %v does not wrap ErrInsufficient", err)
			}
		})
	}
}

func TestMintVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	k := seeded(t, 1)
	tok, exp, err := k.Mint("models/acme/llama", Write, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !exp.Equal(now.Add(time.Hour)) {
		t.Fatalf("exp = %v", exp)
	}
	c, err := verifierFor(t, now.Add(time.Minute), k).Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Scope != "models/acme/llama" || c.Access != Write || !c.ExpiresAt.Equal(exp) || !c.IssuedAt.Equal(now) {
		t.Fatalf("claims = %+v", c)
	}
}

func TestVerifyRejects(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	k1, k2 := seeded(t, 1), seeded(t, 2)
	good, _, err := k1.Mint("s", Read, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := k2.Mint("s", Read, now, time.Hour)
	parts := strings.Split(good, ".")
	// Same header and claims, signature of a different key: with k2's kid replaced by k1's.
	forged := parts[0] + "." + parts[1] + "." + strings.Split(other, ".")[2]
	// Claims changed after signing.
	evilClaims := base64.RawURLEncoding.EncodeToString([]byte(`{"scope":"t","access":"write","exp":1900000000,"iat":1800000000}`))
	tampered := parts[0] + "." + evilClaims + "." + parts[2]
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, &Claims{Scope: "s", Access: Write,
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now)}})
	hs.Header["kid"] = k1.ID
	hsTok, _ := hs.SignedString([]byte("secret"))
	noExp := jwt.NewWithClaims(jwt.SigningMethodEdDSA, &Claims{Scope: "s", Access: Read,
		RegisteredClaims: jwt.RegisteredClaims{IssuedAt: jwt.NewNumericDate(now)}})
	noExp.Header["kid"] = k1.ID
	noExpTok, _ := noExp.SignedString(k1.Private)
	badAccess := jwt.NewWithClaims(jwt.SigningMethodEdDSA, &Claims{Scope: "s", Access: "root",
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now)}})
	badAccess.Header["kid"] = k1.ID
	badAccessTok, _ := badAccess.SignedString(k1.Private)

	tests := []struct {
		name  string
		token string
		at    time.Time
		want  error
	}{
		{"empty", "", now, ErrMissing},
		{"garbage", "not.a.jwt", now, ErrMalformed},
		{"two parts", parts[0] + "." + parts[1], now, ErrMalformed},
		{"expired", good, now.Add(2 * time.Hour), ErrExpired},
		{"issued in the future", good, now.Add(-time.Hour), ErrExpired},
		{"forged signature", forged, now, ErrBadSignature},
		{"tampered claims", tampered, now, ErrBadSignature},
		{"unknown kid", other, now, ErrUnknownKey},
		{"hmac algorithm", hsTok, now, ErrBadSignature},
		{"no exp", noExpTok, now, ErrMalformed},
		{"bad access", badAccessTok, now, ErrMalformed},
		{"too long", strings.Repeat("a", MaxTokenLen+1), now, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verifierFor(t, tc.at, k1).Verify(tc.token)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if !Unauthenticated(err) {
				t.Fatalf("Unauthenticated(%v) = false", err)
			}
		})
	}
}

func TestMultipleKeys(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	k1, k2 := seeded(t, 1), seeded(t, 2)
	v := verifierFor(t, now, k1, k2)
	for _, k := range []*SigningKey{k1, k2} {
		tok, _, err := k.Mint("s", Edge, now, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(tok); err != nil {
			t.Fatalf("key %s: %v", k.ID, err)
		}
	}
}

func TestBearerToken(t *testing.T) {
	tests := map[string]string{"": "", "Bearer abc": "abc", "bearer  abc ": "abc", "Basic abc": "", "Bearer": ""}
	for h, want := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		if got := BearerToken(r); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestPEMRoundTrip(t *testing.T) {
	k := seeded(t, 7)
	b, err := k.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	k2, err := ParseSigningKeyPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	if k2.ID != k.ID || !k2.Private.Equal(k.Private) {
		t.Fatal("round trip changed the key")
	}
	for _, bad := range [][]byte{nil, []byte("junk"), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")} {
		if _, err := ParseSigningKeyPEM(bad); !errors.Is(err, ErrKeyFormat) {
			t.Errorf("ParseSigningKeyPEM(%q) = %v", bad, err)
		}
	}
}

func TestJWKSRoundTrip(t *testing.T) {
	k1, k2 := seeded(t, 1), seeded(t, 2)
	ks, err := NewKeySet(k1.Public(), k2.Public())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ks.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseJWKS(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Len() != 2 {
		t.Fatalf("got %d keys", back.Len())
	}
	for _, k := range []*SigningKey{k1, k2} {
		got, ok := back.Lookup(k.ID)
		if !ok || !got.Equal(k.Public().Key) {
			t.Fatalf("key %s lost", k.ID)
		}
	}
}

func TestParseJWKSRejects(t *testing.T) {
	tests := map[string]string{
		"not json":  `{`,
		"bad x":     `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"!!","kid":"a"}]}`,
		"short x":   `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"a"}]}`,
		"no kid":    `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + strings.Repeat("A", 43) + `"}]}`,
		"duplicate": `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + strings.Repeat("A", 43) + `","kid":"a"},{"kty":"OKP","crv":"Ed25519","x":"` + strings.Repeat("A", 43) + `","kid":"a"}]}`,
	}
	for name, doc := range tests {
		if _, err := ParseJWKS([]byte(doc)); !errors.Is(err, ErrKeyFormat) {
			t.Errorf("%s: ParseJWKS = %v", name, err)
		}
	}
	ks, err := ParseJWKS([]byte(`{"keys":[{"kty":"RSA","n":"x","e":"AQAB","kid":"r"}]}`))
	if err != nil || ks.Len() != 0 {
		t.Fatalf("foreign key types must be skipped: %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	k := seeded(f, 1)
	good, _, _ := k.Mint("s", Read, now, time.Hour)
	f.Add(good)
	f.Add("")
	f.Add("a.b.c")
	f.Add(good[:len(good)-3])
	v := verifierFor(f, now, k)
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := v.Verify(tok)
		if err == nil && (c == nil || c.Access == "") {
			t.Fatal("nil error without claims")
		}
		if err != nil && !Unauthenticated(err) {
			t.Fatalf("error %v is not an authentication error", err)
		}
	})
}

func FuzzParseJWKS(f *testing.F) {
	k := seeded(f, 1)
	ks, _ := NewKeySet(k.Public())
	b, _ := ks.MarshalJSON()
	f.Add(b)
	f.Add([]byte(`{"keys":[]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := ParseJWKS(b)
		if err == nil {
			if _, err := ks.MarshalJSON(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	k := seeded(b, 1)
	tok, _, _ := k.Mint("models/acme/llama", Read, now, time.Hour)
	v := verifierFor(b, now, k)
	b.SetBytes(int64(len(tok)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}
