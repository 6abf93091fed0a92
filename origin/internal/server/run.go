package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httpserver"
)

// Listeners are the origin's bound sockets. Admin may be nil.
type Listeners struct {
	Main, Admin net.Listener
}

// Listen binds the configured addresses.
func Listen(mainAddr, adminAddr string) (*Listeners, error) {
	var l Listeners
	var err error
	if l.Main, err = net.Listen("tcp", mainAddr); err != nil {
		return nil, fmt.Errorf("listen %s: %w", mainAddr, err)
	}
	if adminAddr != "" {
		if l.Admin, err = net.Listen("tcp", adminAddr); err != nil {
			l.Main.Close()
			return nil, fmt.Errorf("listen %s: %w", adminAddr, err)
		}
	}
	return &l, nil
}

// Serve serves the main handler (and admin, when l.Admin is set) until ctx is cancelled, then
// calls onShutdown (may be nil; e.g. Server.Drain), stops accepting on both listeners, lets
// in-flight requests finish for up to grace, closes what is left, and returns
// (httpserver.Serve). The caller closes the index and object store after Serve returns, never
// before.
//
// conns bounds the clients (docs/origin.md, "Bounded waiting"): the main listener accepts at
// most conns.MaxConnections at once, every answer on either listener is cut off when its writes
// stop making progress, and idle connections and slow headers are timed out.
func Serve(ctx context.Context, log *slog.Logger, l *Listeners, main, admin http.Handler, grace time.Duration, onShutdown func(), conns ConnLimits) error {
	units := []httpserver.Unit{httpserver.HTTP("", httpserver.NewHTTP(main, log, conns), conns.Listener(l.Main))}
	if l.Admin != nil {
		units = append(units, httpserver.HTTP("", httpserver.NewHTTP(admin, log, conns), l.Admin))
	}
	return httpserver.Serve(ctx, log, grace, onShutdown, units...)
}

// ConnLimits bound the origin's connections (Serve); the Limiter caps the main listener only.
type ConnLimits = httpserver.ConnLimits

// ConnLimits are the connection bounds of the configuration, with the server's limiter (its
// refusals are counted in xet_origin_connections_refused_total, its slots in use in
// xet_origin_connections_open).
func (s *Server) ConnLimits() ConnLimits {
	l := s.cfg.Limits
	return ConnLimits{Limiter: s.conns, ServerLimits: httpapi.ServerLimits{
		ReadHeaderTimeout: l.ReadHeaderTimeout.D(), IdleTimeout: l.IdleTimeout.D(),
		WriteProgress: l.WriteProgress.D()}}
}
