package httpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/promtest"
)

// testWrapper is a Wrapper whose Authorize accepts the bearer tokens "read" and "admin" (as
// that access, scope "s") and refuses the others.
func testWrapper(log *slog.Logger) *Wrapper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Wrapper{Errors: httpapi.NewErrors(httpapi.ErrorsOptions{}), Log: log,
		Authorize: func(r *http.Request, need auth.Access) (*auth.Claims, error) {
			tok := auth.BearerToken(r)
			if tok == "" {
				return nil, auth.ErrMissing
			}
			a, err := auth.ParseAccess(tok)
			if err != nil {
				return nil, auth.ErrMalformed
			}
			if !a.Covers(need) {
				return nil, fmt.Errorf("%w: %s", auth.ErrInsufficient, a)
			}
			return &auth.Claims{Scope: "s", Access: a}, nil
		},
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"route", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duration"}, []string{"route"}),
		Served:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "served"}, []string{"proto"})}
}

func serve(h http.Handler, method, target, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestWrap: a handler's error before its answer is mapped (status and JSON body), the token
// check runs only for routes that need access and puts the claims in the context, and every
// request is counted by route and status, with its body bytes by protocol.
func TestWrap(t *testing.T) {
	wr := testWrapper(nil)
	var seen *auth.Claims
	ok := wr.Wrap("GET /ok", auth.Read, func(w http.ResponseWriter, r *http.Request) error {
		seen = Claims(r.Context())
		_, err := io.WriteString(w, "hello")
		return err
	})
	missing := wr.Wrap("GET /missing", "", func(w http.ResponseWriter, r *http.Request) error {
		if Claims(r.Context()) != nil {
			t.Error("claims on a route without a token")
		}
		return fmt.Errorf("%w: no such thing", httpapi.ErrNotFound)
	})
	if w := serve(ok, "GET", "/ok", "read"); w.Code != 200 || w.Body.String() != "hello" {
		t.Fatalf("read token: %d %q", w.Code, w.Body)
	}
	if seen == nil || seen.Scope != "s" || seen.Access != auth.Read {
		t.Fatalf("claims in the handler: %+v", seen)
	}
	seen = nil
	if w := serve(ok, "GET", "/ok", ""); w.Code != 401 || !strings.Contains(w.Body.String(), `"code"`) {
		t.Fatalf("no token: %d %q", w.Code, w.Body)
	}
	if seen != nil {
		t.Fatal("the handler ran without a token")
	}
	if w := serve(missing, "GET", "/missing", ""); w.Code != 404 {
		t.Fatalf("not found: %d %q", w.Code, w.Body)
	}
	for _, c := range []struct {
		route, code string
		want        float64
	}{{"GET /ok", "200", 1}, {"GET /ok", "401", 1}, {"GET /missing", "404", 1}} {
		if got := promtest.Counter(t, wr.Requests.WithLabelValues(c.route, c.code)); got != c.want {
			t.Errorf("requests{%s,%s} = %v, want %v", c.route, c.code, got, c.want)
		}
	}
	if n := promtest.HistogramCount(t, wr.Duration.WithLabelValues("GET /ok")); n != 2 {
		t.Errorf("duration{GET /ok} observed %d requests, want 2", n)
	}
	if got, min := promtest.Counter(t, wr.Served.WithLabelValues("h1")), float64(len("hello")); got <= min {
		t.Errorf("served{h1} = %v, want the body and the error bodies (> %v)", got, min)
	}
}

// TestWrapAfterAnswerStarted: an error after the answer started keeps the status written, is
// logged with the route and request id, and is counted under that status; a cancelled request
// is not logged.
func TestWrapAfterAnswerStarted(t *testing.T) {
	var logged strings.Builder
	wr := testWrapper(slog.New(slog.NewTextHandler(&logged, nil)))
	h := httpapi.WithRequestID(wr.Wrap("GET /stream", "", func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, "part")
		if r.URL.Query().Get("cancel") != "" {
			return context.Canceled
		}
		return errors.New("backend broke mid-stream")
	}))
	w := serve(h, "GET", "/stream", "")
	if w.Code != http.StatusPartialContent || w.Body.String() != "part" {
		t.Fatalf("got %d %q; the error must not write a second answer", w.Code, w.Body)
	}
	out := logged.String()
	if !strings.Contains(out, "request failed after the answer started") || !strings.Contains(out, `route="GET /stream"`) ||
		!strings.Contains(out, "request_id=") || !strings.Contains(out, "backend broke mid-stream") {
		t.Fatalf("log: %s", out)
	}
	logged.Reset()
	serve(h, "GET", "/stream?cancel=1", "")
	if logged.Len() != 0 {
		t.Fatalf("a cancelled request was logged: %s", logged.String())
	}
	if got := promtest.Counter(t, wr.Requests.WithLabelValues("GET /stream", "206")); got != 2 {
		t.Fatalf("requests{GET /stream,206} = %v, want 2", got)
	}
	if got := promtest.Counter(t, wr.Served.WithLabelValues("h1")); got != 8 {
		t.Fatalf("served{h1} = %v, want 8", got)
	}
}

