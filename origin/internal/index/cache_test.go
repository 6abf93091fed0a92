package index_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// counting counts the Layouts calls that reach the wrapped index, and the hashes asked.
type counting struct {
	index.Index
	calls, asked atomic.Int64
}

func (c *counting) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	c.calls.Add(1)
	c.asked.Add(int64(len(hs)))
	return c.Index.Layouts(ctx, hs)
}

func TestLayoutCache(t *testing.T) {
	db, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "x.db")})
	if err != nil {
		t.Fatal(err)
	}
	inner := &counting{Index: db}
	c, err := index.NewLayoutCache(inner, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := indextest.NewGen(5)
	put, stored := g.Layout(100), g.Layout(50)
	if _, err := db.PutXorb(t.Context(), stored, 1); err != nil { // behind the cache's back
		t.Fatal(err)
	}
	if _, err := c.PutXorb(t.Context(), put, 1); err != nil {
		t.Fatal(err)
	}
	missing := g.Hash()
	ask := []hash.Hash{put.Hash, stored.Hash, missing, stored.Hash}
	for round := range 50 {
		m, err := c.Layouts(t.Context(), ask)
		if err != nil || len(m) != 2 || m[put.Hash] == nil || m[stored.Hash].NumChunks() != 50 {
			t.Fatalf("round %d: Layouts = %v, %v", round, m, err)
		}
		if round == 0 && inner.asked.Load() != 2 {
			t.Fatalf("first Layouts asked the index for %d hashes, want 2 (not the one just put)", inner.asked.Load())
		}
		// Cache writes are applied asynchronously; Wait makes them visible (ristretto's
		// contract), so from round 1 on only the missing xorb reaches the index.
		c.Wait()
	}
	if got, want := inner.asked.Load(), int64(2+49); got != want {
		t.Errorf("50 rounds asked the index for %d hashes, want %d (the missing xorb each round)", got, want)
	}

	// LayoutBytes answers cached and uncached layouts with the stored encodings.
	other := g.Layout(7)
	if _, err := db.PutXorb(t.Context(), other, 1); err != nil {
		t.Fatal(err)
	}
	ask = append(ask, other.Hash)
	got, err := c.LayoutBytes(t.Context(), ask)
	if err != nil {
		t.Fatal(err)
	}
	want, err := db.LayoutBytes(t.Context(), ask)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("LayoutBytes found %d layouts, the database %d; want 3", len(got), len(want))
	}
	for h, b := range want {
		if !bytes.Equal(got[h], b) {
			t.Errorf("LayoutBytes of %s differs from the stored encoding", h)
		}
	}
	if _, err := index.NewLayoutCache(db, 0); !errors.Is(err, index.ErrInvalid) {
		t.Errorf("NewLayoutCache(0): %v, want ErrInvalid", err)
	}
}
