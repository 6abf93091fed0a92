package postgres_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/postgres"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// dedupBound is how long another origin's registration may take to reach a filter in these
// tests: far above the milliseconds a notification takes, below the listener's lease (6 s),
// so a listener that stopped hearing would fail them.
const dedupBound = 5 * time.Second

// openOrigins opens n indexes on one fresh schema: n origins sharing a Postgres.
func openOrigins(t *testing.T, n int) (string, []*postgres.DB) {
	t.Helper()
	dsn := postgres.FreshSchema(t)
	dbs := make([]*postgres.DB, n)
	for i := range dbs {
		db, err := postgres.Open(t.Context(), postgres.Options{DSN: dsn})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs[i] = db
	}
	return dsn, dbs
}

func waitFilters(t *testing.T, dbs ...*postgres.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i, db := range dbs {
		if err := db.WaitDedupFilter(ctx); err != nil {
			t.Fatalf("filter of origin %d: %v", i, err)
		}
	}
}

// waitPresent waits until no chunk of cs is "absent" in db's filter, for at most bound.
func waitPresent(t *testing.T, db *postgres.DB, cs []hash.Hash, bound time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		missing := 0
		for _, c := range cs {
			if db.DedupAbsent(c) {
				missing++
			}
		}
		if missing == 0 {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			t.Fatalf("%s: %d of %d chunks still \"absent\" after %v", what, missing, len(cs), bound)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestDedupFilterOrigins: two origins on one Postgres. Entries registered before the filters
// were built are in them; a filter answers "absent" for chunks nobody registered (it is in
// use); the registering origin never says "absent" for its own entries, not even right after
// RegisterShard returned; the other origin's filter has them within the bound; and the
// answers a "maybe" falls through to are the table's.
func TestDedupFilterOrigins(t *testing.T) {
	_, dbs := openOrigins(t, 2)
	a, b := dbs[0], dbs[1]
	ctx := t.Context()
	g := indextest.NewGen(900)
	before := g.Registration("models/o/before", 1, 1, 20)
	if _, err := a.RegisterShard(ctx, before); err != nil {
		t.Fatal(err)
	}
	waitFilters(t, a, b)
	for i, db := range dbs {
		for _, c := range before.Dedup {
			if db.DedupAbsent(c) {
				t.Fatalf("origin %d: a chunk registered before the build is \"absent\"", i)
			}
		}
		absent := 0
		for _, c := range g.Hashes(100) {
			if db.DedupAbsent(c) {
				absent++
			}
		}
		if absent < 99 {
			t.Fatalf("origin %d: %d of 100 unregistered chunks \"absent\"; want the filter in use", i, absent)
		}
	}
	for round := range 20 {
		r := g.Registration(fmt.Sprintf("models/o/%d", round), 1, 1, 30)
		reg, other := a, b
		if round%2 == 1 {
			reg, other = b, a
		}
		if _, err := reg.RegisterShard(ctx, r); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Dedup {
			if reg.DedupAbsent(c) {
				t.Fatalf("round %d: the registering origin says \"absent\" for its own entry", round)
			}
		}
		took := waitPresent(t, other, r.Dedup, dedupBound, fmt.Sprintf("round %d, the other origin", round))
		if round == 0 {
			t.Logf("the other origin's filter had the entries after %v", took)
		}
		if xs, err := other.DedupXorbs(ctx, r.Dedup[0]); err != nil || len(xs) != 1 || xs[0] != r.Xorbs[0] {
			t.Fatalf("round %d: DedupXorbs on the other origin = %v, %v; want %v", round, xs, err, r.Xorbs)
		}
	}
}

// TestDedupFilterBuildRace: registrations on both origins while their filters are first built
// (a table of 100,000 entries, so the scans take a while): none of them is "absent" on the
// origin that registered it, at any moment after its RegisterShard returned, nor on the
// other once the bound has passed.
func TestDedupFilterBuildRace(t *testing.T) {
	dsn, dbs := openOrigins(t, 2)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO shards(hash, scope, xorbs, chunks) VALUES (sha256('filler'), 'models/f/f', '', '');
		INSERT INTO dedup SELECT sha256(i::text::bytea), sha256('filler') FROM generate_series(1, 100000) i; ANALYZE dedup`); err != nil {
		t.Fatal(err)
	}
	g := indextest.NewGen(901)
	const workers, each = 8, 25
	regs := make([][]*index.Registration, workers)
	for w := range regs {
		for i := range each {
			regs[w] = append(regs[w], g.Registration(fmt.Sprintf("models/b/%d-%d", w, i), 1, 1, 8))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := dbs[w%2]
			for _, r := range regs[w] {
				if _, err := db.RegisterShard(ctx, r); err != nil {
					errs <- err
					return
				}
				for _, c := range r.Dedup {
					if db.DedupAbsent(c) { // the first call starts the build
						errs <- fmt.Errorf("origin %d says \"absent\" for its own entry", w%2)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFilters(t, dbs...)
	var all []hash.Hash
	for _, rs := range regs {
		for _, r := range rs {
			all = append(all, r.Dedup...)
		}
	}
	for i, db := range dbs {
		waitPresent(t, db, all, dedupBound, fmt.Sprintf("origin %d after the builds", i))
	}
	// The filler is in both (the scan) and a random chunk is not (in use).
	var raw []byte
	if err := conn.QueryRow(ctx, `SELECT sha256('77'::bytea)`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	filler := hash.Hash(raw)
	for i, db := range dbs {
		if db.DedupAbsent(filler) {
			t.Fatalf("origin %d: a scanned entry is \"absent\"", i)
		}
	}
}

// TestDedupFilterSessionLost: when the listener's session ends, the filter stops answering
// (a registration by the other origin in the meantime would otherwise be missed), and once
// the session is back it holds what was registered while it was gone.
func TestDedupFilterSessionLost(t *testing.T) {
	dsn, dbs := openOrigins(t, 2)
	a, b := dbs[0], dbs[1]
	ctx := t.Context()
	waitFilters(t, a, b)
	g := indextest.NewGen(902)
	probe := g.Hash()
	if !b.DedupAbsent(probe) {
		t.Fatal("filter not in use")
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// Both origins' listeners end; a registration while they are gone notifies nobody.
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`,
		postgres.DedupListenerName).Scan(&n); err != nil || n < 2 {
		t.Fatalf("terminated %d listeners, %v; want at least 2", n, err)
	}
	r := g.Registration("models/l/l", 1, 1, 30)
	if _, err := a.RegisterShard(ctx, r); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(dedupBound)
	for b.DedupAbsent(probe) {
		// The filter may answer until its listener notices (at once: the server closed the
		// session), never past its lease.
		if time.Now().After(deadline) {
			t.Fatal("the filter still answers after its session was terminated")
		}
		time.Sleep(time.Millisecond)
	}
	waitFilters(t, a, b)
	waitPresent(t, b, r.Dedup, dedupBound, "after the session is back")
	waitPresent(t, a, r.Dedup, 0, "on the registering origin")
	if !b.DedupAbsent(probe) {
		t.Fatal("filter not in use after the session is back")
	}
}

// TestDedupFilterBadNotifications: notifications that are not chunk lists (garbage, bad
// base64, a partial hash, no sender) change nothing and do not stop the listener: a valid one
// sent after them is applied.
func TestDedupFilterBadNotifications(t *testing.T) {
	dsn, dbs := openOrigins(t, 1)
	b := dbs[0]
	waitFilters(t, b)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	g := indextest.NewGen(903)
	bad := g.Hashes(3)
	good := g.Hash()
	payloads := []string{
		"garbage",
		"x:!!! not base64 !!!",
		"x:" + base64.StdEncoding.EncodeToString(bad[0][:31]),
		base64.StdEncoding.EncodeToString(append(bad[1][:], bad[2][:]...)),
		"x:" + base64.StdEncoding.EncodeToString(good[:]),
	}
	for _, p := range payloads {
		if _, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, b.DedupChannel(), p); err != nil {
			t.Fatal(err)
		}
	}
	// The valid one is applied by the filter in use (not an answer of a filter out of use).
	probe := g.Hash()
	deadline := time.Now().Add(dedupBound)
	for b.DedupAbsent(good) || !b.DedupAbsent(probe) {
		if time.Now().After(deadline) {
			t.Fatalf("the valid notification after the bad ones: not applied by a filter in use within %v", dedupBound)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for i, c := range bad {
		if !b.DedupAbsent(c) {
			t.Fatalf("bad notification %d added a chunk", i)
		}
	}
}
