package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/xetcdn/xetcdn/shared/httpapi"
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
// calls onShutdown (may be nil; e.g. Server.Drain), stops accepting, lets in-flight requests
// finish for up to grace, and returns. The caller closes the index and object store after
// Serve returns, never before.
//
// conns bounds the clients (docs/origin.md, "Bounded waiting"): the main listener accepts at
// most conns.MaxConnections at once, every answer on either listener is cut off when its writes
// stop making progress, and idle connections and slow headers are timed out.
func Serve(ctx context.Context, log *slog.Logger, l *Listeners, main, admin http.Handler, grace time.Duration, onShutdown func(), conns ConnLimits) error {
	servers := []*http.Server{newHTTPServer(httpapi.WriteProgress(main, conns.WriteProgress), log, conns)}
	lns := []net.Listener{l.Main}
	if conns.Limiter != nil {
		lns[0] = conns.Limiter.Listener(l.Main)
	}
	if l.Admin != nil {
		servers = append(servers, newHTTPServer(httpapi.WriteProgress(admin, conns.WriteProgress), log, conns))
		lns = append(lns, l.Admin)
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := range servers {
		srv, ln := servers[i], lns[i]
		g.Go(func() error {
			log.Info("listening", "addr", ln.Addr().String())
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("draining", "grace", grace.String())
		if onShutdown != nil {
			onShutdown()
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		var errs []error
		for _, srv := range servers {
			if err := srv.Shutdown(sctx); err != nil {
				errs = append(errs, err)
				srv.Close()
			}
		}
		return errors.Join(errs...)
	})
	return g.Wait()
}

// ConnLimits bound the origin's connections (Serve).
type ConnLimits struct {
	httpapi.ServerLimits
	// Limiter caps the main listener's connections; nil = no cap.
	Limiter *httpapi.ConnLimiter
}

func newHTTPServer(h http.Handler, log *slog.Logger, c ConnLimits) *http.Server {
	return httpapi.NewServer(h, c.ServerLimits, slog.NewLogLogger(log.Handler(), slog.LevelWarn))
}

// ConnLimits are the connection bounds of the configuration, with the server's limiter (its
// refusals are counted in xet_origin_connections_refused_total, its slots in use in
// xet_origin_connections_open).
func (s *Server) ConnLimits() ConnLimits {
	l := s.cfg.Limits
	return ConnLimits{Limiter: s.conns, ServerLimits: httpapi.ServerLimits{
		ReadHeaderTimeout: l.ReadHeaderTimeout.D(), IdleTimeout: l.IdleTimeout.D(),
		WriteProgress: l.WriteProgress.D()}}
}
