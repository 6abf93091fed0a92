package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

var errTier = errors.New("tier: store down")

func TestStatus(t *testing.T) {
	e := NewErrors(ErrorsOptions{Extra: []Rule{{errTier, http.StatusServiceUnavailable, "store_down"}}})
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("upload: %w", xorb.ErrHashMismatch), 400, "hash_mismatch"},
		{fmt.Errorf("x: %w", xorb.ErrCorrupt), 400, "bad_xorb"},
		{xorb.ErrEmpty, 400, "bad_xorb"},
		{xorb.ErrTooLarge, 413, "too_large"},
		{shard.ErrCorrupt, 400, "bad_shard"},
		{shard.ErrTooLarge, 413, "too_large"},
		{hash.ErrSyntax, 400, "bad_hash"},
		{auth.ErrMissing, 401, "unauthorized"},
		{fmt.Errorf("%w: x", auth.ErrExpired), 401, "token_expired"},
		{auth.ErrBadSignature, 401, "unauthorized"},
		{auth.ErrInsufficient, 403, "forbidden"},
		{ErrNotFound, 404, "not_found"},
		{urlsign.ErrExpired, 403, "transfer_denied"},
		{httprange.ErrTooMany, 416, "bad_range"},
		{fmt.Errorf("%w: %w", recon.ErrRangeNotSatisfiable, httprange.ErrUnsatisfiable), 416, "range_not_satisfiable"},
		{ErrTimeout, 408, "too_slow"},
		{ErrTooLarge, 413, "too_large"},
		{&http.MaxBytesError{Limit: 1}, 413, "too_large"},
		{ErrRangeNotSatisfiable, 416, "range_not_satisfiable"},
		{ErrUnavailable, 503, "unavailable"},
		{fmt.Errorf("put: %w", errTier), 503, "store_down"},
		{context.Canceled, 499, "client_closed"},
		{errors.New("boom"), 500, "internal"},
	}
	for _, tc := range tests {
		st, code := e.Status(tc.err)
		if st != tc.status || code != tc.code {
			t.Errorf("Status(%v) = %d %s, want %d %s", tc.err, st, code, tc.status, tc.code)
		}
	}
}

func TestWrite(t *testing.T) {
	var logBuf bytes.Buffer
	e := NewErrors(ErrorsOptions{Log: slog.New(slog.NewJSONHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		RetryAfter: 1500 * time.Millisecond, Extra: []Rule{{errTier, http.StatusServiceUnavailable, "store_down"},
			{errGateway, http.StatusBadGateway, "origin_unavailable"}}})
	tests := []struct {
		err        error
		status     int
		retryAfter string
		msg        string
		logged     bool // the error's text is in the log
	}{
		{fmt.Errorf("%w: prefix %q", ErrBadRequest, "x"), 400, "", `bad request: prefix "x"`, false},
		{fmt.Errorf("%w: token is for scope %q, not %q", auth.ErrInsufficient, "a/b", "c/d"), 403, "",
			`auth: insufficient access: token is for scope "a/b", not "c/d"`, false},
		{ErrUnavailable, 503, "2", "service unavailable", true},
		{errors.New("secret internals"), 500, "", "internal error", true},
		// What a driver, a store or the origin says about the server's state stays in the log.
		{fmt.Errorf("file %s: %w: %w", "abc", ErrNotFound, errors.New("sql: no rows in result set")), 404, "", "not found", true},
		{fmt.Errorf("%w: HEAD /internal/v1/files/abc?scope=models%%2Fa%%2Fb", ErrNotFound), 404, "", "not found", true},
		{fmt.Errorf("get xorbs/default/abc: %w: [0, 9) of 8 bytes", ErrRangeNotSatisfiable), 416, "", "range not satisfiable", true},
		{fmt.Errorf("index: %w: dial tcp 10.0.0.5:5432: refused", errTier), 503, "2", "service unavailable", true},
		{fmt.Errorf("%w: GET /internal/v1/layouts?h=abc: status 500", errGateway), 502, "",
			"bad gateway: the origin failed; retry later", true},
	}
	for _, tc := range tests {
		logBuf.Reset()
		rec := httptest.NewRecorder()
		e.Write(rec, httptest.NewRequest("GET", "/x", nil), tc.err)
		if rec.Code != tc.status || rec.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("%v: status %d retry-after %q", tc.err, rec.Code, rec.Header().Get("Retry-After"))
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type %q", ct)
		}
		var body ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error != tc.msg || body.Code == "" {
			t.Errorf("%v: body %q (%v), want message %q", tc.err, rec.Body.String(), err, tc.msg)
		}
		var logged struct{ Err string }
		if tc.logged {
			if err := json.Unmarshal(logBuf.Bytes(), &logged); err != nil {
				t.Errorf("%v: log %q: %v", tc.err, logBuf.String(), err)
			}
		}
		if got := logged.Err == tc.err.Error(); got != tc.logged {
			t.Errorf("%v: logged = %v (log %q)", tc.err, got, logBuf.String())
		}
	}
}

var errGateway = errors.New("origin: unavailable")

