package edge

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/edge/internal/config"
	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/edge/internal/server"
)

// dataSource is the xorb byte source and what the server needs to know about its errors.
type dataSource struct {
	bytes             server.XorbBytes
	corrupt, badRange []error
	close             func() error
}

// openData opens the xorb byte source: every read goes to the origin and is verified before
// it is served (the on-disk data cache plugs in here).
func openData(ctx context.Context, cfg *config.Config, client *originapi.Client, log *slog.Logger, reg prometheus.Registerer) (*dataSource, error) {
	return &dataSource{bytes: server.Passthrough{Fetcher: client}, close: func() error { return nil }}, nil
}
