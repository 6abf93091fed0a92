package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// TestHelperRegistrar: while the busy registrar's batch waits (here on a row lock another
// transaction holds), registrations that find the queue full are committed by a helper
// registrar, and the held one is committed once the lock is released.
func TestHelperRegistrar(t *testing.T) {
	db, err := Open(t.Context(), Options{DSN: FreshSchema(t), Registrars: 2, MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := indextest.NewGen(302)
	held := g.Registration("models/h/held", 1, 1, 1)
	b, err := index.NewBatch(held)
	if err != nil {
		t.Fatal(err)
	}
	// Another transaction inserts the held registration's file first and keeps it uncommitted.
	tx, err := db.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var xid string
	if err := tx.QueryRow(t.Context(), `INSERT INTO files(hash, record) VALUES ($1, $2) RETURNING pg_current_xact_id()::text`,
		b.FileHashes[0][:], b.Records[0]).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	heldDone := make(chan error, 1)
	go func() { _, err := db.RegisterShard(context.Background(), held); heldDone <- err }()
	deadline := time.Now().Add(20 * time.Second)
	for waiting := 0; waiting == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the held registration's batch never waited for the other transaction")
		}
		if err := db.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid'
			AND transactionid::text = $1 AND NOT granted`, xid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	const n = 8 // more than the queue holds (MaxBatch)
	done := make(chan error, n)
	for i := range n {
		r := g.Registration(fmt.Sprintf("models/h/r%d", i), 1, 1, 1)
		go func() { _, err := db.RegisterShard(context.Background(), r); done <- err }()
	}
	for range n {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("registrations behind a held batch were not committed by a helper registrar")
		}
	}
	select {
	case err := <-heldDone:
		t.Fatalf("held registration answered while its row lock was held: %v", err)
	default:
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-heldDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("held registration not answered after the lock was released")
	}
	if _, err := db.File(t.Context(), b.FileHashes[0], held.Scope); err != nil {
		t.Errorf("held registration's file: %v", err)
	}
}
