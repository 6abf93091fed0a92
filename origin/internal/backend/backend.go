// Package backend opens the origin's index and object store as the configuration selects —
// SQLite and a local directory in the embedded default, Postgres and S3/MinIO in production —
// and wraps them in the origin's decorators. It is the one place the stack is built:
//
//	index:   Metrics → Timeouts → FileCache → LayoutCache → sqlite.DB | postgres.DB
//	objects: Metrics → Timeouts → objstore.Local | objstore.S3
//
// Metrics is outermost so that it sees every call the server makes, as the server sees it: a
// call the timeout cut off counts as "unavailable" with the time it took, and a cache hit counts
// as a fast call (so the histogram is the latency requests wait for, not only the database's).
// Timeouts sits above the caches, bounding a cache miss's wait on the database and on the
// lookup it shares with concurrent callers, exactly as the server bounded the cached index
// before the decorators moved here; layouts all held in memory are answered without a bound
// (index.MemoryLayouts: nothing to wait for, and no timer to arm per shard check). The caches
// are innermost, next to what they cache.
package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// Backends are the opened, wrapped dependencies of the server.
type Backends struct {
	Index   index.Index
	Objects objstore.ObjectStore
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

// Layers select the decorators WrapIndex and WrapObjects put around an implementation.
type Layers struct {
	// Timeout bounds every call (index) or step (object store): index.Timeouts,
	// objstore.Timeouts. <= 0: no bound.
	Timeout time.Duration
	// CacheBytes sizes both index caches (index.LayoutCache, index.FileCache); 0: no caches.
	CacheBytes int64
	// Registerer receives the call metrics (index.Metrics, objstore.Metrics); nil: no metrics
	// decorator.
	Registerer prometheus.Registerer
	// LocalBodies: the object store's bodies are local files (objstore.TimeoutOptions).
	LocalBodies bool
}

// LayersOf are the layers the configuration c asks for, with metrics on reg.
func LayersOf(c *config.Config, reg prometheus.Registerer) Layers {
	return Layers{Timeout: c.Limits.DependencyTimeout.D(), CacheBytes: c.Index.LayoutCache, Registerer: reg,
		LocalBodies: c.Objects.Driver == config.ObjectsLocal}
}

// WrapIndex wraps ix in the layers l selects, in the order the package comment gives. Closing
// the result closes ix.
func WrapIndex(ix index.Index, l Layers) (index.Index, error) {
	if l.CacheBytes > 0 {
		// Both in-memory caches: decoded layouts, and decoded file records with recent positive
		// visibility answers (index.DefaultVisibilityTTL bounds how late a Hide made outside this
		// process is seen).
		layouts, err := index.NewLayoutCache(ix, l.CacheBytes)
		if err != nil {
			return nil, err
		}
		files, err := index.NewFileCache(layouts, index.FileCacheOptions{MaxBytes: l.CacheBytes})
		if err != nil {
			return nil, err
		}
		ix = files
	}
	if l.Timeout > 0 {
		t, err := index.NewTimeouts(ix, l.Timeout)
		if err != nil {
			return nil, err
		}
		ix = t
	}
	if l.Registerer != nil {
		m, err := index.NewMetrics(ix, l.Registerer)
		if err != nil {
			return nil, err
		}
		ix = m
	}
	return ix, nil
}

// WrapObjects wraps s in the layers l selects (l.CacheBytes does not apply).
func WrapObjects(s objstore.ObjectStore, l Layers) (objstore.ObjectStore, error) {
	if l.Timeout > 0 {
		t, err := objstore.NewTimeouts(s, objstore.TimeoutOptions{Timeout: l.Timeout, LocalBodies: l.LocalBodies})
		if err != nil {
			return nil, err
		}
		s = t
	}
	if l.Registerer != nil {
		m, err := objstore.NewMetrics(s, l.Registerer)
		if err != nil {
			return nil, err
		}
		s = m
	}
	return s, nil
}

// Open opens the index and object store named by c and wraps them (LayersOf(c, reg)). On
// error everything opened so far is closed again.
func Open(ctx context.Context, c *config.Config, reg prometheus.Registerer) (_ *Backends, err error) {
	b := &Backends{}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	var ix index.Index
	switch c.Index.Driver {
	case config.IndexSQLite:
		db, err := sqlite.Open(ctx, sqlite.Options{Path: c.Index.SQLitePath})
		if err != nil {
			return nil, fmt.Errorf("open sqlite index: %w", err)
		}
		ix = db
	case config.IndexPostgres:
		db, err := postgres.Open(ctx, postgres.Options{DSN: c.Index.PostgresDSN, MaxConns: int32(c.Index.MaxConns),
			DedupFilterReload: time.Duration(c.Index.DedupFilterReload), Log: c.Index.Log})
		if err != nil {
			return nil, fmt.Errorf("open postgres index: %w", err)
		}
		ix = db
	default:
		return nil, fmt.Errorf("index driver %q is unknown", c.Index.Driver)
	}
	b.closers = append(b.closers, ix.Close)
	l := LayersOf(c, reg)
	if b.Index, err = WrapIndex(ix, l); err != nil {
		return nil, err
	}
	// Each decorator's Close closes the index it wraps.
	b.closers[len(b.closers)-1] = b.Index.Close
	objs, err := openObjects(ctx, c)
	if err != nil {
		return nil, err
	}
	if b.Objects, err = WrapObjects(objs, l); err != nil {
		return nil, err
	}
	return b, nil
}
