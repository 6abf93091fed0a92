package httpserver

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

// Unit is one listener and the server on it.
type Unit struct {
	// Name is the log field "listener" and prefixes Serve's error ("<name> listener: …");
	// "" for neither.
	Name string
	Addr string // the bound address, logged
	// Serve serves until Shutdown; http.ErrServerClosed and net.ErrClosed count as a clean end.
	Serve func() error
	// Shutdown stops accepting and waits for in-flight requests until ctx ends (the grace).
	Shutdown func(ctx context.Context) error
}

// HTTP is the Unit of an *http.Server on ln. Shutdown closes the server's remaining
// connections when the grace runs out, so nothing is still served after Serve returned.
func HTTP(name string, srv *http.Server, ln net.Listener) Unit {
	return Unit{Name: name, Addr: ln.Addr().String(),
		Serve:    func() error { return srv.Serve(ln) },
		Shutdown: ShutdownOrClose(srv)}
}

// ShutdownOrClose is srv's Shutdown, closing the connections still open when ctx ends.
func ShutdownOrClose(srv *http.Server) func(context.Context) error {
	return func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if err != nil {
			_ = srv.Close()
		}
		return err
	}
}

// Serve runs every unit until ctx is cancelled or one fails. It then logs "draining", calls
// onDrain (may be nil), and shuts every unit down at once, with grace for in-flight requests,
// and returns when all are stopped. Close what the handlers use only afterwards.
func Serve(ctx context.Context, log *slog.Logger, grace time.Duration, onDrain func(), units ...Unit) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, u := range units {
		g.Go(func() error {
			if u.Name != "" {
				log.Info("listening", "listener", u.Name, "addr", u.Addr)
			} else {
				log.Info("listening", "addr", u.Addr)
			}
			err := u.Serve()
			if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if u.Name != "" {
				return fmt.Errorf("%s listener: %w", u.Name, err)
			}
			return err
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("draining", "grace", grace.String())
		if onDrain != nil {
			onDrain()
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		errs := make([]error, len(units))
		var dg errgroup.Group
		for i, u := range units {
			dg.Go(func() error {
				errs[i] = u.Shutdown(sctx)
				return nil
			})
		}
		_ = dg.Wait()
		return errors.Join(errs...)
	})
	return g.Wait()
}

// ConnLimits bound a tier's client connections (shared/httpapi's conns.go).
type ConnLimits struct {
	httpapi.ServerLimits
	// Limiter caps the connections of the client listeners together; nil = no cap.
	Limiter *httpapi.ConnLimiter
}

// Listener is ln under the connection cap (ln itself without one).
func (c ConnLimits) Listener(ln net.Listener) net.Listener {
	if c.Limiter == nil {
		return ln
	}
	return c.Limiter.Listener(ln)
}

// NewHTTP is an *http.Server for h with c's header, idle and stream bounds, every answer cut
// off when its writes stop making progress for c.WriteProgress; the server's own errors go to
// log at level warn.
func NewHTTP(h http.Handler, log *slog.Logger, c ConnLimits) *http.Server {
	return httpapi.NewServer(httpapi.WriteProgress(h, c.WriteProgress), c.ServerLimits,
		slog.NewLogLogger(log.Handler(), slog.LevelWarn))
}
