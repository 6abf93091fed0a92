// Package objstoretest is the conformance suite every objstore.ObjectStore passes, and the
// benchmarks run on each of them.
//
//	func TestLocal(t *testing.T) { objstoretest.Run(t, newLocal) }
//	func BenchmarkLocal(b *testing.B) { objstoretest.Bench(b, newLocal) }
package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// Factory returns a new, empty store for one test or benchmark, and registers its cleanup
// with tb.
type Factory func(tb testing.TB) objstore.ObjectStore

// Run runs the conformance suite against stores made by newStore, one fresh store per subtest.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.ObjectStore)
	}{
		{"RoundTrip", testRoundTrip},
		{"Range", testRange},
		{"NotFound", testNotFound},
		{"Delete", testDelete},
		{"Overwrite", testOverwrite},
		{"NestedKeys", testNestedKeys},
		{"ConcurrentPutSameKey", testConcurrentPut},
		{"Create", testCreate},
		{"CreateFailed", testCreateFailed},
		{"ConcurrentCreateSameKey", testConcurrentCreate},
		{"ShortBody", testShortBody},
		{"LongBody", testLongBody},
		{"ReaderError", testReaderError},
		{"CancelMidPut", testCancelMidPut},
		{"CancelledBeforePut", testCancelledBeforePut},
		{"BadKeys", testBadKeys},
		{"Ping", testPing},
		{"Large", testLarge},
		{"List", testList},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// Data returns n deterministic pseudo-random bytes for seed.
func Data(seed uint64, n int) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b) // never fails
	return b
}

func put(t *testing.T, s objstore.ObjectStore, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put(%s, %d bytes): %v", key, len(data), err)
	}
}

// mustGet reads key whole and checks that the reported size matches the bytes.
func mustGet(t *testing.T, s objstore.ObjectStore, key string) []byte {
	t.Helper()
	rc, size, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%s): read: %v", key, err)
	}
	if int64(len(got)) != size {
		t.Fatalf("Get(%s): size %d, read %d bytes", key, size, len(got))
	}
	return got
}

func wantMissing(t *testing.T, s objstore.ObjectStore, key string) {
	t.Helper()
	if _, err := s.Stat(context.Background(), key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat(%s) after failed Put: err = %v, want ErrNotFound", key, err)
	}
	if rc, _, err := s.Get(context.Background(), key); !errors.Is(err, objstore.ErrNotFound) {
		if err == nil {
			rc.Close()
		}
		t.Fatalf("Get(%s) after failed Put: err = %v, want ErrNotFound", key, err)
	}
}

func testRoundTrip(t *testing.T, s objstore.ObjectStore) {
	for i, n := range []int{0, 1, 7, 4096, 1<<20 + 3} {
		key := fmt.Sprintf("xorbs/default/%064x", i)
		data := Data(uint64(i), n)
		put(t, s, key, data)
		if got := mustGet(t, s, key); !bytes.Equal(got, data) {
			t.Errorf("Get(%s): %d bytes differ from the %d put", key, len(got), n)
		}
		size, err := s.Stat(context.Background(), key)
		if err != nil || size != int64(n) {
			t.Errorf("Stat(%s) = %d, %v; want %d", key, size, err, n)
		}
	}
}

