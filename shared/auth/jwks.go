package auth

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
)

// PublicKey is an Ed25519 public key with its kid.
type PublicKey struct {
	ID  string
	Key ed25519.PublicKey
}

// KeySet is an immutable set of public keys indexed by kid. Its JSON form is a JWKS document
// (RFC 7517/8037: kty "OKP", crv "Ed25519", base64url "x").
type KeySet struct {
	keys map[string]ed25519.PublicKey
}

// NewKeySet builds a key set. Duplicate kids are an error.
func NewKeySet(keys ...PublicKey) (*KeySet, error) {
	ks := &KeySet{keys: make(map[string]ed25519.PublicKey, len(keys))}
	for _, k := range keys {
		if k.ID == "" || len(k.Key) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: key %q is not a %d-byte Ed25519 key with a kid",
				ErrKeyFormat, k.ID, ed25519.PublicKeySize)
		}
		if _, dup := ks.keys[k.ID]; dup {
			return nil, fmt.Errorf("%w: duplicate kid %q", ErrKeyFormat, k.ID)
		}
		ks.keys[k.ID] = k.Key
	}
	return ks, nil
}

// Lookup returns the key with id kid.
func (s *KeySet) Lookup(kid string) (ed25519.PublicKey, bool) {
	k, ok := s.keys[kid]
	return k, ok
}

// Len is the number of keys in the set.
func (s *KeySet) Len() int { return len(s.keys) }

type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg,omitempty"`
	Use string `json:"use,omitempty"`
}

type jwks struct {
	Keys []jwk `json:"keys"`
}

// MaxJWKSKeys bounds the keys accepted from a JWKS document.
const MaxJWKSKeys = 64

// MarshalJSON encodes the set as a JWKS document, keys sorted by kid.
func (s *KeySet) MarshalJSON() ([]byte, error) {
	doc := jwks{Keys: make([]jwk, 0, len(s.keys))}
	for kid, k := range s.keys {
		doc.Keys = append(doc.Keys, jwk{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(k),
			Kid: kid, Alg: "EdDSA", Use: "sig"})
	}
	sort.Slice(doc.Keys, func(i, j int) bool { return doc.Keys[i].Kid < doc.Keys[j].Kid })
	return json.Marshal(doc)
}

// ParseJWKS decodes a JWKS document holding Ed25519 keys. Keys of other types are skipped;
// a malformed Ed25519 key or duplicate kid is an error wrapping ErrKeyFormat.
func ParseJWKS(b []byte) (*KeySet, error) {
	var doc jwks
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w: jwks: %v", ErrKeyFormat, err)
	}
	if len(doc.Keys) > MaxJWKSKeys {
		return nil, fmt.Errorf("%w: jwks has %d keys, limit %d", ErrKeyFormat, len(doc.Keys), MaxJWKSKeys)
	}
	keys := make([]PublicKey, 0, len(doc.Keys))
	for _, k := range doc.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" {
			continue
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: jwks key %q has a bad x", ErrKeyFormat, k.Kid)
		}
		keys = append(keys, PublicKey{ID: k.Kid, Key: ed25519.PublicKey(x)})
	}
	return NewKeySet(keys...)
}