// plainWriter is a ResponseWriter without ReadFrom (as HTTP/2 and HTTP/3 writers are).
type plainWriter struct{ *httptest.ResponseRecorder }

func (w plainWriter) Write(b []byte) (int, error) { return w.ResponseRecorder.Write(b) }

// readerFromWriter is a ResponseWriter with ReadFrom (as net/http's HTTP/1.1 writer is).
type readerFromWriter struct {
	*httptest.ResponseRecorder
	calls int
}

func (w *readerFromWriter) ReadFrom(r io.Reader) (int64, error) {
	w.calls++
	return io.Copy(w.ResponseRecorder, r)
}

// TestRecorder: the recorder notes the first status (200 for a body without one), counts body
// bytes written with Write and ReadFrom, uses the writer's own ReadFrom when it has one, and
// copies through one pooled buffer otherwise.
func TestRecorder(t *testing.T) {
	rec := NewRecorder(plainWriter{httptest.NewRecorder()})
	if rec.Status() != 0 {
		t.Fatal("status before anything was written")
	}
	body := strings.Repeat("x", 3*copyBufLen+7)
	if n, err := rec.ReadFrom(strings.NewReader(body)); err != nil || n != int64(len(body)) {
		t.Fatalf("ReadFrom = %d, %v", n, err)
	}
	if rec.buf == nil {
		t.Fatal("no pooled buffer used for a writer without ReadFrom")
	}
	buf := rec.buf
	if _, err := rec.ReadFrom(strings.NewReader("yz")); err != nil || rec.buf != buf {
		t.Fatal("a second ReadFrom took another buffer")
	}
	rec.WriteHeader(500) // too late: the status is already 200
	if _, err := rec.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	if rec.Status() != 200 || rec.Bytes() != int64(len(body)+3) {
		t.Fatalf("status %d bytes %d", rec.Status(), rec.Bytes())
	}
	rec.Release()
	if rec.buf != nil {
		t.Fatal("Release kept the buffer")
	}
	if got := rec.Unwrap().(plainWriter).Body.Len(); got != len(body)+3 {
		t.Fatalf("underlying writer got %d bytes", got)
	}

	rf := &readerFromWriter{ResponseRecorder: httptest.NewRecorder()}
	rec = NewRecorder(rf)
	rec.WriteHeader(http.StatusPartialContent)
	if n, err := rec.ReadFrom(strings.NewReader(body)); err != nil || n != int64(len(body)) {
		t.Fatalf("ReadFrom = %d, %v", n, err)
	}
	if rf.calls != 1 || rec.buf != nil {
		t.Fatalf("the writer's own ReadFrom was not used (calls %d, pooled buffer %v)", rf.calls, rec.buf != nil)
	}
	if rec.Status() != http.StatusPartialContent || rec.Bytes() != int64(len(body)) || rf.Code != http.StatusPartialContent {
		t.Fatalf("status %d/%d bytes %d", rec.Status(), rf.Code, rec.Bytes())
	}
}

func TestAltSvcAndProto(t *testing.T) {
	h := AltSvc(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), 8443)
	if got := serve(h, "GET", "/", "").Header().Get("Alt-Svc"); got != `h3=":8443"; ma=86400` {
		t.Fatalf("Alt-Svc %q", got)
	}
	for major, want := range map[int]string{1: "h1", 2: "h2", 3: "h3"} {
		if got := Proto(&http.Request{ProtoMajor: major}); got != want {
			t.Errorf("Proto(%d) = %s, want %s", major, got, want)
		}
	}
}

// TestAdmin: /metrics is open, /debug/pprof/ needs an admin token (401 without one, 403 with
// another access), extra routes are served, other paths are 404, and every answer has a
// request id.
func TestAdmin(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_admin_things_total"})
	reg.MustRegister(c)
	c.Inc()
	wr := testWrapper(nil)
	h := Admin(reg, wr.Wrap, func(m *http.ServeMux) {
		m.Handle("POST /admin/v1/thing", wr.Wrap("POST /admin/v1/thing", auth.Admin, func(w http.ResponseWriter, r *http.Request) error {
			httpapi.WriteRawJSON(w, http.StatusOK, []byte(`{"done":true}`))
			return nil
		}))
	})
	for _, c := range []struct {
		method, path, token string
		want                int
		body                string
	}{
		{"GET", "/metrics", "", 200, "test_admin_things_total 1"},
		{"GET", "/debug/pprof/", "", 401, ""},
		{"GET", "/debug/pprof/", "read", 403, ""},
		{"GET", "/debug/pprof/", "admin", 200, "goroutine"},
		{"GET", "/debug/pprof/cmdline", "admin", 200, ""},
		{"POST", "/admin/v1/thing", "read", 403, ""},
		{"POST", "/admin/v1/thing", "admin", 200, `{"done":true}`},
		{"GET", "/nope", "admin", 404, `"code"`},
	} {
		w := serve(h, c.method, c.path, c.token)
		if w.Code != c.want || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%s %s (token %q): %d, want %d with %q; body %.200q", c.method, c.path, c.token, w.Code, c.want, c.body, w.Body)
		}
		if w.Header().Get("X-Request-Id") == "" {
			t.Errorf("%s %s: no X-Request-Id", c.method, c.path)
		}
	}
}

