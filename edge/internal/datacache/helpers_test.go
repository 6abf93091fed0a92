package datacache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// object is a real xorb built with xorb.Builder: its chunk area and layout.
type object struct {
	body []byte
	l    *xorb.Layout
}

// buildXorb makes a xorb of n chunks of minSize..maxSize raw bytes, alternating compressible
// and random runs so that all three schemes can appear.
func buildXorb(t testing.TB, seed uint64, n, minSize, maxSize int) object {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 42))
	b := xorb.NewBuilder(xorb.Auto)
	for i := 0; i < n; i++ {
		raw := make([]byte, minSize+rng.IntN(maxSize-minSize+1))
		if (i/8)%2 == 0 {
			for j := range raw {
				raw[j] = byte(j/16) ^ byte(i)
			}
		} else {
			for j := range raw {
				raw[j] = byte(rng.Uint32())
			}
		}
		if !b.Add(raw, hash.Chunk(raw)) {
			t.Fatalf("builder refused chunk %d", i)
		}
	}
	body, l := b.Finish()
	if err := l.Verify(); err != nil {
		t.Fatal(err)
	}
	return object{body: body, l: l}
}

type fetchKey struct {
	h          hash.Hash
	start, end int64
}

// fakeFetcher serves the chunk areas of real xorbs and counts what it was asked for.
type fakeFetcher struct {
	objects map[hash.Hash][]byte

	// gate, when set, holds every fetch until it is closed (or the fetch's context ends);
	// entered receives one value per fetch that reached the gate.
	gate    chan struct{}
	entered chan fetchKey
	// corrupt, when set, may change the bytes of a transfer before they are sent.
	corrupt func(k fetchKey, b []byte)
	err     error // returned by every fetch when set
	// answer, when set, makes the answer's body from the bytes asked for and the number of
	// times this range was asked before (0 for the first): faults of a transfer.
	answer func(k fetchKey, before int, b []byte) io.Reader

	mu      sync.Mutex
	calls   map[fetchKey]int
	total   int
	bytes   int64
	ctxErrs []error // the fetch context's error after the gate opened
}

func newFakeFetcher(objs ...object) *fakeFetcher {
	f := &fakeFetcher{objects: make(map[hash.Hash][]byte), calls: make(map[fetchKey]int)}
	for _, o := range objs {
		f.objects[o.l.Hash] = o.body
	}
	return f
}

func (f *fakeFetcher) FetchXorbRange(ctx context.Context, h hash.Hash, start, end int64) (io.ReadCloser, error) {
	k := fetchKey{h, start, end}
	f.mu.Lock()
	before := f.calls[k]
	f.calls[k]++
	f.total++
	body, ok := f.objects[h]
	gate, entered, corrupt, ferr, answer := f.gate, f.entered, f.corrupt, f.err, f.answer
	f.mu.Unlock()
	if entered != nil {
		entered <- k
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		f.mu.Lock()
		f.ctxErrs = append(f.ctxErrs, ctx.Err())
		f.mu.Unlock()
	}
	if ferr != nil {
		return nil, ferr
	}
	if !ok || start < 0 || end > int64(len(body)) || start >= end {
		return nil, fmt.Errorf("fake origin: no bytes [%d,%d) of %s", start, end, h)
	}
	b := bytes.Clone(body[start:end])
	if corrupt != nil {
		corrupt(k, b)
	}
	f.mu.Lock()
	f.bytes += int64(len(b))
	f.mu.Unlock()
	if answer != nil {
		return io.NopCloser(answer(k, before, b)), nil
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// cutReader sends the first n bytes of b, then fails with err (io.EOF: a short answer).
type cutReader struct {
	b   []byte
	err error
}

func (r *cutReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// heldReader sends head, then blocks until release is closed, then sends tail.
type heldReader struct {
	head, tail []byte
	release    chan struct{}
	held       chan struct{} // closed when the head has been read and the reader blocks
	once       sync.Once
}

func (r *heldReader) Read(p []byte) (int, error) {
	if len(r.head) > 0 {
		n := copy(p, r.head)
		r.head = r.head[n:]
		return n, nil
	}
	r.once.Do(func() { close(r.held) })
	<-r.release
	if len(r.tail) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.tail)
	r.tail = r.tail[n:]
	return n, nil
}

func (f *fakeFetcher) set(fn func(f *fakeFetcher)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeFetcher) counts() (total int, maxPerKey int, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.calls {
		maxPerKey = max(maxPerKey, n)
	}
	return f.total, maxPerKey, f.bytes
}

// testCache opens a cache over dir with its own registry.
func testCache(t testing.TB, dir string, f Fetcher, maxBytes, segment int64) (*Cache, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := Open(context.Background(), Options{Dir: dir, MaxBytes: maxBytes, Fetcher: f,
		SegmentBytes: segment, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, reg
}

// metric returns the value of the named counter or gauge in reg.
func metric(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// chunkRange returns the stored byte range of chunks [a, b).
func chunkRange(l *xorb.Layout, a, b int) (int64, int64) {
	s, e := l.ByteRange(uint32(a), uint32(b))
	return int64(s), int64(e)
}

// mustRead reads [start, end) and checks the bytes against the object.
func mustRead(t testing.TB, c *Cache, o object, start, end int64) {
	t.Helper()
	got, err := c.ReadBytes(context.Background(), o.l, start, end)
	if err != nil {
		t.Fatalf("ReadBytes [%d,%d): %v", start, end, err)
	}
	if !bytes.Equal(got, o.body[start:end]) {
		t.Fatalf("ReadBytes [%d,%d): wrong bytes", start, end)
	}
}

// labelled returns the value of the counter name{reason=reason} in reg (0 when absent).
func labelled(t testing.TB, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// labelled2 returns the value of the counter name{label=value} in reg (0 when absent).
func labelled2(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// chainKeys are the origin requests a cold read of consecutive segments segs makes when none
// is in flight: one per chain (chain.go).
func chainKeys(c *Cache, l *xorb.Layout, segs []span) []fetchKey {
	var out []fetchKey
	for _, ch := range c.chains(segs) {
		out = append(out, fetchKey{l.Hash, ch[0].start, ch[len(ch)-1].end})
	}
	return out
}
