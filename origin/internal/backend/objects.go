package backend

import (
	"context"
	"fmt"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// openObjects opens the configured object store.
func openObjects(ctx context.Context, c *config.Config) (objstore.ObjectStore, error) {
	switch c.Objects.Driver {
	case config.ObjectsLocal:
		l, err := objstore.NewLocal(c.Objects.Dir)
		if err != nil {
			return nil, err
		}
		return l, nil
	case config.ObjectsS3:
		s, err := objstore.NewS3(ctx, objstore.S3Options{Endpoint: c.Objects.Endpoint, Bucket: c.Objects.Bucket,
			Region: c.Objects.Region, UseTLS: c.Objects.UseTLS, AccessKey: c.Objects.AccessKey,
			SecretKey: c.Objects.SecretKey})
		if err != nil {
			return nil, fmt.Errorf("open s3 object store: %w", err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("objects driver %q is not available in this build", c.Objects.Driver)
}
