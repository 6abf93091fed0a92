// Package urlsign makes and checks the signed, expiring transfer URLs that reconstruction
// answers hand to clients (docs/protocol.md §2.10). A URL is a Grant: it authorizes GETs of a set
// of byte ranges of one stored xorb until it expires, for as long as the file it was issued for
// stays visible in the scope it was issued to (the serving tier checks that; see Grant). Clients
// fetch it without an Authorization header and treat it as opaque.
//
// URL form (the path is fixed; the base is the tier's public URL):
//
//	{base}/v1/transfer/xorbs/default/{xorb}?f={file}&c={scope}&r=S-E,S-E,…&x={expiry}&s={signature}
//
// f is the file hash (hex, like the xorb's), c the scope in unpadded base64url (so that any
// scope needs no escaping; empty for the empty scope), r the signed closed byte ranges in
// decimal, in the order they were signed, x the expiry in Unix seconds. s is the unpadded
// base64url HMAC-SHA256, under the tier's key, of
//
//	"xetcdn-transfer-v2\n" || raw 32-byte xorb hash || raw 32-byte file hash || c || "\n" || x || "\n" || r
//
// so the xorb, the file, the scope, the expiry and the exact range list are all covered (c, x
// and r hold no newline, so the message parses one way only). URLs of the earlier form, without
// f and c, are refused as malformed (403): clients ask the reconstruction again and get new ones.
// Each tier signs and verifies its own URLs with its own key; URLs carry no key id, so rotating
// the key invalidates the URLs in flight and clients refresh them on the resulting 403.
package urlsign

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	gohash "hash"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// PathPrefix is the route prefix of transfer URLs; the xorb hash (string form) follows it.
const PathPrefix = "/v1/transfer/xorbs/default/"

// Limits.
const (
	// MinKeyLen is the shortest accepted HMAC key.
	MinKeyLen = 32
	// MaxRanges bounds the ranges of one URL (recon writes at most a few hundred).
	MaxRanges = 4096
	// MaxQueryLen bounds the query string Verify looks at.
	MaxQueryLen = 64 << 10
	// DefaultTTL is the lifetime of a URL when Options.TTL is zero.
	DefaultTTL = time.Hour
)

var (
	// ErrDenied is wrapped by every verification error: the request must get a 403, which makes
	// clients re-ask the reconstruction for fresh URLs.
	ErrDenied = errors.New("urlsign: transfer URL denied")
	// ErrMalformed: the path or query is not a transfer URL of this package (URLs of the
	// earlier form, without file and scope, included).
	ErrMalformed = fmt.Errorf("%w: malformed", ErrDenied)
	// ErrTampered: the signature does not match the hash, file, scope, expiry and ranges.
	ErrTampered = fmt.Errorf("%w: bad signature", ErrDenied)
	// ErrExpired: the URL is correctly signed but past its expiry.
	ErrExpired = fmt.Errorf("%w: expired", ErrDenied)
	// ErrRevoked: the URL is correctly signed and unexpired, but the file it was issued for is
	// no longer visible in its scope. The serving tier returns it (see Grant).
	ErrRevoked = fmt.Errorf("%w: revoked", ErrDenied)
	// ErrExcessive: the requested ranges, coalesced, make more parts than the URL has signed
	// ranges and more than MinParts (see Parts). It wraps httprange.ErrUnsatisfiable: RFC 9110 §15.5.17 answers an
	// excessive range set with 416.
	ErrExcessive = fmt.Errorf("%w: more parts than signed ranges", httprange.ErrUnsatisfiable)
)

const domain = "xetcdn-transfer-v2\n"

// Grant is what a verified transfer URL authorizes: GETs of Ranges (in signed order) of Xorb,
// issued to a token of Scope for file File. The URL proves only that the tier signed it; the
// tier must still check, when serving, that File is visible in Scope (and refuse with
// ErrRevoked when it is not), which is what makes hiding a file revoke its URLs.
type Grant struct {
	Xorb   hash.Hash
	File   hash.Hash
	Scope  string
	Ranges []httprange.ByteRange
}

// Options configure a Signer.
type Options struct {
	// BaseURL is prepended to PathPrefix, e.g. "https://edge.example.org:4443"; a trailing
	// slash is dropped. It is copied into URLs as is, so it must not need JSON escaping.
	BaseURL string
	// Key is the HMAC key, at least MinKeyLen bytes; it is copied.
	Key []byte
	// TTL is how long a URL stays valid; DefaultTTL when zero.
	TTL time.Duration
	// Now returns the current time; time.Now when nil.
	Now func() time.Time
}

