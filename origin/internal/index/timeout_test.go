package index_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// stalledIndex answers nothing: every call waits for its context, like a database behind a
// partition. (A test double: methods it does not declare panic on the nil Index.)
type stalledIndex struct{ index.Index }

func (stalledIndex) XorbSize(ctx context.Context, _ hash.Hash) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (stalledIndex) RecordPossession(ctx context.Context, _ string, _ hash.Hash) error {
	<-ctx.Done()
	return ctx.Err()
}

func (stalledIndex) Possessed(ctx context.Context, _ string, _ []hash.Hash) (map[hash.Hash]bool, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (stalledIndex) Hide(ctx context.Context, _ string, _ []hash.Hash) error {
	<-ctx.Done()
	return ctx.Err()
}

func (stalledIndex) ShardBody(ctx context.Context, _ hash.Hash) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestTimeouts(t *testing.T) {
	const d = 50 * time.Millisecond
	b, err := index.NewTimeouts(stalledIndex{}, d)
	if err != nil {
		t.Fatal(err)
	}
	// The test's own bound, far above d: a call that is not bounded fails, not hangs.
	bounded, cancelBound := context.WithTimeout(context.Background(), 50*d)
	defer cancelBound()
	start := time.Now()
	_, err = b.XorbSize(bounded, hash.Hash{})
	if !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("stalled index: %v, want index.ErrUnavailable", err)
	}
	if took := time.Since(start); took > 20*d {
		t.Fatalf("stalled index answered after %v, bound %v", took, d)
	}
	// The possession calls of ingest and the dedup route are bounded too, and so are the
	// methods the server's embedding decorator used to miss (Hide, ShardBody).
	if err := b.RecordPossession(bounded, "s", hash.Hash{}); !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("stalled RecordPossession: %v, want index.ErrUnavailable", err)
	}
	if _, err := b.Possessed(bounded, "s", []hash.Hash{{}}); !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("stalled Possessed: %v, want index.ErrUnavailable", err)
	}
	if err := b.Hide(bounded, "s", nil); !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("stalled Hide: %v, want index.ErrUnavailable", err)
	}
	if _, err := b.ShardBody(bounded, hash.Hash{}); !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("stalled ShardBody: %v, want index.ErrUnavailable", err)
	}
	// The caller leaving is not the dependency's fault.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.XorbSize(ctx, hash.Hash{}); !errors.Is(err, context.Canceled) || errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("cancelled caller: %v, want context.Canceled only", err)
	}
	if _, err := index.NewTimeouts(stalledIndex{}, 0); !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("zero timeout: %v, want index.ErrInvalid", err)
	}
}

// stallsOn answers Layouts from an SQLite index, except that a call naming stall waits for its
// context, like a database behind a partition.
type stallsOn struct {
	index.Index
	stall hash.Hash
}

func (s stallsOn) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	for _, h := range hs {
		if h == s.stall {
			<-ctx.Done()
			return nil, ctx.Err()
		}
	}
	return s.Index.Layouts(ctx, hs)
}

// TestTimeoutsCachedLayouts: layouts the caches below hold are answered without a bound (no
// timer armed: fewer allocations than a bounded call), and a call that needs the index is
// still bounded, cached layouts among its hashes or not.
func TestTimeoutsCachedLayouts(t *testing.T) {
	db, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "x.db")})
	if err != nil {
		t.Fatal(err)
	}
	g := indextest.NewGen(6)
	stall := g.Hash()
	layouts, err := index.NewLayoutCache(stallsOn{Index: db, stall: stall}, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	files, err := index.NewFileCache(layouts, index.FileCacheOptions{MaxBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	const d = 50 * time.Millisecond
	b, err := index.NewTimeouts(files, d)
	if err != nil {
		t.Fatal(err)
	}
	var hs []hash.Hash
	for range 4 {
		l := g.Layout(20)
		if _, err := layouts.PutXorb(t.Context(), l, 1); err != nil { // cached once stored
			t.Fatal(err)
		}
		hs = append(hs, l.Hash)
	}
	ctx := context.Background()
	m, err := b.Layouts(ctx, hs)
	if err != nil || len(m) != len(hs) {
		t.Fatalf("cached layouts: %d of %d, %v", len(m), len(hs), err)
	}
	cached := testing.AllocsPerRun(50, func() { b.Layouts(ctx, hs) })
	bounded := testing.AllocsPerRun(50, func() {
		index.Bound(ctx, d, "index", func(ctx context.Context) (map[hash.Hash]*xorb.Layout, error) { return files.Layouts(ctx, hs) })
	})
	if cached >= bounded {
		t.Errorf("cached layouts through Timeouts: %.0f allocations, a bounded call %.0f: want fewer (no timer)", cached, bounded)
	}
	// One hash the index must be asked for, and it stalls: bounded.
	bound, cancel := context.WithTimeout(ctx, 50*d)
	defer cancel()
	start := time.Now()
	if _, err := b.Layouts(bound, append(hs[:2:2], stall)); !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("cached layouts and a stalled one: %v, want index.ErrUnavailable", err)
	}
	if took := time.Since(start); took > 20*d {
		t.Fatalf("stalled layout answered after %v, bound %v", took, d)
	}
}
