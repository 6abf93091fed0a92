package filecache

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// gated is a Backend whose File calls each wait for one value on release.
type gated struct {
	rec     *recon.FileRecord
	entered chan struct{}
	release chan struct{}
	files   atomic.Int64
}

var errHidden = errors.New("not visible")

func (g *gated) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	g.files.Add(1)
	g.entered <- struct{}{}
	<-g.release
	return g.rec, nil
}

func (g *gated) Visible(ctx context.Context, h hash.Hash, scope string) error { return errHidden }

// TestRevokeStartsAGeneration: a caller that arrives after a Revoke does not join a fill that
// started before it (it would get an answer the Revoke invalidated); its own fill's answer is
// remembered. (That the older fill's answer is not stored is metacache's TestRevokeDuringFill.)
func TestRevokeStartsAGeneration(t *testing.T) {
	h := hash.Chunk([]byte("file"))
	g := &gated{rec: &recon.FileRecord{Hash: h}, entered: make(chan struct{}, 2), release: make(chan struct{})}
	c, err := New(Options{Backend: g, MaxBytes: 1 << 20, VisibilityTTL: time.Hour, MaxVisibility: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 2)
	lookup := func() { _, err := c.File(context.Background(), h, "s"); done <- err }
	go lookup()
	<-g.entered // the first fill is in the backend
	c.Revoke("s", []hash.Hash{h})
	go lookup()
	select {
	case <-g.entered: // the second caller started its own fill
	case <-time.After(5 * time.Second):
		close(g.release)
		t.Fatal("a caller that came after the Revoke joined the fill that started before it")
	}
	close(g.release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := g.files.Load(); n != 2 {
		t.Fatalf("%d backend lookups, want 2", n)
	}
	if !c.Fresh(h, "s") {
		t.Fatal("the fill that started after the Revoke did not remember its answer")
	}
	// Revoking the whole scope forgets it too.
	c.Revoke("s", nil)
	if c.Fresh(h, "s") {
		t.Fatal("Revoke of the whole scope left an answer")
	}
}

// TestNegativeNotCached: a not-visible answer is asked again every time.
func TestNegativeNotCached(t *testing.T) {
	g := &gated{entered: make(chan struct{}, 1), release: make(chan struct{})}
	c, err := New(Options{Backend: g, MaxBytes: 1 << 20, VisibilityTTL: time.Hour, MaxVisibility: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := hash.Chunk([]byte("hidden"))
	for range 2 {
		if err := c.Visible(context.Background(), h, "s"); !errors.Is(err, errHidden) {
			t.Fatalf("Visible = %v, want the backend's error", err)
		}
	}
	if c.Fresh(h, "s") {
		t.Fatal("a negative answer was remembered")
	}
}
