package auth

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MaxTokenLen bounds the tokens Verify looks at; the protocol allows up to 64000 characters.
const MaxTokenLen = 64000

// Claims are the claims of an xetcdn token. Scope is the repository the token was issued for
// (an opaque string such as "models/acme/llama"); exp and iat are required.
type Claims struct {
	Scope  string `json:"scope"`
	Access Access `json:"access"`
	jwt.RegisteredClaims
}

// Allow checks that the claims permit access need in scope. An edge token reads every scope; any
// other token acts only in its own scope. The error wraps ErrInsufficient.
func (c *Claims) Allow(scope string, need Access) error {
	if !c.Access.Covers(need) {
		return fmt.Errorf("%w: token grants %s, route needs %s", ErrInsufficient, c.Access, need)
	}
	if c.Access == Edge || c.Scope == scope {
		return nil
	}
	return fmt.Errorf("%w: token is for scope %q, not %q", ErrInsufficient, c.Scope, scope)
}

// SigningKey is an Ed25519 private key with its key id (kid).
type SigningKey struct {
	ID      string
	Private ed25519.PrivateKey
}

// KeyID derives the kid of a public key: the first 12 bytes of its SHA-256, base64url. Deriving
// it means a key file needs no separate id and every tier computes the same kid.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// NewSigningKey generates a key from rand (crypto/rand.Reader in production).
func NewSigningKey(rand io.Reader) (*SigningKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	return &SigningKey{ID: KeyID(pub), Private: priv}, nil
}

// Public returns the verifying half of k.
func (k *SigningKey) Public() PublicKey {
	return PublicKey{ID: k.ID, Key: k.Private.Public().(ed25519.PublicKey)}
}

// MarshalPEM encodes k as a PKCS#8 "PRIVATE KEY" PEM block.
func (k *SigningKey) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, fmt.Errorf("encode signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ErrKeyFormat reports key material that cannot be decoded.
var ErrKeyFormat = errors.New("auth: bad key material")

// ParseSigningKeyPEM decodes a PKCS#8 PEM Ed25519 private key; the kid is derived with KeyID.
func ParseSigningKeyPEM(b []byte) (*SigningKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: no PRIVATE KEY PEM block", ErrKeyFormat)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeyFormat, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key is %T, not Ed25519", ErrKeyFormat, k)
	}
	return &SigningKey{ID: KeyID(priv.Public().(ed25519.PublicKey)), Private: priv}, nil
}

// Mint signs a token for scope with access, valid from now for ttl. It returns the token and
// its expiry.
func (k *SigningKey) Mint(scope string, access Access, now time.Time, ttl time.Duration) (string, time.Time, error) {
	if _, err := ParseAccess(string(access)); err != nil {
		return "", time.Time{}, err
	}
	if ttl <= 0 {
		return "", time.Time{}, fmt.Errorf("mint token: ttl %v is not positive", ttl)
	}
	exp := now.Add(ttl).Truncate(time.Second)
	c := Claims{
		Scope:  scope,
		Access: access,
		RegisteredClaims: jwt.RegisteredClaims{
			IssuedAt:  jwt.NewNumericDate(now.Truncate(time.Second)),
			ExpiresAt: jwt.NewNumericDate(exp),
		},
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, &c)
	t.Header["kid"] = k.ID
	s, err := t.SignedString(k.Private)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign token: %w", err)
	}
	return s, exp, nil
}

// Verifier checks tokens against a key set. It is safe for concurrent use.
type Verifier struct {
	keys   *KeySet
	now    func() time.Time
	leeway time.Duration
}

// VerifierOptions configure a Verifier. Zero values mean: time.Now, no leeway.
type VerifierOptions struct {
	Now    func() time.Time
	Leeway time.Duration // clock skew tolerated on exp and iat
}

// NewVerifier returns a Verifier that accepts tokens signed by any key in keys.
func NewVerifier(keys *KeySet, o VerifierOptions) *Verifier {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Verifier{keys: keys, now: o.Now, leeway: o.Leeway}
}

// Verify checks the signature, expiry and claims of token. Errors wrap ErrMalformed,
// ErrExpired, ErrBadSignature or ErrUnknownKey.
func (v *Verifier) Verify(token string) (*Claims, error) {
	if token == "" {
		return nil, ErrMissing
	}
	if len(token) > MaxTokenLen {
		return nil, fmt.Errorf("%w: token of %d bytes", ErrMalformed, len(token))
	}
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, v.key,
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
		jwt.WithTimeFunc(v.now), jwt.WithLeeway(v.leeway))
	if err != nil {
		return nil, classify(err)
	}
	if _, err := ParseAccess(string(c.Access)); err != nil {
		return nil, err
	}
	if c.IssuedAt == nil {
		return nil, fmt.Errorf("%w: no iat claim", ErrMalformed)
	}
	return &c, nil
}

func (v *Verifier) key(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, fmt.Errorf("%w: no kid header", ErrMalformed)
	}
	k, ok := v.keys.Lookup(kid)
	if !ok {
		return nil, fmt.Errorf("%w: kid %q", ErrUnknownKey, kid)
	}
	return k, nil
}

// classify maps a jwt/v5 error to this package's sentinels.
func classify(err error) error {
	switch {
	case errors.Is(err, ErrUnknownKey), errors.Is(err, ErrMalformed):
		return err
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenUsedBeforeIssued),
		errors.Is(err, jwt.ErrTokenNotValidYet):
		return fmt.Errorf("%w: %v", ErrExpired, err)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return fmt.Errorf("%w: %v", ErrMalformed, err)
}

// BearerToken returns the token of an "Authorization: Bearer <token>" header, or "" when the
// request carries none. The scheme is matched case-insensitively.
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const p = "bearer "
	if len(h) < len(p) || !strings.EqualFold(h[:len(p)], p) {
		return ""
	}
	return strings.TrimSpace(h[len(p):])
}

// VerifyRequest verifies the bearer token of r. A request without one gets ErrMissing.
func (v *Verifier) VerifyRequest(r *http.Request) (*Claims, error) {
	return v.Verify(BearerToken(r))
}
