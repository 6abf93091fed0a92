package urlsign

import (
	"bytes"
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
	ranges  = []httprange.ByteRange{{Start: 0, End: 131071}, {Start: 200000, End: 299999}}
)

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
	raw := string(s.AppendURL([]byte("prefix:"), xorbH, ranges))
	if !strings.HasPrefix(raw, "prefix:https://edge.test:4443"+PathPrefix+xorbH.String()+"?r=0-131071,200000-299999&x=") {
		t.Fatalf("unexpected URL %s", raw)
	}
	path, q := split(t, strings.TrimPrefix(raw, "prefix:"))
	h, got, err := s.Verify(path, q, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if h != xorbH || !reflect.DeepEqual(got, ranges) {
		t.Fatalf("got %s %v", h, got)
	}
	req := httptest.NewRequest("GET", strings.TrimPrefix(raw, "prefix:"), nil)
	if _, _, err := s.VerifyRequest(req, t0); err != nil {
		t.Fatalf("VerifyRequest: %v", err)
	}
	// A proxy that percent-encodes the separators does not break the URL.
	if _, _, err := s.Verify(path, strings.ReplaceAll(q, ",", "%2C"), t0); err != nil {
		t.Fatalf("escaped query: %v", err)
	}
	// Unknown extra parameters are tolerated.
	if _, _, err := s.Verify(path, q+"&utm=1", t0); err != nil {
		t.Fatalf("extra parameter: %v", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	s := newSigner(t, testKey)
	other := newSigner(t, bytes.Repeat([]byte{8}, 32))
	path, q := split(t, string(s.AppendURL(nil, xorbH, ranges)))
	vals, _ := url.ParseQuery(q)
	with := func(k, v string) string {
		c := url.Values{}
		for kk, vv := range vals {
			c[kk] = vv
		}
		c.Set(k, v)
		return c.Encode()
	}
	otherPath, otherQ := split(t, string(other.AppendURL(nil, xorbH, ranges)))
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
		{"bad signature chars", path, with("s", strings.Repeat("!", 43)), t0, ErrMalformed},
		{"short signature", path, with("s", "abc"), t0, ErrMalformed},
		{"missing signature", path, "r=0-1&x=1", t0, ErrMalformed},
		{"repeated parameter", path, q + "&r=0-1", t0, ErrMalformed},
		{"empty query", path, "", t0, ErrMalformed},
		{"bad escape", path, q + "&r=%zz", t0, ErrMalformed},
		{"wrong route", "/v1/xorbs/default/" + xorbH.String(), q, t0, ErrMalformed},
		{"bad hash", PathPrefix + "zz", q, t0, ErrMalformed},
		{"huge query", path, q + "&p=" + strings.Repeat("a", MaxQueryLen), t0, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.Verify(tc.path, tc.query, tc.now)
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrDenied) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// A correctly signed URL whose range list is malformed (only possible with the key) is still
// rejected after the signature check.
func TestVerifyRejectsSignedGarbage(t *testing.T) {
	s := newSigner(t, testKey)
	for _, r := range []string{"5-4", "a-b", "1", "1-2,,3-4"} {
		st := s.pool.Get().(*state)
		x := "1750000060"
		sig := st.sign(xorbH, []byte(x), []byte(r))
		q := "r=" + r + "&x=" + x + "&s=" + base64.RawURLEncoding.EncodeToString(sig)
		s.pool.Put(st)
		if _, _, err := s.Verify(PathPrefix+xorbH.String(), q, t0); !errors.Is(err, ErrMalformed) {
			t.Errorf("r=%q: err = %v, want ErrMalformed", r, err)
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
	path, q := split(f, string(s.AppendURL(nil, xorbH, ranges)))
	f.Add(path, q)
	f.Add(path, "r=1-2&x=3&s=abc")
	f.Add("/x", "")
	f.Fuzz(func(t *testing.T, path, query string) {
		h, rs, err := s.Verify(path, query, t0)
		if err != nil {
			if !errors.Is(err, ErrDenied) {
				t.Fatalf("error %v does not wrap ErrDenied", err)
			}
			return
		}
		// Anything accepted is exactly what the signer produces for it.
		if len(rs) == 0 || len(rs) > MaxRanges {
			t.Fatalf("accepted %d ranges", len(rs))
		}
		for _, r := range rs {
			if r.End < r.Start {
				t.Fatalf("accepted inverted range %v", r)
			}
		}
		_ = h
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
			buf := s.AppendURL(nil, xorbH, rs)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var dst []byte
				for pb.Next() {
					dst = s.AppendURL(dst[:0], xorbH, rs)
				}
			})
		})
	}
}

func BenchmarkVerify(b *testing.B) {
	s := newSigner(b, testKey)
	path, q := split(b, string(s.AppendURL(nil, xorbH, ranges)))
	b.SetBytes(int64(len(path) + len(q)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Verify(path, q, t0); err != nil {
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

func TestAtSignsFixedExpiry(t *testing.T) {
	s := newSigner(t, testKey)
	exp := t0.Add(90 * time.Second)
	raw := string(s.At(exp).AppendURL(nil, xorbH, ranges))
	if want := string(s.AppendURLExpiring(nil, xorbH, ranges, exp)); raw != want {
		t.Fatalf("At: %s, want %s", raw, want)
	}
	path, q := split(t, raw)
	if _, got, err := s.Verify(path, q, exp); err != nil || !reflect.DeepEqual(got, ranges) {
		t.Fatalf("verify at expiry: %v %v", got, err)
	}
	if _, _, err := s.Verify(path, q, exp.Add(time.Second)); !errors.Is(err, ErrExpired) {
		t.Fatalf("verify after expiry: %v, want ErrExpired", err)
	}
	if s.TTL() != time.Minute {
		t.Fatalf("TTL %v", s.TTL())
	}
}
