package edgereg_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/edgereg"
	"github.com/xetcdn/xetcdn/shared/internalapi"
)

// stores opens each implementation: SQLite in a temp file, Postgres in a fresh schema.
func stores(t *testing.T) map[string]func(t *testing.T) edgereg.Store {
	return map[string]func(t *testing.T) edgereg.Store{
		"sqlite": func(t *testing.T) edgereg.Store {
			s, err := edgereg.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "index.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"postgres": func(t *testing.T) edgereg.Store {
			s, err := edgereg.OpenPostgres(t.Context(), freshSchema(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

func freshSchema(t *testing.T) string {
	dsn := testenv.Require(t, testenv.PostgresDSN)
	var b [6]byte
	rand.Read(b[:])
	schema := "xet_test_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			conn.Close(context.Background())
		}
	})
	u, _ := url.Parse(dsn)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func report(u, region string, ready bool) internalapi.EdgeReport {
	return internalapi.EdgeReport{URL: u, Region: region, Version: "v1", Permits: 8, FreePermits: 3,
		CacheFill: 0.25, HitRatio: 0.5, Ready: ready}
}

// TestRegistry runs on both databases: reports are stored and replaced by URL (keeping the first
// report's time), an edge is healthy while its reports are fresh and ready, stale after the
// timeout, listed until Forget, and the metric counts edges per region and state. A second
// Registry on the same database (another origin replica) sees the same edges.
func TestRegistry(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			clk := &clock{t: time.Unix(1_800_000_000, 0)}
			reg := prometheus.NewRegistry()
			g := edgereg.New(edgereg.Options{Store: st, Timeout: 6 * time.Second, Now: clk.now, Registerer: reg})
			other := edgereg.New(edgereg.Options{Store: st, Timeout: 6 * time.Second, Now: clk.now})
			ctx := t.Context()
			if g.Interval() != 2*time.Second {
				t.Errorf("Interval = %v, want a third of the timeout", g.Interval())
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(g.Report(ctx, report("https://a", "eu", true)))
			first := clk.now()
			clk.add(time.Second)
			must(g.Report(ctx, report("https://b", "eu", false)))
			must(g.Report(ctx, report("https://c", "us", true)))
			clk.add(time.Second)
			r2 := report("https://a", "eu", true)
			r2.FreePermits, r2.Version = 0, "v2"
			must(g.Report(ctx, r2))

			recs, err := other.List(ctx)
			must(err)
			if len(recs) != 3 || recs[0].URL != "https://a" || recs[1].URL != "https://b" || recs[2].URL != "https://c" {
				t.Fatalf("List = %+v", recs)
			}
			a := recs[0]
			if !a.First.Equal(first) || !a.Seen.Equal(clk.now()) || a.FreePermits != 0 || a.Version != "v2" ||
				a.CacheFill != 0.25 || a.HitRatio != 0.5 || a.Permits != 8 || !a.Ready {
				t.Errorf("replaced record = %+v (first %v)", a, first)
			}
			states := func() map[string]edgereg.State {
				recs, err := other.List(ctx)
				must(err)
				m := map[string]edgereg.State{}
				for _, r := range recs {
					m[r.URL] = other.State(r)
				}
				return m
			}
			if s := states(); s["https://a"] != edgereg.Healthy || s["https://b"] != edgereg.NotReady || s["https://c"] != edgereg.Healthy {
				t.Errorf("states = %v", s)
			}
			want := map[string]float64{"eu/healthy": 1, "eu/not_ready": 1, "eu/stale": 0,
				"us/healthy": 1, "us/not_ready": 0, "us/stale": 0}
			if got := gauges(t, reg); !maps.Equal(got, want) {
				t.Errorf("xet_origin_edges = %v, want %v", got, want)
			}
			// c reported 1 s after a's first report; 5.5 s later it is still healthy, 6.5 s later stale.
			clk.add(4500 * time.Millisecond)
			if s := states(); s["https://c"] != edgereg.Healthy {
				t.Errorf("5.5 s after its report c is %s, want healthy", s["https://c"])
			}
			clk.add(time.Second)
			if s := states(); s["https://c"] != edgereg.Stale || s["https://a"] != edgereg.Healthy {
				t.Errorf("6.5 s after its report: %v, want c stale and a healthy", s)
			}
			// After Forget, the next report removes the silent ones.
			clk.add(edgereg.Forget)
			must(g.Report(ctx, report("https://d", "us", true)))
			recs, err = other.List(ctx)
			must(err)
			if len(recs) != 1 || recs[0].URL != "https://d" {
				t.Errorf("after Forget: %+v, want only d", recs)
			}
		})
	}
}

// TestSnapshotKeepsLastGood: the token route's view is refreshed at most once a second and
// survives a failing database with the last good listing.
func TestSnapshotKeepsLastGood(t *testing.T) {
	st, err := edgereg.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	g := edgereg.New(edgereg.Options{Store: st, Now: clk.now})
	if err := g.Report(t.Context(), report("https://a", "eu", true)); err != nil {
		t.Fatal(err)
	}
	if recs, err := g.Snapshot(t.Context()); err != nil || len(recs) != 1 {
		t.Fatalf("Snapshot = %v, %v", recs, err)
	}
	if err := g.Report(t.Context(), report("https://b", "eu", true)); err != nil {
		t.Fatal(err)
	}
	if recs, _ := g.Snapshot(t.Context()); len(recs) != 1 {
		t.Errorf("snapshot refreshed within a second: %d edges", len(recs))
	}
	clk.add(time.Second)
	if recs, _ := g.Snapshot(t.Context()); len(recs) != 2 {
		t.Errorf("snapshot not refreshed after a second: %d edges", len(recs))
	}
	st.Close()
	clk.add(time.Second)
	recs, err := g.Snapshot(t.Context())
	if err == nil || len(recs) != 2 {
		t.Errorf("closed store: %d edges, err %v; want the last good 2 and the error", len(recs), err)
	}
}

// gauges reads xet_origin_edges as "region/state" → value.
func gauges(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "xet_origin_edges" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["region"]+"/"+l["state"]] = m.GetGauge().GetValue()
		}
	}
	return out
}
