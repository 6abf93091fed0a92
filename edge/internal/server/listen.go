package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/sync/errgroup"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// Listeners are the edge's bound sockets. TLS (TCP) and QUIC (UDP) share one port; HTTP and
// Admin may be nil.
type Listeners struct {
	TLS   net.Listener
	QUIC  net.PacketConn
	HTTP  net.Listener
	Admin net.Listener
}

// Listen binds the configured addresses. A port of 0 in listen picks a free TCP port, and the
// UDP socket then binds the same one.
func Listen(listen, httpListen, adminListen string) (*Listeners, error) {
	var l Listeners
	fail := func(err error) (*Listeners, error) {
		l.Close()
		return nil, err
	}
	var err error
	if l.TLS, err = net.Listen("tcp", listen); err != nil {
		return fail(fmt.Errorf("listen %s: %w", listen, err))
	}
	host, _, _ := net.SplitHostPort(listen)
	udpAddr := net.JoinHostPort(host, fmt.Sprint(l.TLS.Addr().(*net.TCPAddr).Port))
	if l.QUIC, err = net.ListenPacket("udp", udpAddr); err != nil {
		return fail(fmt.Errorf("listen udp %s: %w", udpAddr, err))
	}
	if httpListen != "" {
		if l.HTTP, err = net.Listen("tcp", httpListen); err != nil {
			return fail(fmt.Errorf("listen %s: %w", httpListen, err))
		}
	}
	if adminListen != "" {
		if l.Admin, err = net.Listen("tcp", adminListen); err != nil {
			return fail(fmt.Errorf("listen %s: %w", adminListen, err))
		}
	}
	return &l, nil
}

// Close closes every bound socket (for a failed start; Serve closes them itself).
func (l *Listeners) Close() {
	for _, c := range []net.Listener{l.TLS, l.HTTP, l.Admin} {
		if c != nil {
			_ = c.Close()
		}
	}
	if l.QUIC != nil {
		_ = l.QUIC.Close()
	}
}

// Port is the shared TCP/UDP port of the TLS listeners.
func (l *Listeners) Port() int { return l.TLS.Addr().(*net.TCPAddr).Port }

// Serve serves main on the TLS listener (HTTP/1.1 and HTTP/2, every answer advertising HTTP/3
// with Alt-Svc), on QUIC (HTTP/3) and on the plain HTTP listener, and admin on the admin
// listener, until ctx is cancelled. It then stops accepting on all of them, lets in-flight
// requests finish for up to grace, and returns. Close what the handlers use only afterwards.
//
// conns bounds the clients on every client listener (docs/edge.md, "Bounded waiting"): one
// connection cap shared by TLS, plain HTTP and QUIC (TCP connections over it wait to be
// accepted; QUIC ones are closed with H3_EXCESSIVE_LOAD), a write progress deadline on every
// answer (HTTP/1.1 connection, HTTP/2 and HTTP/3 stream), idle and header timeouts, and the
// HTTP/2 and HTTP/3 stream caps.
func Serve(ctx context.Context, log *slog.Logger, l *Listeners, cert tls.Certificate, main, admin http.Handler, grace time.Duration, conns ConnLimits) error {
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"}}
	main = httpapi.WriteProgress(main, conns.WriteProgress)
	admin = httpapi.WriteProgress(admin, conns.WriteProgress)
	tcp := newHTTPServer(AltSvc(main, l.Port()), log, conns)
	tcp.TLSConfig = tlsConf
	tcp.ConnContext = batchContext
	h3 := &http3.Server{Handler: main, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}),
		IdleTimeout: conns.IdleTimeout,
		QUICConfig:  conns.quicConfig(),
		ConnContext: conns.quicConn}
	tlsLn, plainLn := net.Listener(newBatchListener(l.TLS)), l.HTTP
	if conns.Limiter != nil {
		tlsLn = newBatchListener(conns.Limiter.Listener(l.TLS))
		if plainLn != nil {
			plainLn = conns.Limiter.Listener(plainLn)
		}
	}

	type stopper interface{ Shutdown(context.Context) error }
	var stops []stopper
	g, gctx := errgroup.WithContext(ctx)
	serve := func(name, addr string, fn func() error) {
		g.Go(func() error {
			log.Info("listening", "listener", name, "addr", addr)
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("%s listener: %w", name, err)
			}
			return nil
		})
	}
	serve("tls", l.TLS.Addr().String(), func() error { return tcp.ServeTLS(tlsLn, "", "") })
	stops = append(stops, tcp)
	serve("h3", l.QUIC.LocalAddr().String(), func() error { return h3.Serve(l.QUIC) })
	stops = append(stops, h3)
	if l.HTTP != nil {
		plain := newHTTPServer(main, log, conns)
		serve("http", l.HTTP.Addr().String(), func() error { return plain.Serve(plainLn) })
		stops = append(stops, plain)
	}
	if l.Admin != nil && admin != nil {
		adm := newHTTPServer(admin, log, conns)
		serve("admin", l.Admin.Addr().String(), func() error { return adm.Serve(l.Admin) })
		stops = append(stops, adm)
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("draining", "grace", grace.String())
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		errs := make([]error, len(stops))
		var dg errgroup.Group
		for i, s := range stops {
			dg.Go(func() error {
				errs[i] = s.Shutdown(sctx)
				return nil
			})
		}
		_ = dg.Wait()
		_ = h3.Close()
		_ = l.QUIC.Close()
		return errors.Join(errs...)
	})
	return g.Wait()
}