func TestRequestID(t *testing.T) {
	var seen string
	h := WithRequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = RequestID(r.Context()) }))
	tests := []struct {
		in   string
		keep bool
	}{{"", false}, {"abc-123", true}, {"bad id", false}, {strings.Repeat("a", 200), false}}
	for _, tc := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		if tc.in != "" {
			r.Header.Set(RequestIDHeader, tc.in)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		got := rec.Header().Get(RequestIDHeader)
		if got == "" || got != seen || (got == tc.in) != tc.keep {
			t.Errorf("in %q: header %q, context %q", tc.in, got, seen)
		}
	}
}

// stepClock advances by step on every call.
type stepClock struct {
	t    time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

type fakeDeadliner struct{ set []time.Time }

func (f *fakeDeadliner) SetReadDeadline(t time.Time) error { f.set = append(f.set, t); return nil }

// oneByteReader returns one byte per Read.
type oneByteReader struct{ n int }

func (r *oneByteReader) Read(b []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	r.n--
	b[0] = 'x'
	return 1, nil
}

func TestPaceReader(t *testing.T) {
	tests := []struct {
		name    string
		step    time.Duration // clock advance per clock read (two reads per Read)
		bytes   int
		floor   int64
		wantErr bool
	}{
		{"fast enough", time.Millisecond, 1000, 100, false},      // 1 byte per 2 ms = 500 B/s
		{"too slow", 50 * time.Millisecond, 1000, 100, true},     // 10 B/s
		{"floor disabled", time.Second, 100, -1, false},          // anything goes
		{"short body fast", time.Millisecond, 3, 1 << 20, false}, // ends inside the first window
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &stepClock{t: time.Unix(0, 0), step: tc.step}
			p := NewPaceReader(&oneByteReader{n: tc.bytes}, &fakeDeadliner{}, PaceOptions{Floor: tc.floor, Window: time.Second, Now: c.now})
			_, err := io.Copy(io.Discard, p)
			if tc.wantErr != errors.Is(err, ErrTimeout) {
				t.Fatalf("err = %v, want timeout %v", err, tc.wantErr)
			}
		})
	}
}

type deadlineReader struct{}

func (deadlineReader) Read([]byte) (int, error) { return 0, os.ErrDeadlineExceeded }

func TestPaceReaderStall(t *testing.T) {
	dl := &fakeDeadliner{}
	start := time.Unix(100, 0)
	p := NewPaceReader(deadlineReader{}, dl, PaceOptions{Floor: 10, Window: time.Second, Now: func() time.Time { return start }})
	if _, err := p.Read(make([]byte, 8)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("stall: %v", err)
	}
	if len(dl.set) != 1 || !dl.set[0].Equal(start.Add(time.Second)) {
		t.Fatalf("deadlines set: %v", dl.set)
	}
}

// bodyServer answers with the status of ReadBody's error and echoes the length read.
func bodyServer(t *testing.T, o BodyOptions) *httptest.Server {
	e := NewErrors(ErrorsOptions{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := ReadBody(w, r, o)
		if err != nil {
			e.Write(w, r, err)
			return
		}
		WriteJSON(w, 200, map[string]int{"n": len(b)})
	}))
	t.Cleanup(s.Close)
	return s
}

func TestReadBodyHTTP(t *testing.T) {
	s := bodyServer(t, BodyOptions{Limit: 1000})
	tests := []struct {
		name   string
		body   io.Reader
		length int64 // -1: chunked
		status int
	}{
		{"exact", bytes.NewReader(make([]byte, 1000)), 1000, 200},
		{"content-length over limit", bytes.NewReader(make([]byte, 1001)), 1001, 413},
		{"chunked over limit", io.MultiReader(bytes.NewReader(make([]byte, 1001))), -1, 413},
		{"chunked under", io.MultiReader(bytes.NewReader(make([]byte, 10))), -1, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", s.URL, tc.body)
			req.ContentLength = tc.length
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}

// rawPost sends head+partial body on a raw connection, then runs after() and reads the answer.
func rawPost(t *testing.T, addr string, contentLength int, partial []byte, closeWrite bool) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", contentLength)
	c.Write(partial)
	if closeWrite {
		c.(*net.TCPConn).CloseWrite()
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestReadBodyStalledClient(t *testing.T) {
	// The client sends 10 of 1000 bytes and then nothing; the read deadline fires after one
	// window without reaching the floor.
	s := bodyServer(t, BodyOptions{Limit: 1 << 20, Pace: PaceOptions{Floor: 1 << 20, Window: 50 * time.Millisecond}})
	got := rawPost(t, s.Listener.Addr().String(), 1000, make([]byte, 10), false)
	if !strings.HasPrefix(got, "HTTP/1.1 408") || !strings.Contains(got, `"code":"too_slow"`) {
		t.Fatalf("answer %q", got)
	}
}

func TestReadBodyTruncated(t *testing.T) {
	s := bodyServer(t, BodyOptions{Limit: 1 << 20})
	got := rawPost(t, s.Listener.Addr().String(), 1000, make([]byte, 10), true)
	if !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Fatalf("answer %q", got)
	}
}

func BenchmarkPaceReader(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		p := NewPaceReader(bytes.NewReader(buf), nil, PaceOptions{})
		if _, err := io.Copy(io.Discard, p); err != nil {
			b.Fatal(err)
		}
	}
}
