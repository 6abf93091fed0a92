package urlsign

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

var (
	t0      = time.Unix(1_750_000_000, 0)
	testKey = bytes.Repeat([]byte{7}, 32)
	xorbH   = hash.Chunk([]byte("xorb"))
	fileH   = hash.Chunk([]byte("file"))
	scope   = "models/acme/llama"
	ranges  = []httprange.ByteRange{{Start: 0, End: 131071}, {Start: 200000, End: 299999}}
)

// sign is the URL of ranges of xorbH for fileH in scope, expiring a minute after t0 (the
// signer's TTL).
func sign(s *Signer, rs []httprange.ByteRange) string {
	return string(s.Bind(scope, fileH, s.Expiry(0)).AppendURL(nil, xorbH, rs))
}

func newSigner(t testing.TB, key []byte) *Signer {
	t.Helper()
	s, err := New(Options{BaseURL: "https://edge.test:4443/", Key: key, TTL: time.Minute, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func split(t testing.TB, raw string) (string, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path, u.RawQuery
}

func TestRoundTrip(t *testing.T) {
	s := newSigner(t, testKey)
	raw := string(s.Bind(scope, fileH, s.Expiry(0)).AppendURL([]byte("prefix:"), xorbH, ranges))
	wantPrefix := "prefix:https://edge.test:4443" + PathPrefix + xorbH.String() + "?f=" + fileH.String() +
		"&c=" + base64.RawURLEncoding.EncodeToString([]byte(scope)) + "&r=0-131071,200000-299999&x="
	if !strings.HasPrefix(raw, wantPrefix) {
		t.Fatalf("unexpected URL %s", raw)
	}
	path, q := split(t, strings.TrimPrefix(raw, "prefix:"))
	g, err := s.Verify(path, q, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := Grant{Xorb: xorbH, File: fileH, Scope: scope, Ranges: ranges}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("got %+v, want %+v", g, want)
	}
	req := httptest.NewRequest("GET", strings.TrimPrefix(raw, "prefix:"), nil)
	if _, err := s.VerifyRequest(req, t0); err != nil {
		t.Fatalf("VerifyRequest: %v", err)
	}
	// A proxy that percent-encodes the separators does not break the URL.
	if _, err := s.Verify(path, strings.ReplaceAll(q, ",", "%2C"), t0); err != nil {
		t.Fatalf("escaped query: %v", err)
	}
	// Unknown extra parameters are tolerated.
	if _, err := s.Verify(path, q+"&utm=1", t0); err != nil {
		t.Fatalf("extra parameter: %v", err)
	}
}

// Any scope — the empty one, one with characters a query would need escaped, a long one —
// travels in the URL without escaping and comes back exactly.
func TestScopesRoundTrip(t *testing.T) {
	s := newSigner(t, testKey)
	for _, sc := range []string{"", "a", "models/acme/x y?&=#%+é\n\x00", strings.Repeat("z", 1024)} {
		raw := string(s.Bind(sc, fileH, s.Expiry(0)).AppendURL(nil, xorbH, ranges[:1]))
		if strings.ContainsAny(raw[strings.IndexByte(raw, '?'):], " #%+\"\\\n") {
			t.Errorf("scope %q: URL needs escaping: %s", sc, raw)
		}
		path, q := split(t, raw)
		g, err := s.Verify(path, q, t0)
		if err != nil || g.Scope != sc || g.File != fileH {
			t.Errorf("scope %q: got %+v, %v", sc, g, err)
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	s := newSigner(t, testKey)
	other := newSigner(t, bytes.Repeat([]byte{8}, 32))
	path, q := split(t, sign(s, ranges))
	vals, _ := url.ParseQuery(q)
	with := func(k, v string) string {
		c := url.Values{}
		for kk, vv := range vals {
			c[kk] = vv
		}
		c.Set(k, v)
		return c.Encode()
	}
	otherPath, otherQ := split(t, sign(other, ranges))
	without := func(k string) string {
		c := url.Values{}
		for kk, vv := range vals {
			if kk != k {
				c[kk] = vv
			}
		}
		return c.Encode()
	}
	// The form before file and scope were signed: r, x and s, correctly signed with the key.
	mac := hmac.New(sha256.New, testKey)
	mac.Write([]byte("xetcdn-transfer-v1\n" + string(xorbH[:]) + "\n" + vals.Get("x") + "\n" + vals.Get("r")))
	oldForm := "r=" + vals.Get("r") + "&x=" + vals.Get("x") + "&s=" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	tests := []struct {
		name        string
		path, query string
		now         time.Time
		want        error
	}{
		{"expired", path, q, t0.Add(time.Minute + time.Second), ErrExpired},
		{"other key", otherPath, otherQ, t0, ErrTampered},
		{"widened range", path, with("r", "0-131071,200000-399999"), t0, ErrTampered},
		{"dropped range", path, with("r", "0-131071"), t0, ErrTampered},
		{"extended expiry", path, with("x", "9999999999"), t0, ErrTampered},
		{"other xorb", PathPrefix + hash.Chunk([]byte("other")).String(), q, t0, ErrTampered},
		{"other file", path, with("f", hash.Chunk([]byte("other")).String()), t0, ErrTampered},
		{"other scope", path, with("c", base64.RawURLEncoding.EncodeToString([]byte("models/acme/other"))), t0, ErrTampered},
		{"empty scope", path, with("c", ""), t0, ErrTampered},
		{"bad file", path, with("f", "zz"), t0, ErrMalformed},
		{"missing file", path, without("f"), t0, ErrMalformed},
		{"missing scope", path, without("c"), t0, ErrMalformed},
		{"earlier form", path, oldForm, t0, ErrMalformed},
		{"bad signature chars", path, with("s", strings.Repeat("!", 43)), t0, ErrMalformed},
		{"short signature", path, with("s", "abc"), t0, ErrMalformed},
		{"missing signature", path, without("s"), t0, ErrMalformed},
		{"repeated parameter", path, q + "&r=0-1", t0, ErrMalformed},
		{"empty query", path, "", t0, ErrMalformed},
		{"bad escape", path, q + "&r=%zz", t0, ErrMalformed},
		{"wrong route", "/v1/xorbs/default/" + xorbH.String(), q, t0, ErrMalformed},
		{"bad hash", PathPrefix + "zz", q, t0, ErrMalformed},
		{"huge query", path, q + "&p=" + strings.Repeat("a", MaxQueryLen), t0, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Verify(tc.path, tc.query, tc.now)
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrDenied) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// A correctly signed URL whose range list or scope is malformed (only possible with the key)
// is still rejected after the signature check.
func TestVerifyRejectsSignedGarbage(t *testing.T) {
	s := newSigner(t, testKey)
	good := base64.RawURLEncoding.EncodeToString([]byte(scope))
	for _, tc := range []struct{ r, c string }{
		{"5-4", good}, {"a-b", good}, {"1", good}, {"1-2,,3-4", good},
		{"0-1", "!!"}, {"0-1", "a"}, // not base64url
	} {
		st := s.pool.Get().(*state)
		x := "1750000060"
		sig := st.sign(xorbH, fileH, tc.c, []byte(x), []byte(tc.r))
		q := "f=" + fileH.String() + "&c=" + tc.c + "&r=" + tc.r + "&x=" + x + "&s=" + base64.RawURLEncoding.EncodeToString(sig)
		s.pool.Put(st)
		if _, err := s.Verify(PathPrefix+xorbH.String(), q, t0); !errors.Is(err, ErrMalformed) {
			t.Errorf("r=%q c=%q: err = %v, want ErrMalformed", tc.r, tc.c, err)
		}
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Options{Key: make([]byte, 16)}); err == nil {
		t.Error("short key accepted")
	}
	if _, err := New(Options{Key: testKey, TTL: -time.Second}); err == nil {
		t.Error("negative TTL accepted")
	}
}

func TestAllowed(t *testing.T) {
	br := func(s, e uint64) httprange.ByteRange { return httprange.ByteRange{Start: s, End: e} }
	cl := func(s, e uint64) httprange.Range { return httprange.Range{Kind: httprange.Closed, Start: s, End: e} }
	signed := []httprange.ByteRange{br(0, 99), br(200, 299), br(400, 499)}
	tests := []struct {
		name   string
		signed []httprange.ByteRange
		req    []httprange.Range
		want   bool
	}{
		{"exact single", signed, []httprange.Range{cl(200, 299)}, true},
		{"exact set (multirange client)", signed, []httprange.Range{cl(0, 99), cl(200, 299), cl(400, 499)}, true},
		{"sub-range", signed, []httprange.Range{cl(210, 220)}, true},
		{"first and last byte", signed, []httprange.Range{cl(0, 0), cl(499, 499)}, true},
		{"spans a gap", signed, []httprange.Range{cl(50, 250)}, false},
		{"one byte past", signed, []httprange.Range{cl(200, 300)}, false},
		{"in a gap", signed, []httprange.Range{cl(150, 160)}, false},
		{"before all", []httprange.ByteRange{br(10, 20)}, []httprange.Range{cl(0, 5)}, false},
		{"after all", signed, []httprange.Range{cl(500, 500)}, false},
		{"one bad among good", signed, []httprange.Range{cl(0, 99), cl(100, 100)}, false},
		{"open request", signed, []httprange.Range{{Kind: httprange.Open, Start: 0}}, false},
		{"suffix request", signed, []httprange.Range{{Kind: httprange.Suffix, N: 1}}, false},
		{"no request", signed, nil, false},
		{"nothing signed", nil, []httprange.Range{cl(0, 0)}, false},
		{"adjacent signed ranges form one", []httprange.ByteRange{br(0, 9), br(10, 19)}, []httprange.Range{cl(5, 15)}, true},
		{"unsorted overlapping signed", []httprange.ByteRange{br(50, 80), br(0, 60)}, []httprange.Range{cl(0, 80)}, true},
		{"unsorted with gap", []httprange.ByteRange{br(50, 80), br(0, 40)}, []httprange.Range{cl(30, 60)}, false},
		{"max end", []httprange.ByteRange{br(0, ^uint64(0)), br(5, 6)}, []httprange.Range{cl(1, ^uint64(0))}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Allowed(tc.signed, tc.req); got != tc.want {
				t.Fatalf("Allowed = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	s := newSigner(f, testKey)
	path, q := split(f, sign(s, ranges))
	f.Add(path, q)
	f.Add(path, "r=1-2&x=3&s=abc")
	f.Add(path, "f="+fileH.String()+"&c=&r=1-2&x=3&s=abc")
	f.Add("/x", "")
	f.Fuzz(func(t *testing.T, path, query string) {
		g, err := s.Verify(path, query, t0)
		if err != nil {
			if !errors.Is(err, ErrDenied) {
				t.Fatalf("error %v does not wrap ErrDenied", err)
			}
			return
		}
		if len(g.Ranges) == 0 || len(g.Ranges) > MaxRanges {
			t.Fatalf("accepted %d ranges", len(g.Ranges))
		}
		for _, r := range g.Ranges {
			if r.End < r.Start {
				t.Fatalf("accepted inverted range %v", r)
			}
		}
		// Anything accepted is exactly what the signer produces for its grant.
		re := string(s.Bind(g.Scope, g.File, s.Expiry(0)).AppendURL(nil, g.Xorb, g.Ranges))
		p2, q2 := split(t, re)
		g2, err := s.Verify(p2, q2, t0)
		if err != nil || !reflect.DeepEqual(g, g2) {
			t.Fatalf("grant %+v signed again verifies as %+v, %v", g, g2, err)
		}
	})
}

// FuzzBind signs URLs for arbitrary scopes, files and ranges: each verifies to exactly its grant,
// and changing any of the signed fields is refused.
func FuzzBind(f *testing.F) {
	s := newSigner(f, testKey)
	f.Add(scope, fileH[:], uint64(0), uint64(131071), uint64(200000), uint64(299999))
	f.Add("", make([]byte, 32), uint64(5), uint64(5), uint64(0), uint64(1))
	f.Add("a/b c?d=e&f", []byte("short"), uint64(1<<62), uint64(1<<63-1), uint64(9), uint64(8))
	f.Fuzz(func(t *testing.T, sc string, file []byte, s1, e1, s2, e2 uint64) {
		var fh hash.Hash
		copy(fh[:], file)
		var rs []httprange.ByteRange
		for _, r := range [][2]uint64{{s1, e1}, {s2, e2}} {
			if r[0] <= r[1] {
				rs = append(rs, httprange.ByteRange{Start: r[0], End: r[1]})
			}
		}
		if len(rs) == 0 {
			return
		}
		raw := string(s.Bind(sc, fh, s.Expiry(0)).AppendURL(nil, xorbH, rs))
		path, q := split(t, raw)
		g, err := s.Verify(path, q, t0)
		if err != nil {
			t.Fatalf("scope %q file %s ranges %v: %v (%s)", sc, fh, rs, err, raw)
		}
		if want := (Grant{Xorb: xorbH, File: fh, Scope: sc, Ranges: rs}); !reflect.DeepEqual(g, want) {
			t.Fatalf("got %+v, want %+v", g, want)
		}
		other := fh
		other[0] ^= 1
		vals, _ := url.ParseQuery(q)
		for _, change := range []struct{ k, v string }{
			{"f", other.String()},
			{"c", base64.RawURLEncoding.EncodeToString([]byte(sc + "x"))},
			{"r", vals.Get("r") + ",0-0"},
		} {
			c := url.Values{}
			for k, v := range vals {
				c[k] = v
			}
			c.Set(change.k, change.v)
			if _, err := s.Verify(path, c.Encode(), t0); !errors.Is(err, ErrTampered) {
				t.Fatalf("changed %s: err = %v, want ErrTampered", change.k, err)
			}
		}
	})
}

func BenchmarkAppendURL(b *testing.B) {
	s := newSigner(b, testKey)
	for _, n := range []int{1, 16, 256} {
		rs := make([]httprange.ByteRange, n)
		for i := range rs {
			rs[i] = httprange.ByteRange{Start: uint64(i) * 300000, End: uint64(i)*300000 + 131071}
		}
		b.Run(strconv.Itoa(n)+"ranges", func(b *testing.B) {
			bound := s.Bind(scope, fileH, s.Expiry(0))
			buf := bound.AppendURL(nil, xorbH, rs)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var dst []byte
				for pb.Next() {
					dst = bound.AppendURL(dst[:0], xorbH, rs)
				}
			})
		})
	}
}

func BenchmarkVerify(b *testing.B) {
	s := newSigner(b, testKey)
	path, q := split(b, sign(s, ranges))
	b.SetBytes(int64(len(path) + len(q)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Verify(path, q, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func TestExpiryRounded(t *testing.T) {
	for _, tc := range []struct {
		now   time.Time
		ttl   time.Duration
		round time.Duration
		want  int64 // Unix seconds
	}{
		{time.Unix(1000, 0), time.Minute, 0, 1060},
		{time.Unix(1000, 5), time.Minute, 0, 1060}, // exact: the expiry truncates like AppendURL's
		{time.Unix(1000, 0), time.Minute, time.Millisecond, 1060},
		{time.Unix(1000, 0), time.Minute, time.Minute, 1080},
		{time.Unix(1020, 0), time.Minute, time.Minute, 1080},      // already on a boundary
		{time.Unix(1020, 1), time.Minute, time.Minute, 1140},      // a nanosecond past it
		{time.Unix(1079, 999), time.Hour, 10 * time.Second, 4680}, // 4679.000000999 -> 4680
	} {
		now := tc.now
		s, err := New(Options{BaseURL: "https://e", Key: testKey, TTL: tc.ttl, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		got := s.Expiry(tc.round)
		if got.Unix() != tc.want {
			t.Errorf("now %v ttl %v round %v: expiry %d, want %d", tc.now, tc.ttl, tc.round, got.Unix(), tc.want)
		}
		if tc.round >= time.Second && (got.Before(now.Add(tc.ttl)) || got.After(now.Add(tc.ttl+tc.round))) {
			t.Errorf("now %v ttl %v round %v: expiry %v outside [now+TTL, now+TTL+round]", tc.now, tc.ttl, tc.round, got)
		}
	}
}

func TestBindSignsFixedExpiry(t *testing.T) {
	s := newSigner(t, testKey)
	exp := t0.Add(90 * time.Second)
	raw := string(s.Bind(scope, fileH, exp).AppendURL(nil, xorbH, ranges))
	if !strings.Contains(raw, "&x="+strconv.FormatInt(exp.Unix(), 10)+"&") {
		t.Fatalf("URL %s does not expire at %d", raw, exp.Unix())
	}
	path, q := split(t, raw)
	if g, err := s.Verify(path, q, exp); err != nil || !reflect.DeepEqual(g.Ranges, ranges) {
		t.Fatalf("verify at expiry: %+v %v", g, err)
	}
	if _, err := s.Verify(path, q, exp.Add(time.Second)); !errors.Is(err, ErrExpired) {
		t.Fatalf("verify after expiry: %v, want ErrExpired", err)
	}
	if s.TTL() != time.Minute {
		t.Fatalf("TTL %v", s.TTL())
	}
	// WithFile changes the file only.
	other := hash.Chunk([]byte("other file"))
	path, q = split(t, string(s.Bind(scope, fileH, exp).WithFile(other).AppendURL(nil, xorbH, ranges)))
	if g, err := s.Verify(path, q, t0); err != nil || g.File != other || g.Scope != scope {
		t.Fatalf("WithFile: %+v %v", g, err)
	}
}

func TestParts(t *testing.T) {
	br := func(s, e uint64) httprange.ByteRange { return httprange.ByteRange{Start: s, End: e} }
	rs := func(r ...httprange.ByteRange) []httprange.ByteRange { return r }
	signed := rs(br(0, 99), br(200, 299), br(400, 499))
	many := make([]httprange.ByteRange, 200)
	for i := range many {
		many[i] = br(0, 99)
	}
	// pieces(n, at, step) is n ranges of 10 bytes starting at at, one every step bytes.
	pieces := func(n int, at, step uint64) []httprange.ByteRange {
		out := make([]httprange.ByteRange, n)
		for i := range out {
			out[i] = br(at+uint64(i)*step, at+uint64(i)*step+9)
		}
		return out
	}
	const nw = MinParts + 4
	wide := pieces(nw, 0, 200)                           // nw signed ranges with gaps
	split := append(rs(br(0, 3), br(6, 9)), wide[1:]...) // nw+1 parts inside them
	adjacent := pieces(nw, 0, 10)                        // nw signed ranges that touch: one
	inOne := pieces(MinParts+1, 0, 11)                   // MinParts+1 parts inside 0-199
	tests := []struct {
		name      string
		signed    []httprange.ByteRange
		requested []httprange.ByteRange
		want      []httprange.ByteRange
		err       error
	}{
		{"one signed range", signed, rs(br(200, 299)), rs(br(200, 299)), nil},
		{"every signed range, in order (multi-range clients)", signed, signed, signed, nil},
		{"disjoint, out of order, kept as asked", signed, rs(br(400, 410), br(0, 9)), rs(br(400, 410), br(0, 9)), nil},
		{"200 copies of a range are one part", rs(br(0, 99)), many, rs(br(0, 99)), nil},
		{"overlapping", signed, rs(br(200, 260), br(250, 299)), rs(br(200, 299)), nil},
		{"adjacent", signed, rs(br(0, 49), br(50, 99)), rs(br(0, 99)), nil},
		{"merged part takes its first range's place", signed, rs(br(400, 499), br(0, 9), br(450, 460)), rs(br(400, 499), br(0, 9)), nil},
		{"outside", signed, rs(br(0, 100)), nil, ErrDenied},
		{"nothing asked", signed, nil, nil, ErrDenied},
		{"MinParts pieces of one signed range", rs(br(0, 999)), inOne[:MinParts], inOne[:MinParts], nil},
		{"more pieces than MinParts", rs(br(0, 999)), inOne, nil, ErrExcessive},
		{"as many parts as signed ranges", wide, wide, wide, nil},
		{"more parts than signed ranges", wide, split, nil, ErrExcessive},
		{"signed ranges that merge count once", adjacent, inOne, nil, ErrExcessive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parts(tc.signed, tc.requested)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parts = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := Parts(rs(br(0, 999)), inOne); !errors.Is(err, httprange.ErrUnsatisfiable) {
		t.Errorf("ErrExcessive does not wrap httprange.ErrUnsatisfiable (416): %v", err)
	}
}
