package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func waitFilter(t *testing.T, db *sqlite.DB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n, err := db.WaitDedupFilter(ctx)
	if err != nil {
		t.Fatalf("dedup filter not built: %v", err)
	}
	return n
}

func wantDedup(t *testing.T, db *sqlite.DB, c hash.Hash, xorbs []hash.Hash) {
	t.Helper()
	xs, err := db.DedupXorbs(t.Context(), c)
	if err != nil || !slices.Equal(xs, xorbs) {
		t.Fatalf("DedupXorbs(%s) = %v, %v; want %v", c, xs, err, xorbs)
	}
}

// TestDedupFilterAnswersMisses: once the dedup filter is built, a global-dedup query for a
// chunk the table does not hold is answered (ErrNotFound) without reading the database — the
// read pool is closed here, so any read would fail — while every registered chunk, before and
// after the build, is still found (issue 13: the per-file dedup miss of small-file uploads).
func TestDedupFilterAnswersMisses(t *testing.T) {
	db := openAt(t, filepath.Join(t.TempDir(), "index.db"))
	defer db.Close()
	ctx := t.Context()
	g := indextest.NewGen(13)
	before := g.Registration("models/acme/a", 2, 2, 5)
	if _, err := db.RegisterShard(ctx, before); err != nil {
		t.Fatal(err)
	}
	// The first query asks for the build (and reads: there is no filter yet).
	if _, err := db.DedupXorbs(ctx, g.Hash()); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("DedupXorbs(unknown) before the filter = %v; want ErrNotFound", err)
	}
	waitFilter(t, db)
	after := g.Registration("models/acme/b", 1, 3, 5)
	if _, err := db.RegisterShard(ctx, after); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*index.Registration{before, after} {
		for _, c := range r.Dedup {
			wantDedup(t, db, c, r.Xorbs)
		}
	}
	if err := db.CloseReadPool(); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		c := g.Hash()
		if _, err := db.DedupXorbs(ctx, c); !errors.Is(err, index.ErrNotFound) {
			t.Fatalf("DedupXorbs(unknown #%d) with no read connection = %v; want ErrNotFound from the filter", i, err)
		}
	}
	// A registered chunk still goes to the table (which now fails): the filter never answers
	// for a chunk it holds.
	if _, err := db.DedupXorbs(ctx, after.Dedup[0]); err == nil || errors.Is(err, index.ErrNotFound) {
		t.Fatalf("DedupXorbs(registered) with no read connection = %v; want a read error", err)
	}
}

// TestDedupFilterGrowsUnderConcurrentRegistration: registrations racing with the filter's
// first build and with its rebuilds (a filter sized for 64 chunks, outgrown many times) lose
// no chunk: after them every registered chunk is found, and the filter grew to hold them.
func TestDedupFilterGrowsUnderConcurrentRegistration(t *testing.T) {
	defer sqlite.SetBloomMinChunks(64)()
	db := openAt(t, filepath.Join(t.TempDir(), "index.db"))
	defer db.Close()
	ctx := t.Context()
	g := indextest.NewGen(14)
	const workers, shards, chunks = 4, 40, 12
	regs := make([][]*index.Registration, workers)
	for w := range regs {
		for range shards {
			regs[w] = append(regs[w], g.Registration("models/acme/c", 1, 1, chunks))
		}
	}
	probe := g.Hashes(200)
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w := range workers {
		wg.Go(func() {
			for _, r := range regs[w] {
				if _, err := db.RegisterShard(ctx, r); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() { // queries start the build while the registrations run
		for _, c := range probe {
			if _, err := db.DedupXorbs(ctx, c); !errors.Is(err, index.ErrNotFound) {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	size := waitFilter(t, db)
	if size < workers*shards*chunks {
		t.Errorf("filter sized for %d chunks after %d were registered; want it grown", size, workers*shards*chunks)
	}
	for _, rs := range regs {
		for _, r := range rs {
			for _, c := range r.Dedup {
				wantDedup(t, db, c, r.Xorbs)
			}
		}
	}
}
