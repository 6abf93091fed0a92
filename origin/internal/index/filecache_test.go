package index_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func openSQLite(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "index.db")})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestConformanceFileCache(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index {
		c, err := index.NewFileCache(openSQLite(t), index.FileCacheOptions{MaxBytes: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestConformanceFileCacheOverLayoutCache runs the suite on the stack the origin uses.
func TestConformanceFileCacheOverLayoutCache(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index {
		l, err := index.NewLayoutCache(openSQLite(t), 16<<20)
		if err != nil {
			t.Fatal(err)
		}
		c, err := index.NewFileCache(l, index.FileCacheOptions{MaxBytes: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// countingFiles counts the File, FileBytes and Visible calls that reach the database.
type countingFiles struct {
	*sqlite.DB
	files, fileBytes, visible atomic.Int64
}

func (c *countingFiles) Visible(ctx context.Context, h hash.Hash, scope string) error {
	c.visible.Add(1)
	return c.DB.Visible(ctx, h, scope)
}

func (c *countingFiles) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	c.files.Add(1)
	return c.DB.File(ctx, h, scope)
}

func (c *countingFiles) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	c.fileBytes.Add(1)
	return c.DB.FileBytes(ctx, h, scope)
}

// fakeClock is a settable clock for visibility TTLs.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestFileCache(t *testing.T) {
	const ttl = time.Hour // on the fake clock; ristretto's own expiry (real time) never hits
	ctx := t.Context()
	inner := &countingFiles{DB: openSQLite(t)}
	clk := &fakeClock{}
	c, err := index.NewFileCache(inner, index.FileCacheOptions{MaxBytes: 16 << 20, VisibilityTTL: ttl, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := indextest.NewGen(7)
	r := g.Registration("models/a/b", 3, 1, 0)
	if _, err := c.RegisterShard(ctx, r); err != nil {
		t.Fatal(err)
	}
	other := *r
	other.Scope = "models/c/d"
	if _, err := c.RegisterShard(ctx, &other); err != nil {
		t.Fatal(err)
	}
	f, f2 := r.Files[0], r.Files[1]
	calls := func() (int64, int64) { return inner.files.Load(), inner.fileBytes.Load() }
	get := func(h hash.Hash, scope string) (*recon.FileRecord, error) {
		t.Helper()
		rec, err := c.File(ctx, h, scope)
		c.Wait()
		return rec, err
	}

	first, err := get(f.Hash, r.Scope)
	if err != nil || first.Hash != f.Hash || len(first.Terms) != len(f.Terms) {
		t.Fatalf("File = %v, %v", first, err)
	}
	for range 5 {
		again, err := get(f.Hash, r.Scope)
		if err != nil || again != first {
			t.Fatalf("cached File = %p, %v; want the record decoded first (%p)", again, err, first)
		}
	}
	if fl, fb := calls(); fl != 1 || fb != 0 {
		t.Fatalf("6 lookups reached the index %d+%d times, want 1 File", fl, fb)
	}

	// Another scope shares the record but needs its own visibility answer: the visibility
	// probe alone, no record read or decoded.
	if rec, err := get(f.Hash, other.Scope); err != nil || rec != first {
		t.Fatalf("File in the second scope = %p, %v; want the cached record", rec, err)
	}
	if fl, fb, v := inner.files.Load(), inner.fileBytes.Load(), inner.visible.Load(); fl != 1 || fb != 0 || v != 1 {
		t.Fatalf("second scope: %d File, %d FileBytes, %d Visible calls; want 1, 0, 1", fl, fb, v)
	}
	// FileBytes is the stored encoding, whatever is cached.
	if b, err := c.FileBytes(ctx, f.Hash, r.Scope); err != nil || !bytes.Equal(b, mustEncode(t, f)) {
		t.Fatalf("FileBytes = %d bytes, %v; want the stored encoding", len(b), err)
	}
	// A scope that does not see the file is asked every time (no negative caching).
	for range 2 {
		if _, err := get(f.Hash, "models/x/y"); !errors.Is(err, index.ErrNotFound) {
			t.Fatalf("File in a foreign scope: %v, want ErrNotFound", err)
		}
	}
	if _, fb := calls(); fb != 1 || inner.visible.Load() != 3 { // the FileBytes call; the second scope's check, 2 foreign
		t.Fatalf("foreign scope: %d FileBytes, %d Visible calls, want 1, 3", fb, inner.visible.Load())
	}

	// A Hide through the cache takes effect at once, for the hidden file only.
	if _, err := get(f2.Hash, r.Scope); err != nil {
		t.Fatal(err)
	}
	if err := c.Hide(ctx, r.Scope, []hash.Hash{f.Hash}); err != nil {
		t.Fatal(err)
	}
	if _, err := get(f.Hash, r.Scope); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("File after Hide: %v, want ErrNotFound", err)
	}
	if _, err := get(f2.Hash, r.Scope); err != nil {
		t.Fatalf("File of a file not hidden: %v", err)
	}
	if _, err := get(f.Hash, other.Scope); err != nil {
		t.Fatalf("File in a scope not hidden: %v", err)
	}
	// Hiding a whole scope through the cache, likewise.
	if err := c.Hide(ctx, r.Scope, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := get(f2.Hash, r.Scope); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("File after hiding the scope: %v, want ErrNotFound", err)
	}

	// A Hide made elsewhere (behind the cache) takes effect when the TTL runs out, not before.
	if _, err := get(f.Hash, other.Scope); err != nil {
		t.Fatal(err)
	}
	if err := inner.Hide(ctx, other.Scope, nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl - time.Nanosecond)
	if _, err := get(f.Hash, other.Scope); err != nil {
		t.Fatalf("File within the TTL of a remote Hide: %v, want the cached answer", err)
	}
	clk.Advance(time.Nanosecond)
	if _, err := get(f.Hash, other.Scope); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("File after the TTL of a remote Hide: %v, want ErrNotFound", err)
	}

}

// TestFileCacheVisible: Visible is a probe of visibility alone. A miss asks the wrapped index's
// Visible once (no record read, nothing decoded or cached as a record); the positive answer is
// then reused within the TTL, is shared with File (whose visibility it is), and a Hide through
// the cache drops it at once. Negative answers are never cached.
func TestFileCacheVisible(t *testing.T) {
	ctx := t.Context()
	inner := &countingFiles{DB: openSQLite(t)}
	clk := &fakeClock{}
	const ttl = time.Hour // on the fake clock; ristretto's own expiry (real time) never hits
	c, err := index.NewFileCache(inner, index.FileCacheOptions{MaxBytes: 1 << 20, VisibilityTTL: ttl, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := indextest.NewGen(7).Registration("models/a/b", 2, 1, 0)
	if _, err := c.RegisterShard(ctx, r); err != nil {
		t.Fatal(err)
	}
	f := r.Files[0].Hash
	visible := func(scope string) error {
		t.Helper()
		err := c.Visible(ctx, f, scope)
		c.Wait()
		return err
	}
	for range 3 {
		if err := visible(r.Scope); err != nil {
			t.Fatalf("Visible: %v", err)
		}
	}
	if fl, fb, v := inner.files.Load(), inner.fileBytes.Load(), inner.visible.Load(); fl != 0 || fb != 0 || v != 1 {
		t.Fatalf("3 Visible calls reached the index as %d File, %d FileBytes, %d Visible; want 0, 0, 1", fl, fb, v)
	}
	// File needs the record once, but not the visibility again.
	if _, err := c.File(ctx, f, r.Scope); err != nil {
		t.Fatal(err)
	}
	if fl, v := inner.files.Load(), inner.visible.Load(); fl != 1 || v != 1 {
		t.Fatalf("File after Visible: %d File, %d Visible calls; want 1, 1", fl, v)
	}
	for range 2 {
		if err := visible("models/x/y"); !errors.Is(err, index.ErrNotFound) {
			t.Fatalf("Visible in a foreign scope: %v, want ErrNotFound", err)
		}
	}
	if v := inner.visible.Load(); v != 3 {
		t.Fatalf("foreign scope: %d Visible calls, want 3 (no negative caching)", v)
	}
	if err := c.Hide(ctx, r.Scope, []hash.Hash{f}); err != nil {
		t.Fatal(err)
	}
	if err := visible(r.Scope); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("Visible after Hide: %v, want ErrNotFound", err)
	}
	// Past the TTL a positive answer is asked again.
	if err := visible(r.Scope); !errors.Is(err, index.ErrNotFound) {
		t.Fatal(err)
	}
	other := *r
	other.Scope = "models/c/d"
	if _, err := c.RegisterShard(ctx, &other); err != nil {
		t.Fatal(err)
	}
	if err := visible(other.Scope); err != nil {
		t.Fatal(err)
	}
	n := inner.visible.Load()
	clk.Advance(ttl)
	if err := visible(other.Scope); err != nil || inner.visible.Load() != n+1 {
		t.Fatalf("Visible past the TTL: %v after %d probes, want nil after %d", err, inner.visible.Load(), n+1)
	}
}

func mustEncode(t *testing.T, r *recon.FileRecord) []byte {
	t.Helper()
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewFileCacheInvalid(t *testing.T) {
	db := openSQLite(t)
	defer db.Close()
	for _, o := range []index.FileCacheOptions{
		{},
		{MaxBytes: -1},
		{MaxBytes: 1 << 20, VisibilityTTL: -time.Second},
		{MaxBytes: 1 << 20, VisibilityEntries: -1},
	} {
		if _, err := index.NewFileCache(db, o); !errors.Is(err, index.ErrInvalid) {
			t.Errorf("NewFileCache(%+v): %v, want ErrInvalid", o, err)
		}
	}
}

// gatedIndex answers File with one fixed record once release is closed, counting calls.
type gatedIndex struct {
	index.Index // nil: other methods are not called
	rec         *recon.FileRecord
	entered     chan struct{} // receives once per File call
	release     chan struct{}
	calls       atomic.Int64
}

func (g *gatedIndex) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	g.calls.Add(1)
	g.entered <- struct{}{}
	<-g.release
	return g.rec, nil
}

func (g *gatedIndex) Hide(ctx context.Context, scope string, files []hash.Hash) error { return nil }
func (g *gatedIndex) Close() error                                                    { return nil }

// TestFileCacheSingleflight checks that concurrent misses share one lookup, that a caller whose
// context ends stops waiting while the lookup completes and fills the cache, and that a caller
// arriving after a Hide does not join a lookup that started before it.
func TestFileCacheSingleflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := indextest.NewGen(9).Record(4)
		inner := &gatedIndex{rec: rec, entered: make(chan struct{}, 16), release: make(chan struct{})}
		c, err := index.NewFileCache(inner, index.FileCacheOptions{MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const n = 8
		var wg sync.WaitGroup
		got := make([]*recon.FileRecord, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { got[i], errs[i] = c.File(context.Background(), rec.Hash, "s") })
		}
		quitter, quit := context.WithCancel(context.Background())
		var quitErr error
		wg.Go(func() { _, quitErr = c.File(quitter, rec.Hash, "s") })
		<-inner.entered
		synctest.Wait() // every caller is now blocked in the shared lookup
		if calls := inner.calls.Load(); calls != 1 {
			t.Fatalf("%d concurrent misses made %d lookups, want 1", n+1, calls)
		}
		quit()
		synctest.Wait()
		if !errors.Is(quitErr, context.Canceled) {
			t.Fatalf("canceled caller: %v, want context.Canceled while the lookup is pending", quitErr)
		}
		// After a Hide, a new caller starts its own lookup.
		if err := c.Hide(context.Background(), "s", nil); err != nil {
			t.Fatal(err)
		}
		var late *recon.FileRecord
		wg.Go(func() { late, _ = c.File(context.Background(), rec.Hash, "s") })
		<-inner.entered
		if calls := inner.calls.Load(); calls != 2 {
			t.Fatalf("a caller after Hide joined an older lookup (%d lookups, want 2)", calls)
		}
		close(inner.release)
		wg.Wait()
		for i := range n {
			if errs[i] != nil || got[i] != rec {
				t.Fatalf("caller %d: %p, %v; want the shared record", i, got[i], errs[i])
			}
		}
		if late != rec {
			t.Fatalf("late caller got %p", late)
		}
		c.Wait()
		if _, err := c.File(context.Background(), rec.Hash, "s"); err != nil {
			t.Fatal(err)
		}
		if calls := inner.calls.Load(); calls != 2 {
			t.Fatalf("a cached answer made a lookup (%d, want 2)", calls)
		}
	})
}

// BenchmarkFileCache measures File and Layouts through the origin's stack (FileCache over
// LayoutCache over SQLite): a 100,000-term record, and 2 full layouts (trusted decode on a miss).
func BenchmarkFileCache(b *testing.B) {
	open := func(b *testing.B) index.Index {
		db, err := sqlite.Open(b.Context(), sqlite.Options{Path: filepath.Join(b.TempDir(), "index.db")})
		if err != nil {
			b.Fatal(err)
		}
		l, err := index.NewLayoutCache(db, 256<<20)
		if err != nil {
			b.Fatal(err)
		}
		c, err := index.NewFileCache(l, index.FileCacheOptions{MaxBytes: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	b.Run("FileLarge", func(b *testing.B) { indextest.BenchFileLarge(b, open(b)) })
	b.Run("Layouts2", func(b *testing.B) { indextest.BenchLayouts(b, open(b), 2) })
}
