package backend

import (
	"context"
	"fmt"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/origin/internal/server"
)

// openObjects opens the configured object store.
func openObjects(ctx context.Context, c *config.Config) (server.Objects, error) {
	switch c.Objects.Driver {
	case config.ObjectsLocal:
		l, err := objstore.NewLocal(c.Objects.Dir)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	return nil, fmt.Errorf("objects driver %q is not available in this build", c.Objects.Driver)
}