// Signer signs and verifies transfer URLs; Bind gives the recon.Signer of one answer. It is
// safe for concurrent use; signing reuses pooled HMAC states, so it allocates nothing in steady
// state beyond growing dst.
type Signer struct {
	base string
	key  []byte
	ttl  time.Duration
	now  func() time.Time
	pool sync.Pool // of *state
}

type state struct {
	mac gohash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// New returns a Signer for o.
func New(o Options) (*Signer, error) {
	if len(o.Key) < MinKeyLen {
		return nil, fmt.Errorf("urlsign: key of %d bytes, want at least %d", len(o.Key), MinKeyLen)
	}
	if o.TTL < 0 {
		return nil, fmt.Errorf("urlsign: negative TTL %s", o.TTL)
	}
	s := &Signer{
		base: strings.TrimSuffix(o.BaseURL, "/"),
		key:  slices.Clone(o.Key),
		ttl:  o.TTL,
		now:  o.Now,
	}
	if s.ttl == 0 {
		s.ttl = DefaultTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.pool.New = func() any { return &state{mac: hmac.New(sha256.New, s.key)} }
	return s, nil
}

// TTL is the configured lifetime of a URL.
func (s *Signer) TTL() time.Duration { return s.ttl }

// Expiry returns the expiry of a URL signed now (now + TTL), rounded up to the next multiple
// of round since the Unix epoch when round is at least a second. Every URL signed with one
// rounded expiry then carries the same x, so an answer signed with it stays byte-identical for
// up to round; such a URL lives between TTL and TTL + round.
func (s *Signer) Expiry(round time.Duration) time.Time {
	exp := s.now().Add(s.ttl)
	if round < time.Second {
		return exp
	}
	r := int64(round / time.Second)
	u := exp.Unix()
	if exp.Nanosecond() > 0 {
		u++ // whole seconds, never earlier than now + TTL
	}
	if m := u % r; m != 0 {
		u += r - m
	}
	return time.Unix(u, 0)
}

// Bind returns the signer (a recon.Signer) of an answer about file for a token of scope: its
// URLs are bound to that file and scope and expire at exp (truncated to whole seconds; see
// Expiry).
func (s *Signer) Bind(scope string, file hash.Hash, exp time.Time) Bound {
	return Bound{s: s, file: file, scope: base64.RawURLEncoding.EncodeToString([]byte(scope)), exp: exp.Unix()}
}

// Bound signs URLs bound to one file, scope and expiry; see Signer.Bind. It is a small value,
// safe for concurrent use.
type Bound struct {
	s     *Signer
	file  hash.Hash
	scope string // base64url, as in the URL
	exp   int64
}

// WithFile returns b bound to another file of the same scope, with the same expiry (answers
// about several files, such as batch reconstructions).
func (b Bound) WithFile(file hash.Hash) Bound {
	b.file = file
	return b
}

// AppendURL appends the URL of ranges of xorb, bound to b's file, scope and expiry.
func (b Bound) AppendURL(dst []byte, xorb hash.Hash, ranges []httprange.ByteRange) []byte {
	s := b.s
	dst = append(dst, s.base...)
	dst = append(dst, PathPrefix...)
	dst = xorb.AppendString(dst)
	dst = append(dst, "?f="...)
	dst = b.file.AppendString(dst)
	dst = append(dst, "&c="...)
	dst = append(dst, b.scope...)
	dst = append(dst, "&r="...)
	rStart := len(dst)
	for i, r := range ranges {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, r.Start, 10)
		dst = append(dst, '-')
		dst = strconv.AppendUint(dst, r.End, 10)
	}
	rEnd := len(dst)
	dst = append(dst, "&x="...)
	xStart := len(dst)
	dst = strconv.AppendInt(dst, b.exp, 10)
	xEnd := len(dst)
	st := s.pool.Get().(*state)
	sum := st.sign(xorb, b.file, b.scope, dst[xStart:xEnd], dst[rStart:rEnd])
	dst = append(dst, "&s="...)
	dst = base64.RawURLEncoding.AppendEncode(dst, sum)
	s.pool.Put(st)
	return dst
}

// sign returns the MAC of the signed message; the result aliases st.
func (st *state) sign(xorb, file hash.Hash, scope string, exp, ranges []byte) []byte {
	st.mac.Reset()
	b := append(st.buf[:0], domain...)
	b = append(b, xorb[:]...)
	b = append(b, file[:]...)
	b = append(b, scope...)
	b = append(b, '\n')
	b = append(b, exp...)
	b = append(b, '\n')
	b = append(b, ranges...)
	st.mac.Write(b)
	if cap(b) <= 16<<10 {
		st.buf = b // keep a modest buffer for the next message
	}
	return st.mac.Sum(st.sum[:0])
}

// VerifyRequest is Verify on r.URL.
func (s *Signer) VerifyRequest(r *http.Request, now time.Time) (Grant, error) {
	return s.Verify(r.URL.Path, r.URL.RawQuery, now)
}

// query parameters of a transfer URL, in the order of params.
const (
	pFile = iota
	pScope
	pRanges
	pExpiry
	pSig
	numParams
)

var params = [numParams]string{"f", "c", "r", "x", "s"}

// Verify checks a transfer URL's path (ending in PathPrefix + hash) and raw query. It returns
// the Grant, or an error wrapping ErrMalformed, ErrTampered or ErrExpired (all wrap ErrDenied).
// The signature is checked before the expiry and before the ranges and the scope are decoded.
// Verify does not check the grant's visibility: that is the caller's (ErrRevoked).
func (s *Signer) Verify(path, rawQuery string, now time.Time) (Grant, error) {
	i := strings.LastIndexByte(path, '/')
	if i < 0 || !strings.HasSuffix(path[:i+1], PathPrefix) {
		return Grant{}, fmt.Errorf("%w: path is not under %s", ErrMalformed, PathPrefix)
	}
	xorb, err := hash.Parse(path[i+1:])
	if err != nil {
		return Grant{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(rawQuery) > MaxQueryLen {
		return Grant{}, fmt.Errorf("%w: query of %d bytes", ErrMalformed, len(rawQuery))
	}
	var val [numParams]string
	var seen [numParams]bool
	for rest := rawQuery; rest != ""; {
		var kv string
		kv, rest, _ = strings.Cut(rest, "&")
		k, v, _ := strings.Cut(kv, "=")
		p := slices.Index(params[:], k)
		if p < 0 {
			continue // tolerate parameters added by proxies or clients
		}
		if strings.ContainsRune(v, '%') {
			// Our URLs need no escaping, but an intermediary may have escaped ',' or '='.
			u, err := url.QueryUnescape(v)
			if err != nil {
				return Grant{}, fmt.Errorf("%w: parameter %q: %w", ErrMalformed, k, err)
			}
			v = u
		}
		// Only the scope may be empty (the empty scope).
		if seen[p] || (v == "" && p != pScope) {
			return Grant{}, fmt.Errorf("%w: parameter %q repeated or empty", ErrMalformed, k)
		}
		val[p], seen[p] = v, true
	}
	if slices.Contains(seen[:], false) {
		return Grant{}, fmt.Errorf("%w: want parameters f, c, r, x and s", ErrMalformed)
	}
	file, err := hash.Parse(val[pFile])
	if err != nil {
		return Grant{}, fmt.Errorf("%w: file: %w", ErrMalformed, err)
	}
	var mac [sha256.Size]byte
	sig := val[pSig]
	if base64.RawURLEncoding.DecodedLen(len(sig)) != len(mac) {
		return Grant{}, fmt.Errorf("%w: signature of %d characters", ErrMalformed, len(sig))
	}
	if _, err := base64.RawURLEncoding.Decode(mac[:], []byte(sig)); err != nil {
		return Grant{}, fmt.Errorf("%w: signature: %w", ErrMalformed, err)
	}
	x, r := val[pExpiry], val[pRanges]
	st := s.pool.Get().(*state)
	ok := hmac.Equal(st.sign(xorb, file, val[pScope], []byte(x), []byte(r)), mac[:])
	s.pool.Put(st)
	if !ok {
		return Grant{}, fmt.Errorf("%w for xorb %s", ErrTampered, xorb)
	}
	exp, err := strconv.ParseInt(x, 10, 64)
	if err != nil {
		return Grant{}, fmt.Errorf("%w: expiry %q", ErrMalformed, clip(x))
	}
	if now.Unix() > exp {
		return Grant{}, fmt.Errorf("%w at %s", ErrExpired, time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	scope, err := base64.RawURLEncoding.DecodeString(val[pScope])
	if err != nil {
		return Grant{}, fmt.Errorf("%w: scope: %w", ErrMalformed, err)
	}
	ranges, err := parseRanges(r)
	if err != nil {
		return Grant{}, err
	}
	return Grant{Xorb: xorb, File: file, Scope: string(scope), Ranges: ranges}, nil
}

// parseRanges reads "S-E,S-E,…" with S <= E.
func parseRanges(r string) ([]httprange.ByteRange, error) {
	n := strings.Count(r, ",") + 1
	if n > MaxRanges {
		return nil, fmt.Errorf("%w: %d ranges", ErrMalformed, n)
	}
	out := make([]httprange.ByteRange, 0, n)
	for spec := range strings.SplitSeq(r, ",") {
		a, b, ok := strings.Cut(spec, "-")
		s, err1 := strconv.ParseUint(a, 10, 64)
		e, err2 := strconv.ParseUint(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || e < s {
			return nil, fmt.Errorf("%w: range %q", ErrMalformed, clip(spec))
		}
		out = append(out, httprange.ByteRange{Start: s, End: e})
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 48 {
		return s[:48] + "…"
	}
	return s
}

// Allowed reports whether every requested range lies inside the union of the signed ranges
// (docs/protocol.md §14 item 10: a subset of the signed set, not equality, because the default
// client fetches each signed range with its own request). Requests of kind Open or Suffix are
// not allowed: resolve them against the object size first (httprange.Range.Resolve) and pass
// Closed ranges. An empty request list is not allowed.
func Allowed(signed []httprange.ByteRange, requested []httprange.Range) bool {
	closed := make([]httprange.ByteRange, len(requested))
	for i, q := range requested {
		c, ok := q.Closed()
		if !ok {
			return false
		}
		closed[i] = c
	}
	return inside(union(signed), closed)
}

// MinParts is the number of parts a transfer request may always have, however few ranges its
// URL signed (see Parts).
const MinParts = 16

// Parts returns the parts a transfer answer sends for the requested byte ranges (resolved
// against the object, in request order) under a URL that signed the ranges signed: requested
// coalesced (httprange.Coalesce), so that no byte is sent twice. The answer's payload is then
// at most the signed span, whatever the request, plus the multipart framing of at most
// max(signed ranges, MinParts) parts. Errors: ErrDenied (403) when a requested byte lies outside
// the signed set or nothing is requested; ErrExcessive (416) when the coalesced request has
// more parts than the union of the signed ranges and more than MinParts. Stock clients ask for
// one signed range per request, or for all of an entry's ranges at once; each part costs the
// tier a store read, so a request of many small pieces of one signed range is refused.
func Parts(signed, requested []httprange.ByteRange) ([]httprange.ByteRange, error) {
	u := union(signed)
	parts := httprange.Coalesce(requested)
	if len(parts) == 0 || !inside(u, parts) {
		return nil, fmt.Errorf("%w: requested ranges are outside the signed set", ErrDenied)
	}
	if len(parts) > max(len(u), MinParts) {
		return nil, fmt.Errorf("%w: %d parts, %d signed ranges", ErrExcessive, len(parts), len(u))
	}
	return parts, nil
}

// union returns the union of the signed ranges as sorted ranges with gaps between them: signed
// itself when it already is.
func union(signed []httprange.ByteRange) []httprange.ByteRange {
	if len(signed) == 0 || disjointSorted(signed) {
		return signed
	}
	return mergeRanges(signed)
}

// inside reports whether every range of requested lies inside one range of union (sorted,
// disjoint); false when either is empty.
func inside(union, requested []httprange.ByteRange) bool {
	if len(requested) == 0 || len(union) == 0 {
		return false
	}
	for _, c := range requested {
		// The last union range starting at or before c.Start must reach c.End.
		i, found := slices.BinarySearchFunc(union, c.Start, func(r httprange.ByteRange, s uint64) int {
			switch {
			case r.Start < s:
				return -1
			case r.Start > s:
				return 1
			}
			return 0
		})
		if !found {
			i--
		}
		if i < 0 || union[i].End < c.End {
			return false
		}
	}
	return true
}

// disjointSorted reports whether rs is sorted with a gap between neighbours, so that it is its
// own union.
func disjointSorted(rs []httprange.ByteRange) bool {
	for i := 1; i < len(rs); i++ {
		if rs[i-1].End == ^uint64(0) || rs[i-1].End+1 >= rs[i].Start {
			return false
		}
	}
	return true
}

// mergeRanges returns the union of rs as sorted ranges with gaps between them.
func mergeRanges(rs []httprange.ByteRange) []httprange.ByteRange {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b httprange.ByteRange) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	out := s[:1]
	for _, r := range s[1:] {
		last := &out[len(out)-1]
		if last.End == ^uint64(0) || r.Start <= last.End+1 {
			last.End = max(last.End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}
