package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Listing and revoking user access tokens (`xet-origin tokens list|revoke`, docs/hub.md). A
// token is named by its id: the first TokenIDLen hex digits of its stored hash, which reveal
// nothing of the token. Every request looks the token up in the store (there is no cache), so
// a revoked token is refused from the next request on; CAS tokens (JWTs) minted with it
// before stay valid until they expire (the token route's TTL).

// TokenIDLen is the length of a token id.
const TokenIDLen = 16

var tokenIDRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// TokenID is the id of the token whose hash is hash.
func TokenID(hash string) string { return hash[:TokenIDLen] }

// TokenInfo describes a stored token (never the token itself).
type TokenInfo struct {
	ID      string
	User    string
	Grants  []Grant
	Created time.Time
}

// Tokens lists the tokens of user ("" = every user), by user then creation time.
func (s *Store) Tokens(ctx context.Context, user string) ([]TokenInfo, error) {
	q := `SELECT hash, username, grants, created FROM hub_tokens`
	var args []any
	if user != "" {
		q += ` WHERE username = ?`
		args = append(args, user)
	}
	rows, err := s.db.QueryContext(ctx, s.q(q+` ORDER BY username, created, hash`), args...)
	if err != nil {
		return nil, s.translate(err)
	}
	defer rows.Close()
	var out []TokenInfo
	for rows.Next() {
		var hash, u, g string
		var created int64
		if err := rows.Scan(&hash, &u, &g, &created); err != nil {
			return nil, s.translate(err)
		}
		ti := TokenInfo{ID: TokenID(hash), User: u, Created: time.Unix(created, 0).UTC()}
		if err := json.Unmarshal([]byte(g), &ti.Grants); err != nil {
			return nil, fmt.Errorf("%w: token %s grants: %v", ErrUnavailable, ti.ID, err)
		}
		out = append(out, ti)
	}
	return out, s.translate(rows.Err())
}

// RevokeToken deletes the token with this id (TokenID) or, given a whole hf_ token, that
// token. ErrInvalid for a malformed id, ErrEntryNotFound when no token matches.
func (s *Store) RevokeToken(ctx context.Context, idOrToken string) error {
	var q string
	var arg string
	switch {
	case strings.HasPrefix(idOrToken, TokenPrefix):
		q, arg = `DELETE FROM hub_tokens WHERE hash = ?`, TokenHash(idOrToken)
	case tokenIDRE.MatchString(idOrToken):
		// The id is a hex prefix of the hash; LIKE needs no escaping for hex digits.
		q, arg = `DELETE FROM hub_tokens WHERE hash LIKE ?`, idOrToken+"%"
	default:
		return fmt.Errorf("%w: %q is neither a token id (%d hex digits, from 'tokens list') nor an hf_ token", ErrInvalid, idOrToken, TokenIDLen)
	}
	res, err := s.db.ExecContext(ctx, s.q(q), arg)
	if err != nil {
		return s.translate(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return s.translate(err)
	}
	if n == 0 {
		return fmt.Errorf("%w: no token %q", ErrEntryNotFound, idOrToken)
	}
	return nil
}

// String is the grant as the admin commands take it: "PATTERN:read" or "PATTERN:write".
func (g Grant) String() string {
	if g.Write {
		return g.Pattern + ":write"
	}
	return g.Pattern + ":read"
}
