package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
)

// TestBatchFailureIsolated commits a batch in which one registration cannot be stored (its
// scope bypassed NewBatch's check and holds a NUL byte, which Postgres text refuses): that one
// fails, the others commit, and a shard listed twice reports inserted only once.
func TestBatchFailureIsolated(t *testing.T) {
	db, err := Open(t.Context(), Options{DSN: FreshSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := indextest.NewGen(300)
	var ops []*regOp
	for i := range 4 {
		b, err := index.NewBatch(g.Registration("models/ok/r", 2, 1, 2))
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			b.Scope = "models/bad\x00scope"
		}
		ops = append(ops, &regOp{ctx: context.Background(), b: b, done: make(chan regResult, 1)})
	}
	ops = append(ops, &regOp{ctx: context.Background(), b: ops[0].b, done: make(chan regResult, 1)})
	db.register(ops)
	for i, op := range ops {
		res := <-op.done
		switch {
		case i == 2:
			if res.err == nil || errors.Is(res.err, index.ErrUnavailable) {
				t.Errorf("bad registration: %v, want a plain error", res.err)
			}
		case res.err != nil:
			t.Errorf("registration %d: %v", i, res.err)
		case res.inserted != (i != 4):
			t.Errorf("registration %d inserted = %v", i, res.inserted)
		}
		if i != 2 {
			if _, err := db.File(t.Context(), op.b.FileHashes[0], op.b.Scope); err != nil {
				t.Errorf("file of registration %d: %v", i, err)
			}
		}
	}
}
