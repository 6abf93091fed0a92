package ingest

import (
	"context"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/perf/allocbudget"
	"github.com/xetcdn/xetcdn/perf/fixture"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// budgetIndex answers what shard registration asks the index from memory, allocating nothing
// itself, so that the budget measures the Go side of registration: parsing, the checks of
// docs/protocol.md §8.5 (layouts, possession, terms, verification and file hashes), the file
// records and dedup entries. The embedded nil index.Index is never called (ingest.Index is a
// subset of it, so new index methods do not break this test).
type budgetIndex struct {
	index.Index
	layouts map[hash.Hash]*xorb.Layout
	held    map[hash.Hash]bool
}

func (x *budgetIndex) Layouts(context.Context, []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	return x.layouts, nil // a superset of what was asked; check looks up what it asked for
}

func (x *budgetIndex) Possessed(context.Context, string, []hash.Hash) (map[hash.Hash]bool, error) {
	return x.held, nil
}

func (x *budgetIndex) RegisterShard(context.Context, *index.Registration) (bool, error) {
	return true, nil
}

func (x *budgetIndex) DedupXorbs(context.Context, hash.Hash) ([]hash.Hash, error) {
	return nil, index.ErrNotFound // the files start new: no entry to take over
}

func (x *budgetIndex) DedupXorbsOf(context.Context, []hash.Hash) ([]hash.Hash, error) {
	return nil, nil // the files start new: no entry to take over
}

// TestAllocBudgetRegisterShard: the allocation budget of registering an hf_xet-like upload shard
// (4 files of 64 terms over 16 xorbs of 1,024 chunks, plus 2 xorb-info blocks), everything but
// the index round trips (perf/allocbudget).
func TestAllocBudgetRegisterShard(t *testing.T) {
	xs := fixture.XorbSpec{Tag: "budget", Seed: 3, Chunks: 1024, MinChunk: 16, MaxChunk: 240}.BuildAll(16, 1)
	idx := &budgetIndex{layouts: map[hash.Hash]*xorb.Layout{}, held: map[hash.Hash]bool{}}
	ls := make([]*xorb.Layout, len(xs))
	for i := range xs {
		ls[i] = xs[i].Layout
		idx.layouts[ls[i].Hash], idx.held[ls[i].Hash] = ls[i], true
	}
	sh, err := fixture.RegistrationShard(ls, 11, 0, 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	sh.Xorbs = []shard.Xorb{fixture.XorbBlock(ls[0]), fixture.XorbBlock(ls[1])}
	body := sh.AppendUpload(nil)
	svc := New(Options{Index: idx})
	ctx := context.Background()
	allocbudget.Check(t, "ingest/register-shard-4files", 20, func() {
		if ins, err := svc.RegisterShard(ctx, "models/acme/budget", body, nil); err != nil || !ins {
			t.Fatalf("RegisterShard = %v, %v", ins, err)
		}
	})
}
