package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/shared/recon"
)

func open(t testing.TB) *postgres.DB { return openConns(t, 0) }

func openConns(t testing.TB, maxConns int32) *postgres.DB {
	return openWith(t, postgres.Options{MaxConns: maxConns})
}

func openWith(t testing.TB, o postgres.Options) *postgres.DB {
	t.Helper()
	o.DSN = postgres.FreshSchema(t)
	db, err := postgres.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() }) // before the schema is dropped (cleanups run last-first)
	return db
}

func TestConformance(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index { return open(t) })
}

// TestQueryPlans fills the tables with enough rows (tens of thousands) for the planner to
// prefer an index to a sequential scan whenever one applies, and checks that no lookup scans.
func TestQueryPlans(t *testing.T) {
	db := open(t)
	plans, err := db.ExplainLookups(t.Context(), 20000)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) == 0 {
		t.Fatal("no query plans")
	}
	for q, plan := range plans {
		t.Logf("%s:\n%s", q, plan)
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index") {
			t.Errorf("%s: plan is not an index lookup:\n%s", q, plan)
		}
	}
	// The statements on visibility, keyed by (file, scope) with an index on scope (migration
	// 0008): by file (and scope), probes of the primary key; by scope alone, of visibility_scope.
	for q, idx := range map[string]string{
		"File":         "visibility_pkey",
		"Visible":      "visibility_pkey",
		"HideFiles":    "visibility_pkey",
		"VisibleAny":   "visibility_pkey",
		"DropDead":     "visibility_pkey",
		"VisibleFiles": "visibility_pkey",
		"HideScope":    "visibility_scope",
	} {
		plan, ok := plans[q]
		if !ok {
			t.Errorf("%s: no plan", q)
			continue
		}
		if !strings.Contains(plan, "using "+idx+" on visibility") && !strings.Contains(plan, "Index Scan on "+idx) {
			t.Errorf("%s: plan does not use %s:\n%s", q, idx, plan)
		}
	}
	if plan := plans["VisibleFiles"]; strings.Contains(plan, "Sort") {
		t.Errorf("VisibleFiles: plan sorts instead of walking the primary key in order:\n%s", plan)
	}
}

// TestUnavailable needs no server: nothing listens on port 1 of loopback.
func TestUnavailable(t *testing.T) {
	_, err := postgres.Open(t.Context(), postgres.Options{DSN: "postgres://xet@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5"})
	if !errors.Is(err, index.ErrUnavailable) {
		t.Fatalf("Open of an unreachable server: %v, want ErrUnavailable", err)
	}
	if _, err := postgres.Open(t.Context(), postgres.Options{DSN: "postgres://xet@127.0.0.1:1/postgres?sslmode=bogus"}); !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("Open with a malformed DSN: %v, want ErrInvalid", err)
	}
}

func BenchmarkRegister(b *testing.B) {
	for _, c := range []struct {
		workers, registrars int
		conns               int32
	}{{1, 1, 2}, {64, 4, 12}, {64, 8, 16}, {64, 16, 24}} {
		b.Run(fmt.Sprintf("workers=%d/registrars=%d", c.workers, c.registrars), func(b *testing.B) {
			indextest.BenchRegister(b, openWith(b, postgres.Options{MaxConns: c.conns, Registrars: c.registrars}), c.workers)
		})
	}
}

func BenchmarkFileLarge(b *testing.B) { indextest.BenchFileLarge(b, open(b)) }

func BenchmarkLayouts(b *testing.B) {
	for _, n := range []int{2, 64} {
		b.Run(fmt.Sprintf("xorbs=%d", n), func(b *testing.B) { indextest.BenchLayouts(b, open(b), n) })
		b.Run(fmt.Sprintf("xorbs=%d/cache", n), func(b *testing.B) {
			c, err := index.NewLayoutCache(open(b), 256<<20)
			if err != nil {
				b.Fatal(err)
			}
			indextest.BenchLayouts(b, c, n)
		})
	}
}

