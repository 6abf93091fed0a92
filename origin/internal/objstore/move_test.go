package objstore_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// TestLocalMove: Move carries the object's bytes to the new key (found through the decorators),
// leaves nothing under the old one, stamps the time of the move, and fails a missing source
// with ErrNotFound.
func TestLocalMove(t *testing.T) {
	ctx := context.Background()
	l, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	met, err := objstore.NewMetrics(l, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m, ok := objstore.MoverOf(met)
	if !ok {
		t.Fatal("no Mover under the metrics decorator")
	}
	from, to := "xorbs/default/3f9a00e1", "trash/xorbs/default/3f9a00e1"
	if err := l.Put(ctx, from, strings.NewReader("moved bytes"), 11); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour) // an orphan is old; its trash entry must not look old
	if err := os.Chtimes(filepath.Join(l.Root(), "xorbs", "default", "_3f", "3f9a00e1"), old, old); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	if err := m.Move(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Stat(ctx, from); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("source after the move: %v, want ErrNotFound", err)
	}
	rc, _, err := l.Get(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "moved bytes" {
		t.Errorf("moved object %q", got)
	}
	var mod time.Time
	l.List(ctx, "trash/", func(o objstore.ObjectInfo) error { mod = o.ModTime; return nil })
	if mod.Before(before) {
		t.Errorf("moved object's time %v, want the move's (after %v)", mod, before)
	}
	if err := m.Move(ctx, from, to); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("move of a missing object: %v, want ErrNotFound", err)
	}
}
