package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
)

// TestConformancePlainOff: the conformance suite on the ON CONFLICT statement alone
// (TestConformance runs it on the plain inserts, the default): both give the same answers.
func TestConformancePlainOff(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index {
		db := open(t)
		db.SetPlainOff(true)
		return db
	})
}

// TestRegisterPlainFallback: another transaction inserts one of a registration's rows (a
// visibility row, or a files row) and commits while the registration's plain INSERT waits on
// it: the insert fails with unique_violation, the registration reruns with ON CONFLICT and
// succeeds, once, with every row there once.
func TestRegisterPlainFallback(t *testing.T) {
	for _, table := range []string{"visibility", "files"} {
		t.Run(table, func(t *testing.T) {
			ctx := t.Context()
			dsn := postgres.FreshSchema(t)
			db, err := postgres.Open(ctx, postgres.Options{DSN: dsn})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			g := indextest.NewGen(530)
			const scope = "models/p/a"
			r := g.Registration(scope, 3, 1, 2)
			r.Inherit, r.InheritMax = r.Dedup[:1], 1 // a first round trip, which looks the rows up
			f := r.Files[1].Hash

			other, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(context.Background())
			watch, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer watch.Close(context.Background())
			tx, err := other.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if table == "visibility" {
				_, err = tx.Exec(ctx, `INSERT INTO visibility(scope, file) VALUES ($1, $2)`, scope, f[:])
			} else {
				_, err = tx.Exec(ctx, `INSERT INTO files(hash, record) VALUES ($1, $2)`, f[:], []byte("other"))
			}
			if err != nil {
				t.Fatal(err)
			}

			type res struct {
				inserted bool
				err      error
			}
			done := make(chan res, 1)
			go func() {
				ins, err := db.RegisterShard(ctx, r)
				done <- res{ins, err}
			}()
			// The registration's insert waits on the other transaction's row.
			pid := other.PgConn().PID()
			for deadline := time.Now().Add(10 * time.Second); ; {
				var n int
				if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, pid).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the registration never waited on the other transaction")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.err != nil || !got.inserted {
				t.Fatalf("RegisterShard = %v, %v; want true, nil", got.inserted, got.err)
			}
			if n := db.PlainFallbacks(); n != 1 {
				t.Errorf("PlainFallbacks = %d, want 1", n)
			}
			count := func(q string, args ...any) int {
				var n int
				if err := watch.QueryRow(ctx, q, args...).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			h0, h1, h2 := r.Files[0].Hash, r.Files[1].Hash, r.Files[2].Hash
			if n := count(`SELECT count(*) FROM shards WHERE hash = $1`, r.Shard[:]); n != 1 {
				t.Errorf("%d shard rows, want 1", n)
			}
			if n := count(`SELECT count(*) FROM files WHERE hash IN ($1, $2, $3)`, h0[:], h1[:], h2[:]); n != 3 {
				t.Errorf("%d files rows, want 3", n)
			}
			if n := count(`SELECT count(*) FROM visibility WHERE scope = $1 AND file IN ($2, $3, $4)`, scope, h0[:], h1[:], h2[:]); n != 3 {
				t.Errorf("%d visibility rows, want 3", n)
			}
			if ins, err := db.RegisterShard(ctx, r); err != nil || ins {
				t.Errorf("RegisterShard again = %v, %v; want false, nil", ins, err)
			}
			if n := db.PlainFallbacks(); n != 1 {
				t.Errorf("PlainFallbacks after the second registration = %d, want 1", n)
			}
		})
	}
}