func testRange(t *testing.T, s objstore.ObjectStore) {
	const n = 100_003
	key := "xorbs/default/range"
	data := Data(7, n)
	put(t, s, key, data)
	tests := []struct {
		off, n  int64
		wantErr error
	}{
		{0, n, nil},
		{0, 1, nil},
		{n - 1, 1, nil},
		{12345, 54321, nil},
		{0, 0, nil},
		{n, 0, nil},
		{n - 10, 11, objstore.ErrRange},
		{n, 1, objstore.ErrRange},
		{n + 5, 1, objstore.ErrRange},
		{-1, 5, objstore.ErrRange},
		{5, -1, objstore.ErrRange},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d+%d", tc.off, tc.n), func(t *testing.T) {
			rc, err := s.GetRange(context.Background(), key, tc.off, tc.n)
			if tc.wantErr != nil {
				if err == nil {
					rc.Close()
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("GetRange: err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("GetRange: %v", err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if !bytes.Equal(got, data[tc.off:tc.off+tc.n]) {
				t.Fatalf("GetRange returned %d bytes that differ from the object's", len(got))
			}
		})
	}
	// A range of a missing object is ErrNotFound, whatever the range.
	if _, err := s.GetRange(context.Background(), "xorbs/default/missing", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("GetRange(missing): err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetRange(context.Background(), "xorbs/default/missing", 0, 0); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("GetRange(missing, empty): err = %v, want ErrNotFound", err)
	}
}

func testNotFound(t *testing.T, s objstore.ObjectStore) {
	ctx := context.Background()
	key := "shards/nothing-here"
	if _, _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat: err = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
}

func testDelete(t *testing.T, s objstore.ObjectStore) {
	key := "shards/to-delete"
	put(t, s, key, Data(1, 100))
	if err := s.Delete(context.Background(), key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantMissing(t, s, key)
	if err := s.Delete(context.Background(), key); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	put(t, s, key, Data(2, 10)) // the key is usable again
	if got := mustGet(t, s, key); !bytes.Equal(got, Data(2, 10)) {
		t.Errorf("Put after Delete: got %d bytes that differ", len(got))
	}
}

func testOverwrite(t *testing.T, s objstore.ObjectStore) {
	key := "xorbs/default/overwrite"
	a, b := Data(1, 5000), Data(2, 300)
	put(t, s, key, a)
	put(t, s, key, b)
	if got := mustGet(t, s, key); !bytes.Equal(got, b) {
		t.Fatalf("after overwrite: got %d bytes, want the second object's %d", len(got), len(b))
	}
	if size, err := s.Stat(context.Background(), key); err != nil || size != int64(len(b)) {
		t.Fatalf("Stat after overwrite = %d, %v; want %d", size, err, len(b))
	}
	// A failed overwrite leaves the previous object intact.
	err := s.Put(context.Background(), key, bytes.NewReader(a[:10]), int64(len(a)))
	if !errors.Is(err, objstore.ErrSize) {
		t.Fatalf("short overwrite: err = %v, want ErrSize", err)
	}
	if got := mustGet(t, s, key); !bytes.Equal(got, b) {
		t.Fatalf("after failed overwrite: got %d bytes, want the previous object", len(got))
	}
}

// Keys that share prefixes, directories and fan-out characters stay distinct objects.
func testNestedKeys(t *testing.T, s objstore.ObjectStore) {
	keys := []string{"a", "ab", "abc", "a/b", "a/bc", "a/b/c", "a/b/cd", "x.y", "x-y_z", "A1"}
	for i, k := range keys {
		put(t, s, k, Data(uint64(100+i), 10+i))
	}
	for i, k := range keys {
		if got := mustGet(t, s, k); !bytes.Equal(got, Data(uint64(100+i), 10+i)) {
			t.Errorf("Get(%s): wrong content", k)
		}
	}
}

func testConcurrentPut(t *testing.T, s objstore.ObjectStore) {
	const writers = 8
	key := "xorbs/default/contended"
	contents := make([][]byte, writers)
	for i := range contents {
		contents[i] = Data(uint64(i), 64<<10+i*1000)
	}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	start := make(chan struct{})
	for i := range writers {
		wg.Go(func() {
			<-start
			errs[i] = s.Put(context.Background(), key, bytes.NewReader(contents[i]), int64(len(contents[i])))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	got := mustGet(t, s, key)
	for _, c := range contents {
		if bytes.Equal(got, c) {
			return
		}
	}
	t.Fatalf("after concurrent Puts the object (%d bytes) is none of the contents written", len(got))
}

// Create stores a new object and never replaces one: a second Create of the key, whatever its
// body and size (small, or big enough that the service may answer before reading it), fails
// with ErrExists and leaves the first object as it was. Put still replaces.
func testCreate(t *testing.T, s objstore.ObjectStore) {
	ctx := context.Background()
	key := "xorbs/default/create"
	first := Data(1, 70_000)
	if err := s.Create(ctx, key, bytes.NewReader(first), int64(len(first))); err != nil {
		t.Fatalf("Create of a new key: %v", err)
	}
	if got := mustGet(t, s, key); !bytes.Equal(got, first) {
		t.Fatalf("after Create: %d bytes differ from the %d created", len(got), len(first))
	}
	for _, n := range []int{0, 10, 70_000, 5 << 20} {
		other := Data(2, n)
		err := s.Create(ctx, key, bytes.NewReader(other), int64(n))
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("Create of an existing key with %d bytes: err = %v, want ErrExists", n, err)
		}
		if got := mustGet(t, s, key); !bytes.Equal(got, first) {
			t.Fatalf("Create refused with %d bytes changed the object: %d bytes, want the first %d", n, len(got), len(first))
		}
	}
	second := Data(3, 500)
	put(t, s, key, second)
	if got := mustGet(t, s, key); !bytes.Equal(got, second) {
		t.Fatalf("Put after Create did not replace the object")
	}
	if err := s.Create(ctx, "xorbs/default/create-empty", bytes.NewReader(nil), 0); err != nil {
		t.Fatalf("Create of an empty object: %v", err)
	}
	if err := s.Create(ctx, "xorbs/default/create-empty", bytes.NewReader(nil), 0); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second Create of an empty object: err = %v, want ErrExists", err)
	}
}

// A Create that fails (short body, cancelled) leaves nothing, and the key can be created after.
func testCreateFailed(t *testing.T, s objstore.ObjectStore) {
	ctx := context.Background()
	key := "xorbs/default/create-failed"
	data := Data(4, 100_000)
	if err := s.Create(ctx, key, bytes.NewReader(data[:1000]), int64(len(data))); !errors.Is(err, objstore.ErrSize) {
		t.Fatalf("short Create: err = %v, want ErrSize", err)
	}
	wantMissing(t, s, key)
	cctx, cancel := context.WithCancel(ctx)
	r := &cancellingReader{data: data, after: len(data) / 2, cancel: cancel}
	if err := s.Create(cctx, key, r, int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Create: err = %v, want context.Canceled", err)
	}
	cancel()
	wantMissing(t, s, key)
	if err := s.Create(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Create after failed ones: %v", err)
	}
	if got := mustGet(t, s, key); !bytes.Equal(got, data) {
		t.Fatalf("after Create: object differs")
	}
}

// Of concurrent Creates of one key with different contents exactly one succeeds, the others
// fail with ErrExists, and the object is the winner's bytes, whole.
func testConcurrentCreate(t *testing.T, s objstore.ObjectStore) {
	const writers, rounds = 8, 3
	for round := range rounds {
		key := fmt.Sprintf("xorbs/default/create-contended-%d", round)
		contents := make([][]byte, writers)
		for i := range contents {
			contents[i] = Data(uint64(round*writers+i), 64<<10+i*3000)
		}
		var wg sync.WaitGroup
		errs := make([]error, writers)
		start := make(chan struct{})
		for i := range writers {
			wg.Go(func() {
				<-start
				errs[i] = s.Create(context.Background(), key, bytes.NewReader(contents[i]), int64(len(contents[i])))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: writers %d and %d both created the key", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, objstore.ErrExists):
				t.Fatalf("round %d: writer %d: err = %v, want nil or ErrExists", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer created the key", round)
		}
		if got := mustGet(t, s, key); !bytes.Equal(got, contents[winner]) {
			t.Fatalf("round %d: the object (%d bytes) is not the winner's %d bytes", round, len(got), len(contents[winner]))
		}
	}
}

func testShortBody(t *testing.T, s objstore.ObjectStore) {
	for _, tc := range []struct {
		name      string
		have, say int
	}{
		{"empty", 0, 10},
		{"half", 50_000, 100_000},
		{"one-short", 999, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "xorbs/default/short-" + tc.name
			err := s.Put(context.Background(), key, bytes.NewReader(Data(3, tc.have)), int64(tc.say))
			if !errors.Is(err, objstore.ErrSize) {
				t.Fatalf("Put: err = %v, want ErrSize", err)
			}
			wantMissing(t, s, key)
		})
	}
}

func testLongBody(t *testing.T, s objstore.ObjectStore) {
	for _, tc := range []struct {
		name      string
		have, say int
	}{
		{"zero-declared", 1, 0},
		{"one-long", 1001, 1000},
		{"double", 20_000, 10_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "xorbs/default/long-" + tc.name
			err := s.Put(context.Background(), key, bytes.NewReader(Data(4, tc.have)), int64(tc.say))
			if !errors.Is(err, objstore.ErrSize) {
				t.Fatalf("Put: err = %v, want ErrSize", err)
			}
			wantMissing(t, s, key)
		})
	}
	if err := s.Put(context.Background(), "xorbs/default/negative", bytes.NewReader(nil), -1); !errors.Is(err, objstore.ErrSize) {
		t.Errorf("Put with size -1: err = %v, want ErrSize", err)
	}
}

var errBroken = errors.New("objstoretest: broken reader")

// failingReader yields its data, then fails with err instead of io.EOF.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func testReaderError(t *testing.T, s objstore.ObjectStore) {
	key := "xorbs/default/reader-error"
	err := s.Put(context.Background(), key, &failingReader{data: Data(5, 70_000), err: errBroken}, 200_000)
	if !errors.Is(err, errBroken) {
		t.Fatalf("Put: err = %v, want the reader's error", err)
	}
	wantMissing(t, s, key)
}

// cancellingReader yields data and calls cancel once it has handed out after bytes, then keeps
// yielding: the store must notice the cancelled context by itself.
type cancellingReader struct {
	data   []byte
	after  int
	read   int
	cancel context.CancelFunc
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	if r.read >= r.after {
		r.cancel()
	}
	n := copy(p, r.data)
	if r.read < r.after && r.read+n > r.after {
		n = r.after - r.read
	}
	r.data = r.data[n:]
	r.read += n
	return n, nil
}

func testCancelMidPut(t *testing.T, s objstore.ObjectStore) {
	for _, size := range []int{10_000, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			key := fmt.Sprintf("xorbs/default/cancelled-%d", size)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := &cancellingReader{data: Data(6, size), after: size / 2, cancel: cancel}
			err := s.Put(ctx, key, r, int64(size))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Put: err = %v, want context.Canceled", err)
			}
			wantMissing(t, s, key)
		})
	}
}

