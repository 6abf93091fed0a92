// Package backend opens the origin's index and object store as the configuration selects:
// SQLite and a local directory in the embedded default, Postgres and S3/MinIO in production.
package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/server"
)

// Backends are the opened dependencies of the server.
type Backends struct {
	Index   index.Index
	Objects server.Objects
	closers []func() error
}

// Close closes what Open opened, in reverse order. Call it only after the servers using the
// backends have stopped.
func (b *Backends) Close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	b.closers = nil
	return errors.Join(errs...)
}

// Open opens the index and object store named by c. On error everything opened so far is
// closed again.
func Open(ctx context.Context, c *config.Config) (_ *Backends, err error) {
	b := &Backends{}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	switch c.Index.Driver {
	case config.IndexSQLite:
		db, err := sqlite.Open(ctx, sqlite.Options{Path: c.Index.SQLitePath})
		if err != nil {
			return nil, fmt.Errorf("open sqlite index: %w", err)
		}
		b.Index = db
		b.closers = append(b.closers, db.Close)
	case config.IndexPostgres:
		db, err := postgres.Open(ctx, postgres.Options{DSN: c.Index.PostgresDSN, MaxConns: int32(c.Index.MaxConns)})
		if err != nil {
			return nil, fmt.Errorf("open postgres index: %w", err)
		}
		b.Index = db
		b.closers = append(b.closers, db.Close)
	default:
		return nil, fmt.Errorf("index driver %q is unknown", c.Index.Driver)
	}
	if c.Index.LayoutCache > 0 {
		// index.layout_cache sizes both in-memory caches: decoded layouts, and decoded file
		// records with recent positive visibility answers (index.DefaultVisibilityTTL bounds
		// how late a Hide made outside this process is seen). Each cache's Close closes the
		// index it wraps.
		layouts, err := index.NewLayoutCache(b.Index, c.Index.LayoutCache)
		if err != nil {
			return nil, err
		}
		b.Index, b.closers[len(b.closers)-1] = layouts, layouts.Close
		files, err := index.NewFileCache(b.Index, index.FileCacheOptions{MaxBytes: c.Index.LayoutCache})
		if err != nil {
			return nil, err
		}
		b.Index, b.closers[len(b.closers)-1] = files, files.Close
	}
	objs, err := openObjects(ctx, c)
	if err != nil {
		return nil, err
	}
	b.Objects = objs
	return b, nil
}
