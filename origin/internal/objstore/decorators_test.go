package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/origin/internal/objstore/objstoretest"
)

// decorators are every ObjectStore decorator of this package. A new one belongs here.
var decorators = []any{
	(*objstore.Timeouts)(nil),
	(*objstore.Metrics)(nil),
}

// explicitMethods reports what keeps the pointer-to-struct type of d from declaring every
// method of iface itself: not implementing it, or an embedded field (whose methods would be
// promoted, so a method added to the interface would bypass the decorator unseen).
func explicitMethods(d any, iface reflect.Type) []string {
	pt := reflect.TypeOf(d)
	var bad []string
	if !pt.Implements(iface) {
		bad = append(bad, "does not implement "+iface.String())
	}
	for f := range pt.Elem().Fields() {
		if f.Anonymous {
			bad = append(bad, "embeds "+f.Type.String())
		}
	}
	return bad
}

func TestDecoratorsDeclareEveryMethod(t *testing.T) {
	iface := reflect.TypeFor[objstore.ObjectStore]()
	for _, d := range decorators {
		if bad := explicitMethods(d, iface); len(bad) > 0 {
			t.Errorf("%T: %v", d, bad)
		}
	}
	if bad := explicitMethods(&paceStore{}, iface); len(bad) == 0 {
		t.Error("paceStore embeds objstore.ObjectStore, yet passes the guard")
	}
}

// TestConformanceDecorated runs the conformance suite over both decorators on a local store.
// (backend's tests run it over the production stack on MinIO and local disk.)
func TestConformanceDecorated(t *testing.T) {
	objstoretest.Run(t, func(tb testing.TB) objstore.ObjectStore {
		l := newLocal(tb)
		tm, err := objstore.NewTimeouts(l, objstore.TimeoutOptions{Timeout: 10 * time.Second, LocalBodies: true})
		if err != nil {
			tb.Fatal(err)
		}
		m, err := objstore.NewMetrics(tm, prometheus.NewRegistry())
		if err != nil {
			tb.Fatal(err)
		}
		return m
	})
}

// TestMetrics checks the call histogram's labels and the byte counts.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := objstore.NewMetrics(newLocal(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	// A second decorator on the same registry shares the collectors.
	m2, err := objstore.NewMetrics(newLocal(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := []byte("0123456789")
	if err := m.Put(ctx, "a/b", bytes.NewReader(data), 10); err != nil {
		t.Fatal(err)
	}
	if err := m2.Create(ctx, "a/b", bytes.NewReader(data), 10); err != nil {
		t.Fatal(err)
	}
	if err := m.Create(ctx, "a/b", bytes.NewReader(data), 10); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := m.Put(ctx, "a/c", strings.NewReader("short"), 10); !errors.Is(err, objstore.ErrSize) {
		t.Fatalf("short put: %v", err)
	}
	rc, err := m.GetRange(ctx, "a/b", 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	rc, _, err = m.Get(ctx, "a/b")
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if _, _, err := m.Get(ctx, "a/missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing get: %v", err)
	}
	if _, err := m.GetRange(ctx, "a/b", 8, 5); !errors.Is(err, objstore.ErrRange) {
		t.Fatalf("bad range: %v", err)
	}
	if _, err := m.Stat(ctx, "../x"); !errors.Is(err, objstore.ErrKey) {
		t.Fatalf("bad key: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	m.Ping(cancelled) // whatever Local answers, it is observed once under Ping
	if err := m.Delete(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}

	bytesBy := map[string]float64{}
	counts := map[[2]string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "xet_origin_objstore_bytes_total" {
			for _, s := range mf.GetMetric() {
				bytesBy[s.GetLabel()[0].GetValue()] += s.GetCounter().GetValue()
			}
		}
		if mf.GetName() != "xet_origin_objstore_call_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			var k [2]string
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "method":
					k[0] = l.GetValue()
				case "result":
					k[1] = l.GetValue()
				}
			}
			counts[k] += s.GetHistogram().GetSampleCount()
		}
	}
	for k, n := range map[[2]string]uint64{
		{"Put", "ok"}: 1, {"Put", "size"}: 1, {"Create", "ok"}: 1, {"Create", "exists"}: 1,
		{"GetRange", "ok"}: 1, {"GetRange", "range"}: 1, {"Get", "ok"}: 1, {"Get", "not_found"}: 1,
		{"Stat", "key"}: 1, {"Delete", "ok"}: 1,
	} {
		if counts[k] != n {
			t.Errorf("calls %v: %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
	if want := map[string]float64{"Put": 10, "Create": 10, "Get": 10, "GetRange": 5}; !maps.Equal(bytesBy, want) {
		t.Errorf("bytes by method %v, want %v", bytesBy, want)
	}
	var pings uint64
	for k, n := range counts {
		if k[0] == "Ping" {
			pings += n
		}
	}
	if pings != 1 {
		t.Errorf("Ping observed %d times, want 1", pings)
	}
}

// stallStore answers nothing: every call waits for its context.
type stallStore struct{ objstore.ObjectStore }

func (stallStore) Stat(ctx context.Context, _ string) (int64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}
func (stallStore) Delete(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
func (stallStore) Ping(ctx context.Context) error             { <-ctx.Done(); return ctx.Err() }
func (stallStore) MoveMatch(ctx context.Context, _, _, _ string) error {
	<-ctx.Done()
	return ctx.Err()
}
func (stallStore) List(ctx context.Context, _ string, _ func(objstore.ObjectInfo) error) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestTimeoutsCalls: the calls without a body are bounded too.
func TestTimeoutsCalls(t *testing.T) {
	const d = 50 * time.Millisecond
	b := newTimeouts(t, stallStore{}, d)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Stat":   func() error { _, err := b.Stat(ctx, "k"); return err },
		"Delete": func() error { return b.Delete(ctx, "k") },
		"Ping":   func() error { return b.Ping(ctx) },
		"List": func() error {
			return b.List(ctx, "", func(objstore.ObjectInfo) error { return nil })
		},
		"MoveMatch": func() error {
			m, ok := objstore.MatchMoverOf(b)
			if !ok {
				t.Fatal("no MatchMover under Timeouts")
			}
			return m.MoveMatch(ctx, "k", "trash/k", "etag")
		},
	} {
		start := time.Now()
		if err := call(); !errors.Is(err, objstore.ErrUnavailable) {
			t.Errorf("stalled %s: %v, want objstore.ErrUnavailable", name, err)
		}
		if took := time.Since(start); took > 20*d {
			t.Errorf("stalled %s failed after %v, bound %v", name, took, d)
		}
	}
}
