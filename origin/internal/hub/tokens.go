package hub

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"path"
	"strings"

	"github.com/xetcdn/xetcdn/shared/auth"
)

// TokenPrefix starts every user access token, as on the Hub.
const TokenPrefix = "hf_"

const tokenAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewToken returns a fresh user access token ("hf_" and 34 random letters, ~194 bits) and the
// hash under which it is stored; the token itself is never stored.
func NewToken() (token, hash string, err error) {
	var b strings.Builder
	b.WriteString(TokenPrefix)
	max := big.NewInt(int64(len(tokenAlphabet)))
	for range 34 {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", "", err
		}
		b.WriteByte(tokenAlphabet[n.Int64()])
	}
	return b.String(), TokenHash(b.String()), nil
}

// TokenHash is the stored form of a token: its sha256, hex. A token is a 194-bit random secret,
// so a fast hash is enough (no password stretching needed).
func TokenHash(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// ParseGrant parses "PATTERN:read" or "PATTERN:write".
func ParseGrant(s string) (Grant, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return Grant{}, fmt.Errorf("%w: grant %q is not PATTERN:read|write", ErrInvalid, s)
	}
	g := Grant{Pattern: s[:i]}
	switch s[i+1:] {
	case "read":
	case "write":
		g.Write = true
	default:
		return Grant{}, fmt.Errorf("%w: grant %q: access must be read or write", ErrInvalid, s)
	}
	if strings.Contains(g.Pattern, ":") || strings.Count(g.Pattern, "/") != 2 {
		return Grant{}, fmt.Errorf("%w: grant %q: the pattern must be TYPE/NAMESPACE/NAME, e.g. models/acme/*", ErrInvalid, s)
	}
	if _, err := path.Match(g.Pattern, "models/x/y"); err != nil {
		return Grant{}, fmt.Errorf("%w: grant %q: bad pattern: %v", ErrInvalid, s, err)
	}
	return g, nil
}

// Principal is who a request acts for: a user with the grants of the token presented, a CAS
// token's single scope, or nobody (anonymous: no grants).
type Principal struct {
	User   string // "" for anonymous and for CAS tokens
	Grants []Grant
}

// Can reports whether the principal may read (write=false) or write the repository scope.
func (p *Principal) Can(scope string, write bool) bool {
	for _, g := range p.Grants {
		if write && !g.Write {
			continue
		}
		if g.Pattern == scope {
			return true
		}
		if ok, _ := path.Match(g.Pattern, scope); ok {
			return true
		}
	}
	return false
}

// Role is "write" if any grant writes, else "read" (whoami's accessToken.role).
func (p *Principal) Role() string {
	for _, g := range p.Grants {
		if g.Write {
			return "write"
		}
	}
	return "read"
}

// principal authenticates r: no bearer = anonymous; an hf_ token is looked up in the store; any
// other bearer is verified as a CAS token (Options.VerifyCAS) and grants its one scope.
func (h *Service) principal(ctx context.Context, r *http.Request) (*Principal, error) {
	tok := auth.BearerToken(r)
	switch {
	case tok == "":
		return &Principal{}, nil
	case strings.HasPrefix(tok, TokenPrefix):
		user, grants, err := h.store.Token(ctx, TokenHash(tok))
		if err != nil {
			return nil, err
		}
		return &Principal{User: user, Grants: grants}, nil
	case h.verifyCAS != nil:
		c, err := h.verifyCAS(r)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnauthorized, err)
		}
		if !c.Access.Client() {
			return &Principal{}, nil
		}
		return &Principal{Grants: []Grant{{Pattern: c.Scope, Write: c.Access == auth.Write}}}, nil
	}
	return nil, ErrUnauthorized
}

// TokenAccess decides the Xet token route (GET /api/{type}/{ns}/{name}/xet-{read|write}-token)
// for r. known is false when the hub has no such repository and no hf_ token was presented:
// the caller then applies the CAS token rules alone. Otherwise err is nil when the token may be
// minted: anyone for a public repository's read token, the grants of the hf_ token (or CAS
// token) for the rest. A private repository the caller may not read is ErrRepoNotFound.
func (h *Service) TokenAccess(r *http.Request, plural, ns, name string, write bool) (known bool, err error) {
	typ := TypeOfPlural(plural)
	id := ns + "/" + name
	ctx := r.Context()
	hfToken := strings.HasPrefix(auth.BearerToken(r), TokenPrefix)
	if typ == "" || CheckRepoID(id) != nil {
		if hfToken {
			return true, fmt.Errorf("%w: repository %s/%s", ErrRepoNotFound, plural, id)
		}
		return false, nil
	}
	repo, err := h.store.Repo(ctx, typ, id)
	if errors.Is(err, ErrRepoNotFound) && !hfToken {
		return false, nil
	}
	if err != nil && !errors.Is(err, ErrRepoNotFound) {
		return true, err
	}
	p, err := h.principal(ctx, r)
	if err != nil {
		return true, err
	}
	scope := plural + "/" + id
	if repo.ID == "" || repo.Private {
		if !p.Can(scope, false) {
			if !hfToken {
				// Anonymous or a CAS token of another scope: answered by the CAS rules, exactly
				// as for a repository that does not exist (nothing is revealed).
				return false, nil
			}
			return true, ErrRepoNotFound
		}
	}
	if write && !p.Can(scope, true) {
		if p.User == "" && len(p.Grants) == 0 {
			return true, fmt.Errorf("%w: a token with write access is needed", ErrUnauthorized)
		}
		return true, fmt.Errorf("%w: the token presented cannot write %s", ErrForbidden, scope)
	}
	return true, nil
}

// WriteError answers err in the Hub's error shape.
func (h *Service) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	h.writeError(w, r, err)
}

// SetVerifyCAS sets the verifier of bearer tokens that are not hf_ tokens (the origin's CAS
// JWTs). Call it before serving.
func (h *Service) SetVerifyCAS(f func(*http.Request) (*auth.Claims, error)) { h.verifyCAS = f }
