package index_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestConformanceDecorated runs the conformance suite over the metrics and timeout decorators
// (backend's tests run it over the whole production stack on SQLite and Postgres).
func TestConformanceDecorated(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index {
		tm, err := index.NewTimeouts(openSQLite(t), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		m, err := index.NewMetrics(tm, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}

// TestMetrics checks the method and result labels of the call histogram.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	db := openSQLite(t)
	m, err := index.NewMetrics(db, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := index.NewMetrics(db, reg); err != nil { // shares the histogram
		t.Fatalf("second decorator on one registry: %v", err)
	}
	ctx := context.Background()
	g := indextest.NewGen(3)
	r := g.Registration("models/a/b", 1, 1, 0)
	if _, err := m.RegisterShard(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := m.File(ctx, r.Files[0].Hash, "models/a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.File(ctx, r.Files[0].Hash, "models/other"); !errors.Is(err, index.ErrNotFound) {
		t.Fatal(err)
	}
	if err := m.Hide(ctx, "", nil); !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("Hide of an empty scope: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.XorbSize(cancelled, hash.Hash{}); err == nil {
		t.Fatal("XorbSize with a cancelled context succeeded")
	}
	tm, err := index.NewTimeouts(stalledIndex{}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := index.NewMetrics(tm, reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.XorbSize(ctx, hash.Hash{}); !errors.Is(err, index.ErrUnavailable) {
		t.Fatal(err)
	}

	counts := map[[2]string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "xet_origin_index_call_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			var k [2]string
			for _, l := range s.GetLabel() {
				if l.GetName() == "method" {
					k[0] = l.GetValue()
				} else if l.GetName() == "result" {
					k[1] = l.GetValue()
				}
			}
			counts[k] += s.GetHistogram().GetSampleCount()
		}
	}
	want := map[[2]string]uint64{
		{"RegisterShard", "ok"}: 1, {"File", "ok"}: 1, {"File", "not_found"}: 1, {"Hide", "invalid"}: 1,
		{"XorbSize", "canceled"}: 1, {"XorbSize", "unavailable"}: 1,
	}
	if len(counts) != len(want) {
		t.Errorf("observed %v, want %v", counts, want)
	}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("calls %v: %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
}
