package metacache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

var errNotFound = errors.New("fake: not found")

// fakeOrigin serves records visible in the scopes listed, counts calls, and can hold calls
// until release is closed.
type fakeOrigin struct {
	mu       sync.Mutex
	visible  map[string]bool // scope + file string
	records  map[hash.Hash]*recon.FileRecord
	layouts  map[hash.Hash]*xorb.Layout
	files    atomic.Int64
	checks   atomic.Int64
	layoutsN atomic.Int64
	gate     chan struct{} // nil: no waiting
	entered  chan struct{} // receives once per File call when not nil (buffered 1)
	lgate    chan struct{} // Layouts waits for it when not nil
	asked    [][]hash.Hash // the hashes of every Layouts call, guarded by mu
}

func (f *fakeOrigin) wait(ctx context.Context) error {
	if f.gate == nil {
		return nil
	}
	select {
	case <-f.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeOrigin) isVisible(h hash.Hash, scope string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.visible[scope+h.String()]
}

func (f *fakeOrigin) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	f.files.Add(1)
	if f.entered != nil {
		select {
		case f.entered <- struct{}{}:
		default:
		}
	}
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	if !f.isVisible(h, scope) {
		return nil, errNotFound
	}
	return f.records[h], nil
}

func (f *fakeOrigin) Visible(ctx context.Context, h hash.Hash, scope string) error {
	f.checks.Add(1)
	if !f.isVisible(h, scope) {
		return errNotFound
	}
	return nil
}