// ConnLimits bound the edge's client connections (Serve).
type ConnLimits struct {
	httpapi.ServerLimits
	// Limiter caps the connections of the TLS, plain HTTP and QUIC listeners together; nil =
	// no cap.
	Limiter *httpapi.ConnLimiter
}

// h3ExcessiveLoad is the HTTP/3 error code a QUIC connection over the cap is closed with.
const h3ExcessiveLoad = 0x0107

// quicConfig applies the stream cap and idle timeout to QUIC connections.
func (c ConnLimits) quicConfig() *quic.Config {
	q := &quic.Config{Allow0RTT: true, MaxIdleTimeout: c.IdleTimeout}
	if c.MaxStreams > 0 {
		q.MaxIncomingStreams = int64(c.MaxStreams)
	}
	return q
}

// quicConn takes a slot of the limiter for a QUIC connection once its handshake is done, and
// closes the connection when there is none; the slot is freed when the connection ends.
func (c ConnLimits) quicConn(ctx context.Context, qc *quic.Conn) context.Context {
	if c.Limiter == nil {
		return ctx
	}
	release, ok := c.Limiter.TryAcquire(qc.RemoteAddr())
	if !ok {
		_ = qc.CloseWithError(h3ExcessiveLoad, "too many connections")
		return ctx
	}
	go func() {
		<-qc.Context().Done()
		release()
	}()
	return ctx
}

func newHTTPServer(h http.Handler, log *slog.Logger, c ConnLimits) *http.Server {
	return httpapi.NewServer(h, c.ServerLimits, slog.NewLogLogger(log.Handler(), slog.LevelWarn))
}

// Admin is the admin listener's handler: GET /metrics from g for anyone who reaches the
// listener (scrapers), and /debug/pprof/ for a bearer token of access admin only (401 without
// one, 403 for any other token; verified with the origin's keys like every token). The
// listener should still be private: see docs/security.md.
func (s *Server) Admin(g prometheus.Gatherer) http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	m.Handle("/debug/pprof/", s.requireAdmin(httpapi.Pprof()))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { s.errs.Write(w, r, httpapi.ErrNotFound) })
	return httpapi.WithRequestID(m)
}

// requireAdmin passes requests with a verified admin token to h and answers the others 401
// (no or bad token) or 403 (a token of another access).
func (s *Server) requireAdmin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.tokens.VerifyRequest(r)
		if err == nil && !c.Access.Covers(auth.Admin) {
			err = fmt.Errorf("%w: token grants %s, route needs %s", auth.ErrInsufficient, c.Access, auth.Admin)
		}
		if err != nil {
			s.errs.Write(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}
