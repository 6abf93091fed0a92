package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// handlerFunc is a route handler. It returns an error instead of writing one; the wrapper maps
// it. Once a handler has started its answer, a returned error is only recorded.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

type claimsKey struct{}

func claims(ctx context.Context) *auth.Claims {
	c, _ := ctx.Value(claimsKey{}).(*auth.Claims)
	return c
}

// proto is the metrics label of r's protocol.
func proto(r *http.Request) string {
	switch r.ProtoMajor {
	case 3:
		return "h3"
	case 2:
		return "h2"
	}
	return "h1"
}

// wrap adds token verification (need "" = none), metrics, byte counting and error mapping.
func (s *Server) wrap(route string, need auth.Access, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, bufs: &s.bufs}
		var err error
		if need != "" {
			var c *auth.Claims
			if c, err = s.tokens.VerifyRequest(r); err == nil && !c.Access.Covers(need) {
				err = fmt.Errorf("%w: token grants %s, route needs %s", auth.ErrInsufficient, c.Access, need)
			}
			if err == nil {
				r = r.WithContext(context.WithValue(r.Context(), claimsKey{}, c))
			}
		}
		if err == nil {
			err = fn(rec, r)
			rec.release()
		}
		if err != nil && rec.status == 0 {
			s.errs.Write(rec, r, err)
		} else if err != nil && !errors.Is(err, context.Canceled) {
			s.log.WarnContext(r.Context(), "request failed after the answer started", "route", route,
				"request_id", httpapi.RequestID(r.Context()), "err", err)
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		s.m.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
		s.m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		s.m.served.WithLabelValues(proto(r)).Add(float64(rec.n))
	})
}

// copyBufLen is the size of the pooled copy buffers (Server.bufs).
const copyBufLen = 32 << 10

// recorder remembers the status and counts body bytes. Unwrap lets http.ResponseController
// reach the connection (flushes of proxied NDJSON streams). ReadFrom keeps the underlying
// writer's own ReadFrom reachable (net/http's HTTP/1.1 writer: sendfile on plain TCP, a pooled
// buffer on TLS) and copies through a pooled buffer for the others.
type recorder struct {
	http.ResponseWriter
	status int
	n      int64
	bufs   *sync.Pool // of *[copyBufLen]byte
	buf    *[copyBufLen]byte
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// ReadFrom implements io.ReaderFrom without a per-call buffer: one pooled buffer serves all
// the calls of a request (a multi-segment range makes one call per cached file).
func (w *recorder) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		if w.buf == nil {
			w.buf = w.bufs.Get().(*[copyBufLen]byte)
		}
		// Hide src's WriteTo (an *os.File's would allocate its own buffer) and the writer's
		// other methods, so that CopyBuffer really uses buf.
		n, err = io.CopyBuffer(struct{ io.Writer }{w.ResponseWriter}, struct{ io.Reader }{src}, w.buf[:])
	}
	w.n += n
	return n, err
}

// release returns the copy buffer to the pool once the handler is done.
func (w *recorder) release() {
	if w.buf != nil {
		w.bufs.Put(w.buf)
		w.buf = nil
	}
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// AltSvc wraps the TCP listener's handler so every answer advertises HTTP/3 on udpPort.
func AltSvc(h http.Handler, udpPort int) http.Handler {
	v := `h3=":` + strconv.Itoa(udpPort) + `"; ma=86400`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", v)
		h.ServeHTTP(w, r)
	})
}
