package server

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// slowPut delays every object write.
type slowPut struct {
	objstore.ObjectStore
	delay time.Duration
}

func (s slowPut) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.ObjectStore.Put(ctx, key, r, size)
}

// TestBodyDeadlineEndsWithTheBody: the body deadline bounds reading the body, not storing it.
// An upload whose body arrived at once is stored even when storing ends after the deadline
// (a read deadline left on the connection would cancel the request from net/http's
// background read).
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	idx, objs := sqliteLocal().open(t)
	e := newEnvWith(t, idx, slowPut{objs, 1500 * time.Millisecond}, func(c *config.Config) {
		c.Limits.UploadBodyTimeout = config.Duration(500 * time.Millisecond)
	})
	f := makeFixture(t, 3, 1, 4, 4096)
	expect(t, e.do("POST", "/v1/xorbs/default/"+f.layouts[0].Hash.String(), e.token("models/a/b", "write"), f.xorbs[0]), 200)
}
