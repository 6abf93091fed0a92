package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httpserver"
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
	tcp := httpserver.NewHTTP(httpserver.AltSvc(main, l.Port()), log, conns)
	tcp.TLSConfig = tlsConf
	tcp.ConnContext = batchContext
	h3 := &http3.Server{Handler: httpapi.WriteProgress(main, conns.WriteProgress),
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{
			Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}),
		IdleTimeout: conns.IdleTimeout,
		QUICConfig:  quicConfig(conns),
		ConnContext: quicConn(conns)}
	tlsLn := newBatchListener(conns.Listener(l.TLS))

	units := []httpserver.Unit{{Name: "tls", Addr: l.TLS.Addr().String(),
		Serve:    func() error { return tcp.ServeTLS(tlsLn, "", "") },
		Shutdown: httpserver.ShutdownOrClose(tcp)},
		{Name: "h3", Addr: l.QUIC.LocalAddr().String(),
			Serve: func() error { return h3.Serve(l.QUIC) },
			Shutdown: func(ctx context.Context) error {
				err := h3.Shutdown(ctx)
				_ = h3.Close()
				_ = l.QUIC.Close()
				return err
			}}}
	if l.HTTP != nil {
		units = append(units, httpserver.HTTP("http", httpserver.NewHTTP(main, log, conns), conns.Listener(l.HTTP)))
	}
	if l.Admin != nil && admin != nil {
		units = append(units, httpserver.HTTP("admin", httpserver.NewHTTP(admin, log, conns), l.Admin))
	}
	return httpserver.Serve(ctx, log, grace, nil, units...)
}

// ConnLimits bound the edge's client connections (Serve); the Limiter caps the TLS, plain
// HTTP and QUIC listeners together.
type ConnLimits = httpserver.ConnLimits

// h3ExcessiveLoad is the HTTP/3 error code a QUIC connection over the cap is closed with.
const h3ExcessiveLoad = 0x0107

// quicConfig applies the stream cap and idle timeout to QUIC connections.
func quicConfig(c ConnLimits) *quic.Config {
	q := &quic.Config{Allow0RTT: true, MaxIdleTimeout: c.IdleTimeout}
	if c.MaxStreams > 0 {
		q.MaxIncomingStreams = int64(c.MaxStreams)
	}
	return q
}

// quicConn takes a slot of the limiter for a QUIC connection once its handshake is done, and
// closes the connection when there is none; the slot is freed when the connection ends.
func quicConn(c ConnLimits) func(ctx context.Context, qc *quic.Conn) context.Context {
	return func(ctx context.Context, qc *quic.Conn) context.Context {
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
}

// Admin is the admin listener's handler (httpserver.Admin): GET /metrics from g for anyone
// who reaches the listener (scrapers), and /debug/pprof/ for a bearer token of access admin
// only (401 without one, 403 for any other token; verified with the origin's keys like every
// token). Admin requests are not counted in the request metrics. The listener should still be
// private: see docs/security.md.
func (s *Server) Admin(g prometheus.Gatherer) http.Handler {
	w := &httpserver.Wrapper{Errors: s.errs, Log: s.log, Authorize: s.authorize}
	return httpserver.Admin(g, w.Wrap, nil)
}
