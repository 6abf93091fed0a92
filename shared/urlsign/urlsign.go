// Package urlsign makes and checks the signed, expiring transfer URLs that reconstruction
// answers hand to clients (xet-protocol.md §2.10). A URL authorizes GETs of a set of byte ranges
// of one stored xorb until it expires; clients fetch it without an Authorization header.
//
// URL form (the path is fixed; the base is the tier's public URL):
//
//	{base}/v1/transfer/xorbs/default/{xorb hash}?r=S-E,S-E,…&x={expiry, Unix seconds}&s={signature}
//
// r lists the signed closed byte ranges in decimal, in the order they were signed. s is the
// unpadded base64url HMAC-SHA256, under the tier's key, of
//
//	"xetcdn-transfer-v1\n" || raw 32-byte xorb hash || "\n" || x || "\n" || r
//
// so the hash, the expiry and the exact range list are all covered. Each tier signs and verifies
// its own URLs with its own key; URLs carry no key id, so rotating the key invalidates the URLs
// in flight and clients refresh them on the resulting 403.
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
	// ErrMalformed: the path or query is not a transfer URL of this package.
	ErrMalformed = fmt.Errorf("%w: malformed", ErrDenied)
	// ErrTampered: the signature does not match the hash, expiry and ranges.
	ErrTampered = fmt.Errorf("%w: bad signature", ErrDenied)
	// ErrExpired: the URL is correctly signed but past its expiry.
	ErrExpired = fmt.Errorf("%w: expired", ErrDenied)
)

const domain = "xetcdn-transfer-v1\n"

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

// Signer signs and verifies transfer URLs. It implements recon.Signer and is safe for
// concurrent use; signing reuses pooled HMAC states, so it allocates nothing in steady state
// beyond growing dst.
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

// AppendURL appends a URL for ranges of xorb, valid for the configured TTL from now.
func (s *Signer) AppendURL(dst []byte, xorb hash.Hash, ranges []httprange.ByteRange) []byte {
	return s.AppendURLExpiring(dst, xorb, ranges, s.now().Add(s.ttl))
}

// TTL is the configured lifetime of a URL.
func (s *Signer) TTL() time.Duration { return s.ttl }

// Expiry returns the expiry AppendURL would give a URL now (now + TTL), rounded up to the next
// multiple of round since the Unix epoch when round is at least a second. Every URL signed with
// one rounded expiry then carries the same x, so an answer signed with it stays byte-identical
// for up to round; such a URL lives between TTL and TTL + round.
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

// At returns a signer (for recon.Encoder) whose URLs all expire at exp.
func (s *Signer) At(exp time.Time) At { return At{s: s, exp: exp} }

// At signs URLs with a fixed expiry; see Signer.At. It is a small value, safe for concurrent use.
type At struct {
	s   *Signer
	exp time.Time
}

// AppendURL appends a URL for ranges of xorb that expires at a's expiry.
func (a At) AppendURL(dst []byte, xorb hash.Hash, ranges []httprange.ByteRange) []byte {
	return a.s.AppendURLExpiring(dst, xorb, ranges, a.exp)
}

// AppendURLExpiring is AppendURL with an explicit expiry (truncated to whole seconds).
func (s *Signer) AppendURLExpiring(dst []byte, xorb hash.Hash, ranges []httprange.ByteRange, exp time.Time) []byte {
	dst = append(dst, s.base...)
	dst = append(dst, PathPrefix...)
	dst = xorb.AppendString(dst)
	dst = append(dst, "?r="...)
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
	dst = strconv.AppendInt(dst, exp.Unix(), 10)
	xEnd := len(dst)
	st := s.pool.Get().(*state)
	sum := st.sign(xorb, dst[xStart:xEnd], dst[rStart:rEnd])
	dst = append(dst, "&s="...)
	dst = base64.RawURLEncoding.AppendEncode(dst, sum)
	s.pool.Put(st)
	return dst
}