// listen binds a loopback TCP port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestServeDrain: Serve serves every unit; on cancel it calls onDrain, stops accepting on every
// listener, lets an in-flight request finish within the grace, and returns nil.
func TestServeDrain(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	})
	lnA, lnB := listen(t), listen(t)
	var drained atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, slog.New(slog.DiscardHandler), 5*time.Second, func() { drained.Store(true) },
			HTTP("a", &http.Server{Handler: slow}, lnA), HTTP("", &http.Server{Handler: slow}, lnB))
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	for _, ln := range []net.Listener{lnA, lnB} {
		resp, err := client.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	slowDone := make(chan error, 1)
	go func() {
		resp, err := client.Get("http://" + lnA.Addr().String() + "/slow")
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && string(b) != "done" {
				err = fmt.Errorf("body %q", b)
			}
		}
		slowDone <- err
	}()
	<-started
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for !drained.Load() || dialable(lnA) || dialable(lnB) {
		if time.Now().After(deadline) {
			t.Fatalf("after cancel: onDrain called %v, still accepting a %v b %v", drained.Load(), dialable(lnA), dialable(lnB))
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned (%v) before the in-flight request finished", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-slowDone; err != nil {
		t.Fatalf("in-flight request during the drain: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
}

func dialable(ln net.Listener) bool {
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestServeGraceRunsOut: a request still running when the grace ends is cut off (its
// connection closed), and Serve returns the deadline error within a bound instead of waiting
// for it.
func TestServeGraceRunsOut(t *testing.T) {
	started := make(chan struct{})
	stuck := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // ends only when the connection is closed
	})
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, slog.New(slog.DiscardHandler), 200*time.Millisecond, nil, HTTP("", &http.Server{Handler: stuck}, ln))
	}()
	clientErr := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + ln.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		clientErr <- err
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Serve = %v, want the grace's deadline error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the grace")
	}
	select {
	case err := <-clientErr:
		if err == nil {
			t.Fatal("the stuck request got an answer")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck request's connection was not closed after the grace")
	}
}

// TestServeUnitFails: a unit that cannot serve stops the others and its error names the
// listener.
func TestServeUnitFails(t *testing.T) {
	ln := listen(t)
	var shutdowns atomic.Int32
	bad := Unit{Name: "broken", Addr: "nowhere", Serve: func() error { return errors.New("boom") },
		Shutdown: func(context.Context) error { shutdowns.Add(1); return nil }}
	good := HTTP("good", &http.Server{Handler: http.NotFoundHandler()}, ln)
	done := make(chan error, 1)
	go func() {
		done <- Serve(context.Background(), slog.New(slog.DiscardHandler), time.Second, nil, good, bad)
	}()
	select {
	case err := <-done:
		if err == nil || err.Error() != "broken listener: boom" {
			t.Fatalf("Serve = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop after a unit failed")
	}
	if shutdowns.Load() != 1 || dialable(ln) {
		t.Fatalf("the units were not shut down (broken: %d, good still accepting: %v)", shutdowns.Load(), dialable(ln))
	}
}

// TestConnLimits: Listener puts a listener under the cap only when there is one, and NewHTTP
// takes the header and idle bounds.
func TestConnLimits(t *testing.T) {
	ln := listen(t)
	defer ln.Close()
	if got := (ConnLimits{}).Listener(ln); got != ln {
		t.Fatal("no limiter: the listener was wrapped")
	}
	if got := (ConnLimits{Limiter: httpapi.NewConnLimiter(1, 0)}).Listener(ln); got == ln {
		t.Fatal("a limiter: the listener is not under it")
	}
	c := ConnLimits{ServerLimits: httpapi.ServerLimits{ReadHeaderTimeout: 3 * time.Second, IdleTimeout: 7 * time.Second}}
	srv := NewHTTP(http.NotFoundHandler(), slog.New(slog.DiscardHandler), c)
	if srv.ReadHeaderTimeout != 3*time.Second || srv.IdleTimeout != 7*time.Second || srv.ErrorLog == nil {
		t.Fatalf("server bounds: header %v idle %v error log %v", srv.ReadHeaderTimeout, srv.IdleTimeout, srv.ErrorLog != nil)
	}
}
