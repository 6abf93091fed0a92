// Package auth issues and verifies the bearer tokens of xetcdn: Ed25519-signed JWTs (EdDSA)
// carrying a repository scope, an access level and an expiry.
//
// Both tiers use it. The origin holds the private signing keys and mints tokens; edges verify
// tokens with the origin's public keys, fetched as a JWKS document. The package does no I/O and
// keeps no package state; every type is safe for concurrent use once built.
//
// Access levels: write ⊇ read. edge is the credential an edge uses for the origin's internal API;
// it also reads any scope. admin is the operator's credential for the admin listeners (pprof,
// visibility revocation); it grants nothing on the data routes. docs/security.md has the model. Errors wrap one of the sentinels below: ErrMissing, ErrMalformed,
// ErrExpired, ErrBadSignature and ErrUnknownKey mean "not authenticated" (HTTP 401),
// ErrInsufficient means "authenticated but not allowed" (HTTP 403).
package auth

import (
	"errors"
	"fmt"
)

// Errors returned by this package wrap one of these sentinels; test with errors.Is.
var (
	// ErrMissing: no bearer token was presented.
	ErrMissing = errors.New("auth: missing bearer token")
	// ErrMalformed: the token is not a well-formed EdDSA JWT with the required claims.
	ErrMalformed = errors.New("auth: malformed token")
	// ErrExpired: the token's exp lies in the past (or iat in the future).
	ErrExpired = errors.New("auth: token expired")
	// ErrBadSignature: the signature does not verify with the key named by kid.
	ErrBadSignature = errors.New("auth: bad token signature")
	// ErrUnknownKey: the token names a kid that is not in the key set.
	ErrUnknownKey = errors.New("auth: unknown signing key")
	// ErrInsufficient: the token is valid but does not grant the access or scope needed.
	ErrInsufficient = errors.New("auth: insufficient access")
)

// Unauthenticated reports whether err means the caller is not authenticated (HTTP 401), as
// opposed to authenticated without the needed access (ErrInsufficient, HTTP 403).
func Unauthenticated(err error) bool {
	return errors.Is(err, ErrMissing) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrExpired) ||
		errors.Is(err, ErrBadSignature) || errors.Is(err, ErrUnknownKey)
}

// Access is what a token allows.
type Access string

// Access levels.
const (
	Read  Access = "read"
	Write Access = "write" // implies Read
	Edge  Access = "edge"  // the edge's credential for the internal API; implies Read in any scope
	Admin Access = "admin" // the operator's credential for the admin listeners; nothing else
)

// ParseAccess accepts exactly "read", "write", "edge" or "admin".
func ParseAccess(s string) (Access, error) {
	switch a := Access(s); a {
	case Read, Write, Edge, Admin:
		return a, nil
	}
	return "", fmt.Errorf("%w: access %q is not read, write, edge or admin", ErrMalformed, s)
}

// Client reports whether a is a client's access (read or write in one scope), the only kind
// that may be exchanged for other client tokens on the Hub-compatible token route.
func (a Access) Client() bool { return a == Read || a == Write }

// Covers reports whether a token with access a may do something that needs access need.
func (a Access) Covers(need Access) bool {
	switch need {
	case Read:
		return a == Read || a == Write || a == Edge
	case Write:
		return a == Write
	case Edge:
		return a == Edge
	case Admin:
		return a == Admin
	}
	return false
}