// sign returns the MAC of the signed message; the result aliases st.
func (st *state) sign(xorb hash.Hash, exp, ranges []byte) []byte {
	st.mac.Reset()
	b := append(st.buf[:0], domain...)
	b = append(b, xorb[:]...)
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
func (s *Signer) VerifyRequest(r *http.Request, now time.Time) (hash.Hash, []httprange.ByteRange, error) {
	return s.Verify(r.URL.Path, r.URL.RawQuery, now)
}

// Verify checks a transfer URL's path (ending in PathPrefix + hash) and raw query. It returns
// the xorb and the signed ranges, in signed order, or an error wrapping ErrMalformed,
// ErrTampered or ErrExpired (all wrap ErrDenied). The signature is checked before the expiry
// and before the ranges are parsed.
func (s *Signer) Verify(path, rawQuery string, now time.Time) (hash.Hash, []httprange.ByteRange, error) {
	i := strings.LastIndexByte(path, '/')
	if i < 0 || !strings.HasSuffix(path[:i+1], PathPrefix) {
		return hash.Zero, nil, fmt.Errorf("%w: path is not under %s", ErrMalformed, PathPrefix)
	}
	xorb, err := hash.Parse(path[i+1:])
	if err != nil {
		return hash.Zero, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(rawQuery) > MaxQueryLen {
		return hash.Zero, nil, fmt.Errorf("%w: query of %d bytes", ErrMalformed, len(rawQuery))
	}
	var r, x, sig string
	var seen int
	for rest := rawQuery; rest != ""; {
		var kv string
		kv, rest, _ = strings.Cut(rest, "&")
		k, v, _ := strings.Cut(kv, "=")
		var dst *string
		switch k {
		case "r":
			dst = &r
		case "x":
			dst = &x
		case "s":
			dst = &sig
		default:
			continue // tolerate parameters added by proxies or clients
		}
		if strings.ContainsRune(v, '%') {
			// Our URLs need no escaping, but an intermediary may have escaped ',' or '='.
			u, err := url.QueryUnescape(v)
			if err != nil {
				return hash.Zero, nil, fmt.Errorf("%w: parameter %q: %w", ErrMalformed, k, err)
			}
			v = u
		}
		if *dst != "" || v == "" {
			return hash.Zero, nil, fmt.Errorf("%w: parameter %q repeated or empty", ErrMalformed, k)
		}
		*dst = v
		seen++
	}
	if seen != 3 {
		return hash.Zero, nil, fmt.Errorf("%w: want parameters r, x and s", ErrMalformed)
	}
	var mac [sha256.Size]byte
	if base64.RawURLEncoding.DecodedLen(len(sig)) != len(mac) {
		return hash.Zero, nil, fmt.Errorf("%w: signature of %d characters", ErrMalformed, len(sig))
	}
	if _, err := base64.RawURLEncoding.Decode(mac[:], []byte(sig)); err != nil {
		return hash.Zero, nil, fmt.Errorf("%w: signature: %w", ErrMalformed, err)
	}
	st := s.pool.Get().(*state)
	ok := hmac.Equal(st.sign(xorb, []byte(x), []byte(r)), mac[:])
	s.pool.Put(st)
	if !ok {
		return hash.Zero, nil, fmt.Errorf("%w for xorb %s", ErrTampered, xorb)
	}
	exp, err := strconv.ParseInt(x, 10, 64)
	if err != nil {
		return hash.Zero, nil, fmt.Errorf("%w: expiry %q", ErrMalformed, x)
	}
	if now.Unix() > exp {
		return hash.Zero, nil, fmt.Errorf("%w at %s", ErrExpired, time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	ranges, err := parseRanges(r)
	if err != nil {
		return hash.Zero, nil, err
	}
	return xorb, ranges, nil
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
// (xet-protocol.md §14 item 10: a subset of the signed set, not equality, because the default
// client fetches each signed range with its own request). Requests of kind Open or Suffix are
// not allowed: resolve them against the object size first (httprange.Range.Resolve) and pass
// Closed ranges. An empty request list is not allowed.
func Allowed(signed []httprange.ByteRange, requested []httprange.Range) bool {
	if len(requested) == 0 || len(signed) == 0 {
		return false
	}
	union := signed
	if !disjointSorted(signed) {
		union = mergeRanges(signed)
	}
	for _, q := range requested {
		c, ok := q.Closed()
		if !ok {
			return false
		}
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