func testCancelledBeforePut(t *testing.T, s objstore.ObjectStore) {
	key := "xorbs/default/never"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Put(ctx, key, bytes.NewReader(Data(8, 100)), 100)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Put: err = %v, want context.Canceled", err)
	}
	wantMissing(t, s, key)
}

func testBadKeys(t *testing.T, s objstore.ObjectStore) {
	ctx := context.Background()
	for _, key := range []string{
		"", "/abs", "a//b", "a/", "../escape", "a/../../escape", "a/./b", ".hidden", "a/_fan",
		"back\\slash", "nul\x00", "sp ace", "a/.put-1", string(make([]byte, objstore.MaxKeyLen+1)),
	} {
		if err := s.Put(ctx, key, bytes.NewReader([]byte("x")), 1); !errors.Is(err, objstore.ErrKey) {
			t.Errorf("Put(%q): err = %v, want ErrKey", key, err)
		}
		if err := s.Create(ctx, key, bytes.NewReader([]byte("x")), 1); !errors.Is(err, objstore.ErrKey) {
			t.Errorf("Create(%q): err = %v, want ErrKey", key, err)
		}
		if _, _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrKey) {
			t.Errorf("Get(%q): err = %v, want ErrKey", key, err)
		}
		if _, err := s.GetRange(ctx, key, 0, 1); !errors.Is(err, objstore.ErrKey) {
			t.Errorf("GetRange(%q): err = %v, want ErrKey", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, objstore.ErrKey) {
			t.Errorf("Stat(%q): err = %v, want ErrKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, objstore.ErrKey) {
			t.Errorf("Delete(%q): err = %v, want ErrKey", key, err)
		}
	}
}

func testPing(t *testing.T, s objstore.ObjectStore) {
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// An object past the usual multipart threshold (16 MiB), as big xorbs and shards are.
func testLarge(t *testing.T, s objstore.ObjectStore) {
	if testing.Short() {
		t.Skip("large object in -short mode")
	}
	key := "xorbs/default/large"
	data := Data(9, 20<<20+12345)
	put(t, s, key, data)
	if got := mustGet(t, s, key); !bytes.Equal(got, data) {
		t.Fatalf("large object differs after round trip")
	}
	off, n := int64(13<<20+17), int64(5<<20)
	rc, err := s.GetRange(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("GetRange: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, data[off:off+n]) {
		t.Fatalf("GetRange of the large object: %d bytes, err %v; differs", len(got), err)
	}
}

// Bench measures Put and GetRange throughput on stores made by newStore.
func Bench(b *testing.B, newStore Factory) {
	for _, size := range []int{64 << 10, 16 << 20} {
		b.Run(fmt.Sprintf("Put/%dKiB", size>>10), func(b *testing.B) {
			s := newStore(b)
			data := Data(1, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			i := 0
			for b.Loop() {
				key := fmt.Sprintf("xorbs/default/bench-%d", i%64)
				i++
				if err := s.Put(context.Background(), key, bytes.NewReader(data), int64(size)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, n := range []int{64 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("GetRange/%dKiB", n>>10), func(b *testing.B) {
			s := newStore(b)
			const size = 32 << 20
			key := "xorbs/default/bench-range"
			if err := s.Put(context.Background(), key, bytes.NewReader(Data(2, size)), size); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 256<<10)
			b.SetBytes(int64(n))
			b.ResetTimer()
			i := 0
			for b.Loop() {
				off := int64(i*n) % (size - int64(n))
				i++
				rc, err := s.GetRange(context.Background(), key, off, int64(n))
				if err != nil {
					b.Fatal(err)
				}
				m, err := io.CopyBuffer(writerOnly{io.Discard}, rc, buf)
				rc.Close()
				if err != nil || m != int64(n) {
					b.Fatalf("read %d of %d bytes: %v", m, n, err)
				}
			}
		})
	}
}

// writerOnly hides io.Discard's ReadFrom, so the benchmark reads like a network writer would.
type writerOnly struct{ io.Writer }

// list returns what s.List(prefix) reports, by key, failing on a key reported twice.
func list(t *testing.T, s objstore.ObjectStore, prefix string) map[string]objstore.ObjectInfo {
	t.Helper()
	got := make(map[string]objstore.ObjectInfo)
	err := s.List(context.Background(), prefix, func(o objstore.ObjectInfo) error {
		if _, dup := got[o.Key]; dup {
			t.Errorf("List(%q) reported %s twice", prefix, o.Key)
		}
		got[o.Key] = o
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

func testList(t *testing.T, s objstore.ObjectStore) {
	ctx := context.Background()
	before := time.Now()
	sizes := map[string]int{"a/b/x1": 10, "a/b/x2": 0, "a/c/y3": 300, "z/w4": 7}
	for k, n := range sizes {
		put(t, s, k, Data(uint64(n), n))
	}
	after := time.Now()
	for prefix, want := range map[string][]string{
		"":      {"a/b/x1", "a/b/x2", "a/c/y3", "z/w4"},
		"a/":    {"a/b/x1", "a/b/x2", "a/c/y3"},
		"a/b/":  {"a/b/x1", "a/b/x2"},
		"nope/": nil,
	} {
		got := list(t, s, prefix)
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, want) {
			t.Errorf("List(%q) = %v, want %v", prefix, keys, want)
		}
		for k, o := range got {
			if o.Size != int64(sizes[k]) {
				t.Errorf("List(%q): %s has size %d, want %d", prefix, k, o.Size, sizes[k])
			}
			// S3 reports whole seconds; allow for that and for a store on another clock.
			if o.ModTime.Before(before.Add(-5*time.Second)) || o.ModTime.After(after.Add(5*time.Second)) {
				t.Errorf("List(%q): %s modified %v, written between %v and %v", prefix, k, o.ModTime, before, after)
			}
		}
	}
	for _, bad := range []string{"a", "/a/", "a//", "../", "a/.x/"} {
		err := s.List(ctx, bad, func(objstore.ObjectInfo) error { return nil })
		if !errors.Is(err, objstore.ErrKey) {
			t.Errorf("List(%q) = %v, want ErrKey", bad, err)
		}
	}
	// An error of fn stops the listing and comes back as it is.
	stop := errors.New("stop")
	calls := 0
	err := s.List(ctx, "a/", func(objstore.ObjectInfo) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("List stopped by fn: err %v after %d calls, want %v after 1", err, calls, stop)
	}
	// fn may delete what it is given.
	err = s.List(ctx, "a/b/", func(o objstore.ObjectInfo) error { return s.Delete(ctx, o.Key) })
	if err != nil {
		t.Fatalf("List deleting: %v", err)
	}
	if got := list(t, s, "a/"); len(got) != 1 {
		t.Errorf("after deleting a/b/ in List: %d objects under a/, want 1", len(got))
	}
	wantMissing(t, s, "a/b/x1")
}
