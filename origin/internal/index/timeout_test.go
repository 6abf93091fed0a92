package index_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
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
