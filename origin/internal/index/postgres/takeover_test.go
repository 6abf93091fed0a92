package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestTwoReplicasTakeOver: two index instances on one schema (two origin replicas) register,
// in waves, registrations whose dedup entries overlap — entries that exist before the wave and
// are taken over, and entries new to the wave that both instances insert — the first instance
// in one order, the second in the opposite one. Nothing fails (a deadlock would surface as an
// error after deadlock_timeout), and the newest wins: after each wave, every entry the wave
// named names one of that wave's shards that listed it, and every other entry still names what
// it named before the wave.
func TestTwoReplicasTakeOver(t *testing.T) {
	ctx := t.Context()
	dsn := postgres.FreshSchema(t)
	var dbs [2]*postgres.DB
	for i := range dbs {
		// Small batches, two in flight per instance: many transactions at once.
		db, err := postgres.Open(ctx, postgres.Options{DSN: dsn, Registrars: 2, MaxBatch: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs[i] = db
	}
	g := indextest.NewGen(410)
	pool := g.Hashes(24) // entries any wave may take over
	seed := g.Registration("models/t/seed", 1, 1, 0)
	seed.Dedup = pool[:16]
	if _, err := dbs[0].RegisterShard(ctx, seed); err != nil {
		t.Fatal(err)
	}
	// owners: chunk → the xorbs of the shards its entry may name now (each shard offers one
	// xorb of its own, so the xorb DedupXorbs answers tells the shard).
	owners := map[hash.Hash]map[hash.Hash]bool{}
	for _, c := range seed.Dedup {
		owners[c] = map[hash.Hash]bool{seed.Xorbs[0]: true}
	}
	pick := rand.New(rand.NewPCG(41, 41))
	const waves, perWave = 20, 64
	for w := range waves {
		fresh := g.Hashes(6) // new in this wave: both instances insert them
		files := make([]*recon.FileRecord, 6)
		for i := range files {
			files[i] = g.Record(1)
		}
		regs := make([]*index.Registration, perWave)
		named := map[hash.Hash]map[hash.Hash]bool{}
		for i := range regs {
			r := g.Registration(fmt.Sprintf("models/t/%d", i%3), 0, 1, 0)
			r.Files = []*recon.FileRecord{files[pick.IntN(len(files))]}
			for _, k := range pick.Perm(len(pool))[:8] {
				r.Dedup = append(r.Dedup, pool[k])
			}
			for _, k := range pick.Perm(len(fresh))[:2] {
				r.Dedup = append(r.Dedup, fresh[k])
			}
			for _, c := range r.Dedup {
				if named[c] == nil {
					named[c] = map[hash.Hash]bool{}
				}
				named[c][r.Xorbs[0]] = true
			}
			regs[i] = r
		}
		// Instance 0 registers the even ones from the first, instance 1 the odd ones from the
		// last, 16 at a time each.
		var wg sync.WaitGroup
		errs := make(chan error, perWave)
		for d, db := range dbs {
			var mine []*index.Registration
			for i := d; i < perWave; i += 2 {
				mine = append(mine, regs[i])
			}
			if d == 1 {
				for i, j := 0, len(mine)-1; i < j; i, j = i+1, j-1 {
					mine[i], mine[j] = mine[j], mine[i]
				}
			}
			work := make(chan *index.Registration, len(mine))
			for _, r := range mine {
				work <- r
			}
			close(work)
			for range 16 {
				wg.Go(func() {
					for r := range work {
						if _, err := db.RegisterShard(ctx, r); err != nil {
							errs <- fmt.Errorf("wave %d, instance %d: %w", w, d, err)
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for c, xs := range named {
			owners[c] = xs
		}
		for c, want := range owners {
			got, err := dbs[w%2].DedupXorbs(ctx, c)
			if err != nil || len(got) != 1 || !want[got[0]] {
				t.Fatalf("wave %d: DedupXorbs(%s) = %v, %v; want one of the %d shards that named it last", w, c, got, err, len(want))
			}
		}
	}
}

// TestTakeOverAfterConcurrentInsert: an entry another transaction inserts while a registration
// naming the same chunk runs, and commits while the registration waits for it, is taken over by
// the registration (it commits last: newest wins), although it was not there when the
// registration's statement began. (A take-over by a plain UPDATE sharing the insert's snapshot
// would leave it to the older one: docs/decisions.md, 2026-12-02 "Dedup take-overs by a plain
// update: tried, not kept".)
func TestTakeOverAfterConcurrentInsert(t *testing.T) {
	ctx := t.Context()
	dsn := postgres.FreshSchema(t)
	db, err := postgres.Open(ctx, postgres.Options{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := indextest.NewGen(411)
	other := g.Registration("models/t/other", 1, 1, 1)
	if _, err := db.RegisterShard(ctx, other); err != nil {
		t.Fatal(err)
	}
	chunks := g.Hashes(3)
	// Another transaction inserts the middle chunk's entry, naming the other shard, and holds
	// it uncommitted.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var xid string
	if err := tx.QueryRow(ctx, `INSERT INTO dedup(chunk, shard) VALUES ($1, $2) RETURNING pg_current_xact_id()::text`,
		chunks[1][:], other.Shard[:]).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	newest := g.Registration("models/t/newest", 1, 1, 0)
	newest.Dedup = chunks
	done := make(chan error, 1)
	go func() { _, err := db.RegisterShard(context.Background(), newest); done <- err }()
	deadline := time.Now().Add(20 * time.Second)
	for waiting := 0; waiting == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the registration never waited for the other transaction's entry")
		}
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid'
			AND transactionid::text = $1 AND NOT granted`, xid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polling the server's state, bounded by the deadline
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("registration not answered after the other transaction committed")
	}
	for _, c := range chunks {
		if xs, err := db.DedupXorbs(ctx, c); err != nil || len(xs) != 1 || xs[0] != newest.Xorbs[0] {
			t.Errorf("DedupXorbs(%s) = %v, %v; want the newest shard's %v", c, xs, err, newest.Xorbs)
		}
	}
}