func (f *fakeOrigin) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	f.layoutsN.Add(1)
	f.mu.Lock()
	f.asked = append(f.asked, append([]hash.Hash(nil), hs...))
	f.mu.Unlock()
	if f.lgate != nil {
		select {
		case <-f.lgate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := map[hash.Hash]*xorb.Layout{}
	for _, h := range hs {
		if l := f.layouts[h]; l != nil {
			out[h] = l
		}
	}
	return out, nil
}

func newFake() (*fakeOrigin, hash.Hash) {
	b := xorb.NewBuilder(xorb.None)
	b.Add([]byte("hello"), hash.Chunk([]byte("hello")))
	_, l := b.Finish()
	fh := hash.File([]hash.Leaf{{Hash: l.ChunkHashes[0], Size: 5}})
	rec := &recon.FileRecord{Hash: fh, Size: 5, Terms: []recon.Term{{Xorb: l.Hash, Start: 0, End: 1, RawBytes: 5, ByteEnd: l.StoredEnds[0]}}}
	return &fakeOrigin{
		visible: map[string]bool{"a" + fh.String(): true, "b" + fh.String(): true},
		records: map[hash.Hash]*recon.FileRecord{fh: rec},
		layouts: map[hash.Hash]*xorb.Layout{l.Hash: l},
	}, fh
}

func newCache(t *testing.T, f *fakeOrigin, now func() time.Time) *Cache {
	t.Helper()
	c, err := New(Options{Origin: f, MaxBytes: 1 << 20, ExpectedEntries: 100, VisibilityTTL: time.Minute,
		Now: now, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestHitsAndVisibility(t *testing.T) {
	f, fh := newFake()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := newCache(t, f, clock)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := c.File(ctx, fh, "a"); err != nil {
			t.Fatal(err)
		}
		c.Wait()
	}
	if n := f.files.Load(); n != 1 {
		t.Errorf("3 lookups made %d origin calls, want 1", n)
	}
	// Another scope: the record is cached, only visibility is checked (no record transfer).
	if _, err := c.File(ctx, fh, "b"); err != nil {
		t.Fatal(err)
	}
	if f.files.Load() != 1 || f.checks.Load() != 1 {
		t.Errorf("second scope: %d record fetches, %d checks; want 1 and 1", f.files.Load(), f.checks.Load())
	}
	if _, err := c.File(ctx, fh, "c"); !errors.Is(err, errNotFound) {
		t.Errorf("invisible scope: %v, want the origin's not-found", err)
	}
	// After the TTL, visibility is checked again.
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if _, err := c.File(ctx, fh, "a"); err != nil || f.checks.Load() != 3 {
		t.Errorf("after TTL: err %v, checks %d, want 3", err, f.checks.Load())
	}
}

func TestRevokeStopsServing(t *testing.T) {
	f, fh := newFake()
	c := newCache(t, f, nil)
	ctx := context.Background()
	if _, err := c.File(ctx, fh, "a"); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	f.mu.Lock()
	delete(f.visible, "a"+fh.String())
	f.mu.Unlock()
	// Still cached (within the TTL) until the revocation arrives.
	if _, err := c.File(ctx, fh, "a"); err != nil {
		t.Fatalf("before the event: %v", err)
	}
	for _, files := range [][]hash.Hash{{fh}, nil} {
		c.Revoke("a", files)
		if _, err := c.File(ctx, fh, "a"); !errors.Is(err, errNotFound) {
			t.Errorf("after Revoke(%v): %v, want not found", files, err)
		}
	}
	if _, err := c.File(ctx, fh, "b"); err != nil {
		t.Errorf("other scope after a revocation: %v", err)
	}
}

// TestVisible: the transfer route's check answers from the visibility a File lookup (or an
// earlier check) cached, without asking the origin or fetching a record; a revocation makes
// the next check ask the origin, which then says not visible; other scopes are untouched.
func TestVisible(t *testing.T) {
	f, fh := newFake()
	c := newCache(t, f, nil)
	ctx := context.Background()
	if _, err := c.File(ctx, fh, "a"); err != nil {
		t.Fatal(err)
	}
	files, checks := f.files.Load(), f.checks.Load()
	for range 3 {
		if err := c.Visible(ctx, fh, "a"); err != nil {
			t.Fatalf("visible after File: %v", err)
		}
	}
	if err := c.Visible(ctx, fh, "b"); err != nil { // not cached: one body-less check
		t.Fatalf("other scope: %v", err)
	}
	if err := c.Visible(ctx, fh, "b"); err != nil {
		t.Fatalf("other scope, cached: %v", err)
	}
	if f.files.Load() != files || f.checks.Load() != checks+1 {
		t.Fatalf("origin asked %d records and %d checks, want 0 and 1", f.files.Load()-files, f.checks.Load()-checks)
	}
	f.mu.Lock()
	delete(f.visible, "a"+fh.String())
	f.mu.Unlock()
	if err := c.Visible(ctx, fh, "a"); err != nil {
		t.Fatalf("before the event (cached): %v", err)
	}
	c.Revoke("a", []hash.Hash{fh})
	if err := c.Visible(ctx, fh, "a"); !errors.Is(err, errNotFound) {
		t.Fatalf("after the revocation: %v, want not found", err)
	}
	if err := c.Visible(ctx, fh, "b"); err != nil {
		t.Fatalf("other scope after the revocation: %v", err)
	}
	if err := c.Visible(ctx, hash.Chunk([]byte("unknown")), "a"); !errors.Is(err, errNotFound) {
		t.Fatalf("unknown file: %v", err)
	}
}

func TestRevokeDuringFill(t *testing.T) {
	f, fh := newFake()
	f.gate, f.entered = make(chan struct{}), make(chan struct{}, 1)
	c := newCache(t, f, nil)
	done := make(chan error, 1)
	go func() { _, err := c.File(context.Background(), fh, "a"); done <- err }()
	<-f.entered        // the fill is inside the origin call
	c.Revoke("a", nil) // arrives while the fill is in flight
	close(f.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The answer obtained before the revocation must not be remembered.
	if c.files.Fresh(fh, "a") {
		t.Error("a fill that raced a revocation stored its visibility")
	}
}

func TestConcurrentMissesCollapseAndSurviveCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, fh := newFake()
		f.gate = make(chan struct{})
		c := newCache(t, f, nil)
		const n = 16
		var wg sync.WaitGroup
		errs := make([]error, n)
		cancelled, cancel := context.WithCancel(context.Background())
		for i := 0; i < n; i++ {
			ctx := context.Background()
			if i == 0 {
				ctx = cancelled
			}
			wg.Add(1)
			go func() { defer wg.Done(); _, errs[i] = c.File(ctx, fh, "a") }()
		}
		synctest.Wait() // one caller is inside the origin call, the others wait on its flight
		cancel()        // one caller leaves; the fill must go on for the others
		synctest.Wait()
		close(f.gate)
		wg.Wait()
		if !errors.Is(errs[0], context.Canceled) {
			t.Errorf("cancelled caller: %v", errs[0])
		}
		for i := 1; i < n; i++ {
			if errs[i] != nil {
				t.Errorf("caller %d: %v", i, errs[i])
			}
		}
		if got := f.files.Load(); got != 1 {
			t.Errorf("%d concurrent misses made %d origin calls, want 1", n, got)
		}
	})
}

func TestLayouts(t *testing.T) {
	f, _ := newFake()
	c := newCache(t, f, nil)
	var xh hash.Hash
	for h := range f.layouts {
		xh = h
	}
	for i := 0; i < 2; i++ {
		l, err := c.Layout(context.Background(), xh)
		if err != nil || l.Hash != xh {
			t.Fatalf("layout: %v", err)
		}
		c.Wait()
	}
	if f.layoutsN.Load() != 1 {
		t.Errorf("%d layout calls, want 1", f.layoutsN.Load())
	}
	if _, err := c.Layout(context.Background(), hash.Chunk([]byte("x"))); !errors.Is(err, ErrMissingLayout) {
		t.Errorf("unknown xorb: %v", err)
	}
}

// TestRefreshAheadStopsServingAHiddenFile: with refresh-ahead on, a file hidden on the origin
// with no revocation event reaching the edge is still served only until its answer's
// re-check (5 s before the 30 s TTL here), never past the TTL; while it was visible, requests
// after the first TTL were answered without an origin call on their path.
func TestRefreshAheadStopsServingAHiddenFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, fh := newFake()
		c, err := New(Options{Origin: f, MaxBytes: 1 << 20, ExpectedEntries: 100, VisibilityTTL: 30 * time.Second,
			RefreshAhead: 5 * time.Second, NotVisible: func(err error) bool { return errors.Is(err, errNotFound) },
			Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		get := func() error { _, err := c.File(ctx, fh, "a"); return err }
		for i := range 40 { // a request a second for 40 s
			if err := get(); err != nil {
				t.Fatalf("request at %d s: %v", i, err)
			}
			c.Wait()
			time.Sleep(time.Second)
			synctest.Wait()
		}
		// One record fetch at 0 s, re-checks ahead at 25 s (background), none on a request's path.
		if f.files.Load() != 1 || f.checks.Load() != 1 {
			t.Fatalf("40 s of requests: %d record fetches, %d checks; want 1 and 1 (the re-check at 25 s)", f.files.Load(), f.checks.Load())
		}
		f.mu.Lock()
		delete(f.visible, "a"+fh.String()) // hidden at 40 s; no Revoke (the event stream is down)
		f.mu.Unlock()
		var stopped time.Duration
		start := time.Now()
		for range 40 {
			if err := get(); err != nil {
				if !errors.Is(err, errNotFound) {
					t.Fatal(err)
				}
				stopped = time.Since(start)
				break
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		// The answer renewed at 25 s lives to 55 s and is re-checked at 50 s: 10 s after the hide.
		if stopped == 0 || stopped > 15*time.Second {
			t.Fatalf("served %v after the hide (0: never stopped), want it stopped by the re-check at 50 s", stopped)
		}
	})
}

// addLayouts gives the fake origin n more xorbs and returns their hashes.
func (f *fakeOrigin) addLayouts(n int) []hash.Hash {
	var hs []hash.Hash
	for i := range n {
		b := xorb.NewBuilder(xorb.None)
		data := []byte(fmt.Sprintf("xorb %d", i))
		b.Add(data, hash.Chunk(data))
		_, l := b.Finish()
		f.layouts[l.Hash] = l
		hs = append(hs, l.Hash)
	}
	return hs
}

// TestWarmLayouts: WarmLayouts asks the origin once for the layouts neither cached nor being
// fetched; a Layout call for one of them meanwhile waits for that batch instead of asking
// itself, also after the batch's caller gave up; afterwards they are hits. A xorb the batch did
// not get is asked again by Layout, which says it is missing.
func TestWarmLayouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := newFake()
		hs := f.addLayouts(3)
		missing := hash.Chunk([]byte("no such xorb"))
		c := newCache(t, f, nil)
		if _, err := c.Layout(context.Background(), hs[0]); err != nil {
			t.Fatal(err)
		}
		c.Wait()
		f.lgate = make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		warmErr := make(chan error, 1)
		go func() { warmErr <- c.WarmLayouts(ctx, append(hs, missing, hs[1])) }()
		synctest.Wait()
		var joined *xorb.Layout
		var joinErr error
		done := make(chan struct{})
		go func() { defer close(done); joined, joinErr = c.Layout(context.Background(), hs[1]) }()
		synctest.Wait()
		// A second batch while the first runs asks for nothing the first asks for.
		if err := c.WarmLayouts(context.Background(), hs); err != nil {
			t.Fatal(err)
		}
		cancel() // the batch's caller leaves; the batch goes on for the Layout call waiting on it
		if err := <-warmErr; !errors.Is(err, context.Canceled) {
			t.Errorf("WarmLayouts after its ctx ended: %v, want context.Canceled", err)
		}
		close(f.lgate)
		<-done
		if joinErr != nil || joined == nil || joined.Hash != hs[1] {
			t.Fatalf("Layout during the batch: %v, %v", joined, joinErr)
		}
		synctest.Wait()
		f.mu.Lock()
		asked := f.asked
		f.mu.Unlock()
		if len(asked) != 2 || len(asked[1]) != 3 || asked[1][0] != hs[1] || asked[1][1] != hs[2] || asked[1][2] != missing {
			t.Fatalf("origin Layouts calls %v, want [%v] then [%v %v %v]", asked, hs[0], hs[1], hs[2], missing)
		}
		for _, h := range hs {
			if l, err := c.Layout(context.Background(), h); err != nil || l.Hash != h {
				t.Fatalf("Layout after the batch: %v", err)
			}
		}
		if n := f.layoutsN.Load(); n != 2 {
			t.Fatalf("%d origin Layouts calls after the batch, want 2", n)
		}
		if _, err := c.Layout(context.Background(), missing); !errors.Is(err, ErrMissingLayout) {
			t.Fatalf("a xorb the origin lacks: %v", err)
		}
		if n := f.layoutsN.Load(); n != 3 {
			t.Fatalf("%d origin Layouts calls, want 3 (the missing xorb is asked again)", n)
		}
	})
}

// TestCloseEndsWarmLayouts: Close does not wait out a batch the origin holds: it ends it.
func TestCloseEndsWarmLayouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := newFake()
		hs := f.addLayouts(2)
		f.lgate = make(chan struct{})
		c, err := New(Options{Origin: f, MaxBytes: 1 << 20, ExpectedEntries: 100, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		if err := c.WarmLayouts(ctx, hs); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WarmLayouts past its deadline: %v", err)
		}
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("Close waits for a batch the origin holds")
		}
	})
}
