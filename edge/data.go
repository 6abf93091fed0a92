package edge

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/edge/internal/config"
	"github.com/xetcdn/xetcdn/edge/internal/datacache"
	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/edge/internal/server"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// dataSource is the xorb byte source and what the server needs to know about its errors.
type dataSource struct {
	bytes             server.XorbBytes
	readAhead         server.ReadAhead
	corrupt, badRange []error
	close             func() error
	// evict drops the cached bytes of xorbs the origin's garbage collection deleted.
	evict func(xs []hash.Hash) int
}

// openData opens the verified on-disk xorb cache, filled from the origin's internal xorb route.
func openData(ctx context.Context, cfg *config.Config, client *originapi.Client, log *slog.Logger, reg prometheus.Registerer) (*dataSource, error) {
	c, err := datacache.Open(ctx, datacache.Options{Dir: cfg.Cache.DataDir, MaxBytes: cfg.Cache.DataBytes,
		Fetcher: client, FillTimeout: cfg.Limits.FillTimeout.D(), BufferMemory: cfg.Cache.FillBufferBytes,
		TimeoutErrors: []error{originapi.ErrTimeout},
		Registerer:    reg, Logger: log})
	if err != nil {
		return nil, err
	}
	return &dataSource{bytes: c, readAhead: c, corrupt: []error{datacache.ErrCorrupt}, badRange: []error{datacache.ErrBadRange},
		close: c.Close, evict: c.Evict}, nil
}
