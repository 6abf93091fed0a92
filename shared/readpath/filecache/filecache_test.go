package filecache

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// probe is a Backend whose Visible answers come from visible (nil: yes), counted; when hold is
// not nil, each Visible call waits for one value on it.
type probe struct {
	rec     *recon.FileRecord
	checks  atomic.Int64
	visible atomic.Pointer[error]
	hold    atomic.Pointer[chan struct{}]
}

func (p *probe) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	return p.rec, nil
}

func (p *probe) Visible(ctx context.Context, h hash.Hash, scope string) error {
	p.checks.Add(1)
	if h := p.hold.Load(); h != nil {
		<-*h
	}
	if e := p.visible.Load(); e != nil {
		return *e
	}
	return nil
}

// refreshCache is a cache of a 30 s TTL that re-checks used answers 5 s ahead, over p, with
// hits and misses counted by kind.
func refreshCache(t *testing.T, p *probe) (*Cache, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	var hits, misses atomic.Int64
	c, err := New(Options{Backend: p, MaxBytes: 1 << 20, VisibilityTTL: 30 * time.Second, MaxVisibility: 16,
		RefreshAhead: 5 * time.Second, NotVisible: func(err error) bool { return errors.Is(err, errHidden) },
		Counters: Counters{Hit: func(string) { hits.Add(1) }, Miss: func(string) { misses.Add(1) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, &hits, &misses
}

// TestRefreshAheadKeepsUsedAnswersFresh: an answer a lookup used is re-checked in the
// background 5 s before it expires, so a lookup after the TTL is answered from memory without
// waiting for the backend; an answer no lookup used is not re-checked, and expires.
func TestRefreshAheadKeepsUsedAnswersFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, other := hash.Chunk([]byte("file")), hash.Chunk([]byte("other"))
		p := &probe{}
		c, hits, misses := refreshCache(t, p)
		ctx := context.Background()
		for _, f := range []hash.Hash{h, other} {
			if err := c.Visible(ctx, f, "s"); err != nil { // fills: checks 1, 2
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		if err := c.Visible(ctx, h, "s"); err != nil { // uses h's answer: its re-check is scheduled
			t.Fatal(err)
		}
		time.Sleep(24*time.Second + time.Millisecond) // t = 25 s: the re-check is due
		synctest.Wait()
		if n := p.checks.Load(); n != 3 {
			t.Fatalf("%d backend checks at 25 s, want 3 (two fills and one re-check ahead)", n)
		}
		time.Sleep(6 * time.Second) // t = 31 s: past the first answers' TTL
		hits.Store(0)
		misses.Store(0)
		if err := c.Visible(ctx, h, "s"); err != nil {
			t.Fatal(err)
		}
		if hits.Load() != 1 || misses.Load() != 0 || p.checks.Load() != 3 {
			t.Fatalf("lookup after the TTL: %d hits, %d misses, %d checks; want it answered from the renewed answer",
				hits.Load(), misses.Load(), p.checks.Load())
		}
		if c.Fresh(other, "s") {
			t.Fatal("an answer no lookup used was renewed")
		}
	})
}

// TestRefreshAheadNeverOutlivesTheTTL: a re-check that fails leaves the answer to expire at its
// TTL (the next lookup waits for the backend); one that finds the file hidden forgets it at once.
func TestRefreshAheadNeverOutlivesTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hash.Chunk([]byte("file"))
		p := &probe{}
		c, _, misses := refreshCache(t, p)
		ctx := context.Background()
		use := func() {
			t.Helper()
			if err := c.Visible(ctx, h, "s"); err != nil {
				t.Fatal(err)
			}
		}
		use() // fill at 0 s
		use() // schedules the re-check at 25 s
		down := errors.New("origin down")
		p.visible.Store(&down)
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if !c.Fresh(h, "s") || p.checks.Load() != 2 {
			t.Fatalf("at 29 s: fresh %v after %d checks; want the answer kept to its TTL after a failed re-check", c.Fresh(h, "s"), p.checks.Load())
		}
		time.Sleep(time.Second) // 30 s: expired
		if c.Fresh(h, "s") {
			t.Fatal("an answer outlived its TTL after a failed re-check")
		}
		if err := c.Visible(ctx, h, "s"); !errors.Is(err, down) || misses.Load() != 2 {
			t.Fatalf("lookup after the TTL = %v (%d misses), want the backend's error", err, misses.Load())
		}

		// Hidden: the re-check at 55 s forgets the answer, 5 s before its TTL.
		p.visible.Store(nil)
		use() // fill at 30 s
		use()
		hidden := errHidden
		p.visible.Store(&hidden)
		time.Sleep(25*time.Second + time.Millisecond)
		synctest.Wait()
		if c.Fresh(h, "s") {
			t.Fatal("a re-check that found the file hidden left its answer")
		}
	})
}

// TestRefreshAheadRespectsRevoke: a Revoke before the re-check is due cancels it, and one that
// comes while the re-check runs keeps its answer from being stored.
func TestRefreshAheadRespectsRevoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hash.Chunk([]byte("file"))
		p := &probe{}
		c, _, _ := refreshCache(t, p)
		ctx := context.Background()
		use := func() {
			t.Helper()
			if err := c.Visible(ctx, h, "s"); err != nil {
				t.Fatal(err)
			}
		}
		use()
		use()
		c.Revoke("s", []hash.Hash{h})
		time.Sleep(26 * time.Second)
		synctest.Wait()
		if n := p.checks.Load(); n != 1 || c.Fresh(h, "s") {
			t.Fatalf("%d checks, fresh %v after a Revoke before the re-check was due; want 1, false", n, c.Fresh(h, "s"))
		}

		use() // fill at 26 s (check 2)
		use()
		hold := make(chan struct{})
		p.hold.Store(&hold)
		time.Sleep(25*time.Second + time.Millisecond) // the re-check is in the backend
		synctest.Wait()
		c.Revoke("s", nil)
		select {
		case hold <- struct{}{}:
		case <-time.After(time.Minute):
			t.Fatal("no re-check ahead was in the backend")
		}
		synctest.Wait()
		if n := p.checks.Load(); n != 3 {
			t.Fatalf("%d checks, want 3", n)
		}
		if c.Fresh(h, "s") {
			t.Fatal("a re-check that raced a Revoke stored its answer")
		}
	})
}