// TestTwoReplicas registers the same overlapping shards through two independent DB handles (as
// two origin replicas would), each with its own registrars and its own order, and checks that
// nothing fails (a deadlock would surface as an error after deadlock_timeout) and that every
// shard is reported new exactly once.
func TestTwoReplicas(t *testing.T) {
	dsn := postgres.FreshSchema(t)
	var dbs [2]*postgres.DB
	for i := range dbs {
		db, err := postgres.Open(t.Context(), postgres.Options{DSN: dsn})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs[i] = db
	}
	g := indextest.NewGen(400)
	// Heavy overlap on fresh keys: shards come in groups of 16; every shard of a group lists 6
	// of its group's 10 new files and 6 of its 10 new dedup chunks, in its own order. Both
	// replicas work through the groups in the same sequence (each in its own order inside a
	// group), so concurrent statements keep inserting the same not-yet-committed keys.
	const group, n = 16, 320
	pick := rand.New(rand.NewPCG(7, 7))
	regs := make([]*index.Registration, n)
	for gi := 0; gi < n; gi += group {
		chunks := g.Hashes(10)
		files := make([]*recon.FileRecord, 10)
		for i := range files {
			files[i] = g.Record(2)
		}
		for i := gi; i < gi+group; i++ {
			r := g.Registration(fmt.Sprintf("models/r/%d", i%2), 1, 2, 1)
			for _, k := range pick.Perm(10)[:6] {
				r.Files = append(r.Files, files[k])
			}
			for _, k := range pick.Perm(10)[:6] {
				r.Dedup = append(r.Dedup, chunks[k])
			}
			regs[i] = r
		}
	}
	var inserted [n]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for d, db := range dbs {
		rng := rand.New(rand.NewPCG(uint64(d), 1))
		var order []int
		for gi := 0; gi < n; gi += group {
			for _, k := range rng.Perm(group) {
				order = append(order, gi+k)
			}
		}
		next := atomic.Int64{}
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := int(next.Add(1) - 1)
					if k >= n {
						return
					}
					i := order[k]
					ins, err := db.RegisterShard(t.Context(), regs[i])
					if err != nil {
						errs <- err
						return
					}
					if ins {
						inserted[i].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("RegisterShard: %v", err)
	}
	for i := range inserted {
		if c := inserted[i].Load(); c != 1 {
			t.Errorf("shard %d reported new %d times", i, c)
		}
	}
}

// TestLostConnections: the server terminates every connection of the pool, as a restart does.
// The lookups and registrations that follow all succeed — the first one to meet a dead
// connection resets the pool and retries — instead of failing once per pooled connection.
func TestLostConnections(t *testing.T) {
	base := testenv.Require(t, testenv.PostgresDSN)
	app := fmt.Sprintf("xet_lost_%d", rand.Uint64())
	db, err := postgres.Open(t.Context(), postgres.Options{MaxConns: 8, DSN: postgres.FreshSchema(t) + "&application_name=" + app})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := indextest.NewGen(500)
	regs := make([]*index.Registration, 12)
	for i := range regs {
		regs[i] = g.Registration("models/lost/r", 1, 1, 1)
	}
	for _, r := range regs[:4] {
		if _, err := db.RegisterShard(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	lookups := func() error {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			wg.Go(func() {
				r := regs[i%4]
				if _, err := db.File(t.Context(), r.Files[0].Hash, r.Scope); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	if err := lookups(); err != nil { // fills the pool with several connections
		t.Fatal(err)
	}

	admin, err := pgx.Connect(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var killed int
	if err := admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed < 2 {
		t.Fatalf("terminated %d connections; the test needs a pool of several", killed)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left int
		if err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d terminated backends still running after 10 s", left)
		}
		time.Sleep(10 * time.Millisecond) // polling the server's state, bounded by the deadline
	}

	t.Logf("terminated %d pooled connections", killed)
	for i, r := range regs[:4] {
		if _, err := db.File(t.Context(), r.Files[0].Hash, r.Scope); err != nil {
			t.Fatalf("lookup %d after the connections were lost: %v", i, err)
		}
	}
	for _, r := range regs[4:] {
		if _, err := db.RegisterShard(t.Context(), r); err != nil {
			t.Fatalf("registration after the connections were lost: %v", err)
		}
	}
	if err := lookups(); err != nil {
		t.Fatal(err)
	}
}
