package backend

import (
	"context"
	"fmt"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/server"
)

// openObjects opens the configured object store.
func openObjects(ctx context.Context, c *config.Config) (server.Objects, error) {
	return nil, fmt.Errorf("objects driver %q: the object store implementations have not landed yet", c.Objects.Driver)
}
