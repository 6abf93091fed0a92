package server

import (
	"context"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
)

// DefaultDependencyTimeout is Options.DependencyTimeout when none is given.
const DefaultDependencyTimeout = 10 * time.Second

// Every call the server makes to the index and the object store is bounded by the decorators
// backend.Open wraps them in (index.Timeouts, objstore.Timeouts: 503 with Retry-After beyond
// limits.dependency_timeout). The server bounds only what spans many calls: a batch
// reconstruction's lookups together (batch.go).

// bound is index.Bound: call under a context that ends after d, its end reported as
// index.ErrUnavailable.
func bound[T any](ctx context.Context, d time.Duration, what string, call func(context.Context) (T, error)) (T, error) {
	return index.Bound(ctx, d, what, call)
}
